"""Per-case overhead of the instrument (issue 25, item 3): a case's wall time minus its
compile and measure phases, over the whole smoke suite on CPU.

Target: at most 1.5 s per tiny MLP case on a 2-core CPU (the median over the smoke suite's
mlp-classic and mlp-deep cases; every other case is in the table too). The figure is read
from a run file: each record has the runner's wall time for its worker (`worker.wall_s`,
spawn or fork to reap) and the worker's own phase times (`metrics.phase_s`); overhead =
wall - compile - measure, i.e. process start, imports, ISA probe, build, eager first call,
accuracy, memory, record hand-off and exit. Where the memory figures come from the timed
rounds (`metrics.memory_rounds`), the peak's resets and reads (and on GPUs the gc.collect()
before the rounds) run inside the measure phase: they are added back (`mem in rounds`), so
folding the memory pass into the rounds cannot pass the target by moving time between
phases. The verdict is on the median of the runs' medians, so one loaded run cannot decide.

Usage:
  python benchmarks/overhead.py                          # 3 runs of `compilebench run --suite smoke --device cpu`
  python benchmarks/overhead.py --repeat 1
  python benchmarks/overhead.py --root /tmp/main-copy    # the same, with another checkout's harness (before/after)
  python benchmarks/overhead.py --run-file A.json --run-file B.json   # only the tables, from run files
  python benchmarks/overhead.py --save DIR -- --no-preload            # keep the run files; extra `run` arguments
Exit code 0 when the median tiny-MLP overhead meets the target, 1 when it does not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 1.5
SUITE = "smoke"
MLP_WORKLOADS = ("mlp-classic", "mlp-deep")  # the target's "tiny MLP" cases


def memory_in_rounds_s(metrics: dict[str, Any]) -> float:
    """Seconds the memory figures cost inside the measure phase (0 where a pass took them)."""
    rounds = metrics.get("memory_rounds")
    if not isinstance(rounds, dict):
        return 0.0
    spent = rounds.get("spent_s")
    return float(rounds.get("gc_s") or 0.0) + (sum(spent.values()) if isinstance(spent, dict) else 0.0)


def is_tiny_mlp(case_id: str) -> bool:
    return case_id.split("/")[0] in MLP_WORKLOADS and case_id.endswith("/tiny")


def case_overheads(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per record with a worker of its own: wall, compile, measure, overhead, phases."""
    rows = []
    for rec in run["records"]:
        metrics = rec.get("metrics") or {}
        phases = metrics.get("phase_s") or {}
        worker = rec.get("worker") or {}
        wall = worker.get("wall_s")
        if wall is None or worker.get("from_case"):  # derived from a twin: no process of its own
            continue
        compile_s, measure_s = phases.get("compile", 0.0), phases.get("measure", 0.0)
        mem_rounds = memory_in_rounds_s(metrics)
        sources = {(rec.get(v) or {}).get("memory_source") for v in ("eager", "compiled")} - {None}
        rows.append({"case_id": rec["case_id"], "status": rec["status"], "wall_s": wall, "compile_s": compile_s,
                     "measure_s": measure_s, "mem_rounds_s": mem_rounds,
                     "overhead_s": wall - compile_s - measure_s + mem_rounds,
                     "path": worker.get("start", "spawn"), "memory_source": ",".join(sorted(sources)) or "-",
                     "phases": phases})
    return rows


def print_table(rows: list[dict[str, Any]], run: dict[str, Any]) -> float | None:
    """The per-case table; returns the median overhead of the tiny MLP cases."""
    print(f"{'case':<52} {'path':<9} {'memory':<7} {'wall s':>7} {'compile':>8} {'measure':>8} {'mem in rounds':>13} "
          f"{'overhead':>9}  largest other phases")
    for r in rows:
        others = sorted(((v, k) for k, v in r["phases"].items() if k not in ("compile", "measure")), reverse=True)[:3]
        outside = r["wall_s"] - sum(r["phases"].values())
        print(f"{r['case_id']:<52} {r['path']:<9} {r['memory_source']:<7} {r['wall_s']:7.2f} {r['compile_s']:8.2f} "
              f"{r['measure_s']:8.2f} {r['mem_rounds_s']:13.2f} {r['overhead_s']:9.2f}  "
              + ", ".join(f"{k} {v:.2f}" for v, k in others) + f", outside phases {outside:.2f}")
    tiny = [r["overhead_s"] for r in rows if is_tiny_mlp(r["case_id"])]
    every = [r["overhead_s"] for r in rows]
    if every:
        print(f"all {len(every)} case(s): overhead median {statistics.median(every):.2f} s, "
              f"min {min(every):.2f} s, max {max(every):.2f} s")
    print(f"run wall (runner): {run['config'].get('wall_s')} s for {len(rows)} case(s) with a process")
    if not tiny:
        print("no tiny MLP case with a worker wall time")
        return None
    med = statistics.median(tiny)
    print(f"tiny MLP cases ({len(tiny)}): overhead median {med:.2f} s, min {min(tiny):.2f} s, max {max(tiny):.2f} s; "
          f"target <= {TARGET_S} s -> {'PASS' if med <= TARGET_S else 'MISS'}")
    return med


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def run_suite(root: Path, extra: list[str], save: Path | None, index: int) -> tuple[dict[str, Any], float]:
    """One `compilebench run --suite smoke --device cpu` with `root`'s harness; (run, wall s)."""
    with tempfile.TemporaryDirectory(prefix="cb-overhead-") as out:
        cmd = [sys.executable, "-m", "harness", "run", "--suite", SUITE, "--device", "cpu", "--out", out,
               "--no-ingest", *extra]
        env = {**os.environ, "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env, check=False)
        wall = time.perf_counter() - started
        files = list((Path(out) / "runs").glob("*.json"))
        if not files:
            sys.exit(f"overhead: the run wrote no run file (exit {proc.returncode}): {proc.stderr[-2000:]}")
        if save is not None:
            save.mkdir(parents=True, exist_ok=True)
            shutil.copy(files[0], save / f"run{index + 1}-{files[0].name}")
        return json.loads(files[0].read_text()), wall


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-file", action="append", default=[], help="read this run file (repeatable) instead of running")
    parser.add_argument("--repeat", type=int, default=3, help="how many runs of the suite (default 3), each a table")
    parser.add_argument("--root", default=str(ROOT), help="the checkout whose harness runs the suite (default: this one)")
    parser.add_argument("--save", help="copy each run file into this folder")
    parser.add_argument("extra", nargs="*", help="arguments for `compilebench run` (after --)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if not (Path(args.root) / "harness").is_dir():
        parser.error(f"--root {args.root}: no harness/ there; pass a compilebench checkout")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    meds: list[float] = []
    if args.run_file:
        for path in args.run_file:
            run = json.loads(Path(path).read_text())
            print(f"--- {path}")
            med = print_table(case_overheads(run), run)
            meds.append(med if med is not None else float("inf"))
    else:
        root = Path(args.root).resolve()
        for i in range(args.repeat):
            before = load_average()
            run, wall = run_suite(root, args.extra, Path(args.save) if args.save else None, i)
            print(f"--- run {i + 1}/{args.repeat}: `compilebench run --suite {SUITE} --device cpu "
                  f"{' '.join(args.extra)}` from {root}: wall {wall:.1f} s; load average before {before}, "
                  f"after {load_average()}", flush=True)
            med = print_table(case_overheads(run), run)
            meds.append(med if med is not None else float("inf"))
    overall = statistics.median(meds)
    print(f"=== tiny MLP overhead, median of {len(meds)} run(s)' medians: {overall:.2f} s "
          f"(runs: {', '.join(f'{m:.2f}' for m in meds)}); target <= {TARGET_S} s -> "
          f"{'PASS' if overall <= TARGET_S else 'MISS'}")
    return 0 if overall <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
