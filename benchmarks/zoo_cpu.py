"""The CPU-tiny zoo through the real runner (one fresh worker per case), and what it gives:
pass rate, skips by reason, failures by status, time per model; per compiler.

Target (issue 24): at least 150 architectures of `transformers-zoo` build and run eager on
CPU at tiny size. Exit 1 when fewer are ok (checked on the eager cases of a whole,
unsharded plan), 2 on bad arguments.

    python benchmarks/zoo_cpu.py                       # transformers-zoo-tiny, eager, forward
    python benchmarks/zoo_cpu.py -c inductor --shard 1/10 --timeout 300   # a compiled pass, a tenth
    python benchmarks/zoo_cpu.py -c eager,inductor --scenario forward,train
    python benchmarks/zoo_cpu.py -c eager,inductor -w "$(compilebench expected pick --file \
        results/expected/transformers-zoo-tiny-cpu.json --max-families 24)"   # one model per family
    python benchmarks/zoo_cpu.py --suite diffusers-tiny -c eager,inductor
    python benchmarks/zoo_cpu.py --analyse OUT/runs/RUN.json [--analyse MORE.json]

It runs `python -m harness run --suite SUITE -c COMPILERS --scenario ... --no-ingest --out
OUT`, then reads the run file it wrote (or the files given to --analyse, pooled: shards),
and prints one block per compiler: an eager block says what builds and runs; a compiled
block adds the compiler's own figures (cold compile time, accuracy against eager, graph
breaks, speedup), and the HUD-style headline row (harness/analysis/breadth.py) of each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.analysis.breadth import breadth_rows, markdown_lines  # noqa: E402
from harness.model.schema import load_run  # noqa: E402

TARGET_ARCHITECTURES = 150
TARGET_COMPILER = "eager"  # the target counts what builds and runs, not what a compiler makes of it


def run_suite(args: argparse.Namespace) -> tuple[Path, float]:
    """Run the suite through the CLI; returns (run file, wall seconds)."""
    out = Path(args.out)
    runs = out / "runs"
    before = set(runs.glob("*.json")) if runs.is_dir() else set()
    cmd = [sys.executable, "-m", "harness", "run", "--suite", args.suite, "-c", args.compiler, "--no-ingest",
           "--out", str(out)]
    if args.scenario:
        cmd += ["--scenario", args.scenario]
    if args.workload:
        cmd += ["-w", args.workload]
    if args.shard:
        cmd += ["--shard", args.shard]
    if args.timeout:
        cmd += ["--timeout", str(args.timeout)]
    print("$", " ".join(cmd), flush=True)
    start = time.monotonic()
    subprocess.run(cmd, cwd=ROOT, check=False)
    wall = time.monotonic() - start
    new = sorted(set(runs.glob("*.json")) - before) if runs.is_dir() else []
    new = [p for p in new if not p.name.endswith(".journal.json")]
    if not new:
        raise SystemExit(f"the run wrote no run file under {runs}; see its output above")
    return new[-1], wall


def load_records(paths: list[Path]) -> list[dict[str, Any]]:
    records = []
    for path in paths:
        records.extend(json.loads(path.read_text())["records"])
    return records


def skip_reason(record: dict[str, Any]) -> str:
    """The zoo's reasons lead the message ("remote_code: ..."); other skips keep their text."""
    message = (record.get("error") or {}).get("message", "")
    head = message.split(":", 1)[0]
    return head if head and " " not in head else message[:80]


def failure_kind(record: dict[str, Any]) -> str:
    error = record.get("error") or {}
    message = " ".join(error.get("message", "").split())  # one line: validators' messages span several
    return f"{error.get('type', '?')}: {message[:110]}"


def compiled_figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What a compiled pass adds: cold compile time of the ok cases, accuracy verdicts
    against eager, graph breaks summed, the speedup's median (noisy on a shared box)."""
    ok = [r for r in records if r["status"] == "ok"]
    compile_s = [m["compile_time_s"] for r in ok if isinstance((m := r.get("metrics") or {}).get("compile_time_s"),
                                                                (int, float))]
    speedups = [m["speedup"] for r in ok if isinstance((m := r.get("metrics") or {}).get("speedup"), (int, float))]
    breaks = [m["graph_breaks"] for r in records if isinstance((m := r.get("metrics") or {}).get("graph_breaks"), int)]
    accuracy = Counter(((r.get("metrics") or {}).get("accuracy") or {}).get("status") or "none" for r in records
                       if r["status"] in ("ok", "fail_accuracy"))
    return {
        "compile_s": {"n": len(compile_s), "median": statistics.median(compile_s) if compile_s else None,
                      "mean": statistics.fmean(compile_s) if compile_s else None,
                      "max": max(compile_s) if compile_s else None},
        "speedup_median": statistics.median(speedups) if speedups else None,
        "graph_breaks_total": sum(breaks),
        "cases_with_graph_breaks": sum(1 for b in breaks if b),
        "accuracy": dict(accuracy.most_common()),
    }


def by_compiler(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records per compiler, eager first, then the others in name order."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[r["case"]["compiler"]].append(r)
    return {c: groups[c] for c in sorted(groups, key=lambda c: (c != "eager", c))}


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    by_status = Counter(r["status"] for r in records)
    ok_arch = {r["case"]["workload"] for r in records if r["status"] == "ok"}
    workloads = {r["case"]["workload"] for r in records}
    ran = [r for r in records if r["status"] != "skipped"]
    walls = [r["worker"]["wall_s"] for r in records if (r.get("worker") or {}).get("wall_s") is not None]
    phases: dict[str, list[float]] = defaultdict(list)
    for r in records:
        for phase, seconds in (r.get("metrics") or {}).get("phase_s", {}).items():
            phases[phase].append(seconds)
    failures: dict[str, Counter] = defaultdict(Counter)
    for r in records:
        if r["status"] not in ("ok", "skipped"):
            failures[r["status"]][failure_kind(r)] += 1
    return {
        "cases": len(records),
        "workloads": len(workloads),
        "by_status": dict(by_status),
        "ok_architectures": len(ok_arch),
        "pass_rate_all": by_status["ok"] / len(records) if records else 0.0,
        "pass_rate_ran": by_status["ok"] / len(ran) if ran else 0.0,
        "skips_by_reason": dict(Counter(skip_reason(r) for r in records if r["status"] == "skipped").most_common()),
        "failures": {status: dict(c.most_common()) for status, c in failures.items()},
        "worker_wall_s": {"n": len(walls), "total": sum(walls), "median": statistics.median(walls) if walls else None,
                          "mean": statistics.fmean(walls) if walls else None,
                          "max": max(walls) if walls else None},
        "phase_median_s": {p: statistics.median(v) for p, v in phases.items()},
        "failed_workloads": sorted({r["case"]["workload"] for r in records if r["status"] not in ("ok", "skipped")}),
        **({} if all(r["case"]["compiler"] == "eager" for r in records) else compiled_figures(records)),
    }


def summarise_all(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {compiler: summarise(recs) for compiler, recs in by_compiler(records).items()}


def print_summary(s: dict[str, Any], wall: float | None) -> None:
    print(f"cases {s['cases']} over {s['workloads']} workloads; statuses {s['by_status']}")
    print(f"architectures ok: {s['ok_architectures']} (transformers-zoo target >= {TARGET_ARCHITECTURES})")
    print(f"pass rate: {s['pass_rate_all']:.1%} of all cases, {s['pass_rate_ran']:.1%} of the cases not skipped")
    print("skipped by reason:")
    for reason, n in s["skips_by_reason"].items():
        print(f"  {n:4d}  {reason}")
    print("failures by status:")
    for status, kinds in s["failures"].items():
        print(f"  {status}: {sum(kinds.values())}")
        for kind, n in kinds.items():
            print(f"    {n:4d}  {kind}")
    w = s["worker_wall_s"]
    if w["n"]:
        print(f"time per case (worker wall): median {w['median']:.1f}s, mean {w['mean']:.1f}s, max {w['max']:.1f}s, "
              f"sum {w['total'] / 60:.1f} min over {w['n']} cases")
    print("median seconds per phase:", {p: round(v, 2) for p, v in s["phase_median_s"].items()})
    if "compile_s" in s:
        c = s["compile_s"]
        if c["n"]:
            print(f"cold compile (ok cases): median {c['median']:.1f}s, mean {c['mean']:.1f}s, max {c['max']:.1f}s "
                  f"over {c['n']} cases")
        speedup = f"{s['speedup_median']:.2f}x" if s["speedup_median"] is not None else "-"
        print(f"accuracy vs eager: {s['accuracy']}; graph breaks {s['graph_breaks_total']} "
              f"in {s['cases_with_graph_breaks']} cases; median speedup {speedup} (a shared box: not a speed figure)")
    if wall is not None:
        print(f"run wall time: {wall / 60:.1f} min ({wall / max(s['cases'], 1):.1f}s per case)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="transformers-zoo-tiny")
    p.add_argument("--compiler", "-c", default="eager",
                   help="compiler(s), comma-separated: eager, inductor, eager,inductor (default eager)")
    p.add_argument("--scenario", default="forward", help="scenario(s); '' for the suite's (forward,train)")
    p.add_argument("--workload", "-w", help="only these workloads, comma-separated (e.g. from `compilebench "
                   "expected pick`: one per family); like --shard, a part of the plan: no target")
    p.add_argument("--shard", help="I/N: one shard of the plan")
    p.add_argument("--timeout", type=float, help="seconds per case (default: the suite's)")
    p.add_argument("--out", default="/tmp/zoo-cpu")
    p.add_argument("--analyse", action="append", default=[], help="summarise these run files instead of running")
    p.add_argument("--json", help="write the summary here")
    args = p.parse_args(argv)
    wall = None
    if args.analyse:
        paths = [Path(a) for a in args.analyse]
        missing = [str(a) for a in paths if not a.is_file()]
        if missing:
            print(f"zoo_cpu: no such run file {', '.join(missing)}; pass OUT/runs/<run id>.json", file=sys.stderr)
            return 2
    else:
        path, wall = run_suite(args)
        paths = [path]
        print(f"run file {path}")
    records = load_records(paths)
    summaries = summarise_all(records)
    for compiler, summary in summaries.items():
        print(f"\n== compiler {compiler}")
        print_summary(summary, None)
    if wall is not None:
        print(f"\nrun wall time: {wall / 60:.1f} min ({wall / max(len(records), 1):.1f}s per case)")
    print()
    print("\n".join(markdown_lines(breadth_rows(r for p in paths for r in load_run(p).records))))
    if args.json:
        Path(args.json).write_text(json.dumps({"by_compiler": summaries, "run_files": [str(x) for x in paths],
                                               "wall_s": wall}, indent=2))
    zoo = any((r["case"].get("suite") or "").startswith("transformers-zoo") for r in records)
    return target_exit(summaries, whole_plan=not (args.shard or args.workload), zoo=zoo)


def target_exit(summaries: dict[str, dict[str, Any]], whole_plan: bool, zoo: bool) -> int:
    """1 when the transformers zoo's eager pass of a whole plan has fewer than the target
    ok; a shard, a compiled-only pass or another suite has no target to miss."""
    eager = summaries.get(TARGET_COMPILER)
    if not zoo or not whole_plan or eager is None:
        print(f"target ({TARGET_ARCHITECTURES} architectures ok) not checked: it applies to the eager cases "
              "of the whole transformers-zoo plan")
        return 0
    return 0 if eager["ok_architectures"] >= TARGET_ARCHITECTURES else 1


if __name__ == "__main__":
    sys.exit(main())
