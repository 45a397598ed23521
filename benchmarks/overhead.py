"""Per-case overhead of the instrument (issue 25, item 3): a case's wall time minus its
compile and measure phases, over the smoke suite's MLP cases on CPU.

Target: at most 1.5 s per tiny MLP case on a 2-core CPU. The figure is read from a run
file: each record has the runner's wall time for its worker (`worker.wall_s`, spawn to
reap) and the worker's own phase times (`metrics.phase_s`); overhead = wall - compile -
measure, i.e. process start, imports, ISA probe, build, eager first call, accuracy,
memory pass, record hand-off and exit.

Usage:
  python benchmarks/overhead.py                   # runs the smoke MLP cases, then the table
  python benchmarks/overhead.py --repeat 2        # twice (shared box: look for outliers)
  python benchmarks/overhead.py --run-file F.json # only the table, from an existing run file
  python benchmarks/overhead.py -- --no-preload   # extra arguments go to `compilebench run`
Exit code 0 when the median tiny-MLP overhead meets the target, 1 when it does not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 1.5
MLP_WORKLOADS = "mlp-classic,mlp-deep"


def case_overheads(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per record: wall, compile, measure, overhead and every other phase."""
    rows = []
    for rec in run["records"]:
        phases = (rec.get("metrics") or {}).get("phase_s") or {}
        wall = (rec.get("worker") or {}).get("wall_s")
        if wall is None:
            continue
        compile_s, measure_s = phases.get("compile", 0.0), phases.get("measure", 0.0)
        rows.append({"case_id": rec["case_id"], "status": rec["status"], "wall_s": wall, "compile_s": compile_s,
                     "measure_s": measure_s, "overhead_s": wall - compile_s - measure_s,
                     "setup_s": phases.get("setup", 0.0), "path": (rec.get("worker") or {}).get("start", "spawn"),
                     "phases": phases})
    return rows


def print_table(rows: list[dict[str, Any]], run: dict[str, Any]) -> float | None:
    print(f"{'case':<52} {'path':<9} {'wall s':>7} {'compile':>8} {'measure':>8} {'overhead':>9}  largest other phases")
    for r in rows:
        others = sorted(((v, k) for k, v in r["phases"].items() if k not in ("compile", "measure")), reverse=True)[:3]
        outside = r["wall_s"] - sum(r["phases"].values())
        print(f"{r['case_id']:<52} {r['path']:<9} {r['wall_s']:7.2f} {r['compile_s']:8.2f} {r['measure_s']:8.2f} "
              f"{r['overhead_s']:9.2f}  " + ", ".join(f"{k} {v:.2f}" for v, k in others) +
              f", outside phases {outside:.2f}")
    tiny = [r["overhead_s"] for r in rows if "/tiny" in r["case_id"] or r["case_id"].endswith("tiny")] or \
           [r["overhead_s"] for r in rows]
    if not tiny:
        print("no records with a worker wall time")
        return None
    med = statistics.median(tiny)
    print(f"overhead per case: median {med:.2f} s, min {min(tiny):.2f} s, max {max(tiny):.2f} s over {len(tiny)} "
          f"case(s); target <= {TARGET_S} s -> {'PASS' if med <= TARGET_S else 'MISS'}")
    print(f"run wall (runner): {run['config'].get('wall_s')} s for {len(rows)} case(s)")
    return med


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def run_smoke(extra: list[str]) -> tuple[dict[str, Any], float]:
    with tempfile.TemporaryDirectory(prefix="cb-overhead-") as out:
        cmd = [sys.executable, "-m", "harness", "run", "--suite", "smoke", "-w", MLP_WORKLOADS, "--device", "cpu",
               "--out", out, "--no-ingest", *extra]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, check=False)
        wall = time.perf_counter() - started
        files = list((Path(out) / "runs").glob("*.json"))
        if not files:
            sys.exit(f"overhead: the run wrote no run file (exit {proc.returncode}): {proc.stderr[-2000:]}")
        return json.loads(files[0].read_text()), wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-file", help="read this run file instead of running the smoke MLP cases")
    parser.add_argument("--repeat", type=int, default=1, help="how many runs (each a table)")
    parser.add_argument("--save", help="copy the last run file here")
    parser.add_argument("extra", nargs="*", help="arguments for `compilebench run` (after --)")
    args = parser.parse_args(argv)
    if args.run_file:
        run = json.loads(Path(args.run_file).read_text())
        med = print_table(case_overheads(run), run)
        return 0 if med is not None and med <= TARGET_S else 1
    meds = []
    for i in range(args.repeat):
        before = load_average()
        run, wall = run_smoke(args.extra)
        print(f"--- run {i + 1}/{args.repeat}: `compilebench run --suite smoke -w {MLP_WORKLOADS} --device cpu "
              f"{' '.join(args.extra)}` wall {wall:.1f} s; load average before {before}, after {load_average()}")
        med = print_table(case_overheads(run), run)
        meds.append(med if med is not None else float("inf"))
        if args.save:
            Path(args.save).write_text(json.dumps(run, indent=1))
    return 0 if min(meds) <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
