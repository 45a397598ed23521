"""The CPU-tiny zoo through the real runner (one fresh worker per case), and what it gives:
pass rate, skips by reason, failures by status, time per model.

Target (issue 24): at least 150 architectures of `transformers-zoo` build and run eager on
CPU at tiny size. Exit 1 when fewer are ok, 2 on bad arguments.

    python benchmarks/zoo_cpu.py                       # transformers-zoo-tiny, eager, forward
    python benchmarks/zoo_cpu.py --scenario forward,train --compiler eager,inductor
    python benchmarks/zoo_cpu.py --shard 1/4           # a quarter of the plan
    python benchmarks/zoo_cpu.py --analyse OUT/runs/RUN.json [--analyse MORE.json]

It runs `python -m harness run --suite SUITE -c COMPILER --scenario ... --no-ingest --out
OUT`, then reads the run file it wrote (or the files given to --analyse, pooled: shards).
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
TARGET_ARCHITECTURES = 150


def run_suite(args: argparse.Namespace) -> tuple[Path, float]:
    """Run the suite through the CLI; returns (run file, wall seconds)."""
    out = Path(args.out)
    runs = out / "runs"
    before = set(runs.glob("*.json")) if runs.is_dir() else set()
    cmd = [sys.executable, "-m", "harness", "run", "--suite", args.suite, "-c", args.compiler, "--no-ingest",
           "--out", str(out)]
    if args.scenario:
        cmd += ["--scenario", args.scenario]
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
    }


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
    if wall is not None:
        print(f"run wall time: {wall / 60:.1f} min ({wall / max(s['cases'], 1):.1f}s per case)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="transformers-zoo-tiny")
    p.add_argument("--compiler", default="eager")
    p.add_argument("--scenario", default="forward", help="scenario(s); '' for the suite's (forward,train)")
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
    summary = summarise(load_records(paths))
    print_summary(summary, wall)
    if args.json:
        Path(args.json).write_text(json.dumps({**summary, "run_files": [str(x) for x in paths], "wall_s": wall},
                                              indent=2))
    if not args.analyse and not args.suite.startswith("transformers-zoo"):
        return 0  # the 150-architecture target is the transformers zoo's
    return 0 if summary["ok_architectures"] >= TARGET_ARCHITECTURES else 1


if __name__ == "__main__":
    sys.exit(main())
