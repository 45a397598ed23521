"""Proof that the gate neither cries wolf nor misses a slowdown, on this machine.

    .venv/bin/python benchmarks/gate_proof.py [--rounds 10] [--levels 0.05,0.10,0.15] [--json OUT.json]

1. Real runs through the real runner (one fresh worker process per case, cold compile,
   interleaved eager/compiled timing): the smoke suite's MLP (`suites.mlp`) wrapped by
   benchmarks/gate_workloads.py, whose *compiled* graph does a fraction f more model work
   per call when COMPILEBENCH_GATE_EXTRA_WORK=f (eager and the output are unchanged). Per
   round: a base process (f=0), an A/A twin (f=0), and one head process per level f, in an
   order rotated every round. Every comparison is `compare_runs([base], [head])` with the
   default thresholds, exactly what `compilebench compare base.json head.json` decides:
     * A/A: base vs twin, one per round -> false regressions (goal: 0 of 10);
     * f = 15%: flagged in how many rounds (goal: 10 of 10); other levels give the smallest
       slowdown flagged in every round.
2. Decision time: `compare_runs` on synthetic runs of 1,000 cases (100 samples per variant)
   for an A/A, 5% of cases slowed, and every case slowed (goal: under 2 s).

CPU heavy (about 3 + len(levels) worker processes per round). Other load on the machine
is noise the gate must survive; the script reports the machine's load average.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.compare import REGRESSION, compare_runs  # noqa: E402
from harness.runner import RunOptions, default_cache_root, make_spec, plan_cases, run_worker  # noqa: E402
from harness.schema import Record, Run  # noqa: E402
from harness.timing import StopPolicy  # noqa: E402

WORKLOAD_FILE = str(ROOT / "benchmarks" / "gate_workloads.py")
EXTRA_WORK_ENV = "COMPILEBENCH_GATE_EXTRA_WORK"
# the smoke suite's measurement policy (suites/__init__.py)
SMOKE_POLICY = {"min_time_s": 0.3, "min_samples": 10, "max_samples": 500, "warmup": 3, "max_time_s": 5.0}


def load_average() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def one_process(case, opts: RunOptions, policy: dict[str, Any], fraction: float, env: dict[str, Any],
                label: str) -> Run:
    spec = make_spec(case, opts, policy, str(default_cache_root() / "isa-probe"))
    record: Record = run_worker(case, spec, 600.0, extra_env={EXTRA_WORK_ENV: str(fraction)})
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return Run(label, now, label, env, {"suite": "gate-proof", "extra_work": fraction}, [record])


def flagged(base: Run, head: Run) -> tuple[bool, list[str]]:
    cmp = compare_runs([base], [head])
    hits = [f"{c.case_id}: " + ", ".join(f"{m.metric} {m.change:+.1%}" for m in c.metrics if m.verdict == REGRESSION)
            if c.verdict == REGRESSION else f"{c.case_id}: {c.verdict}"
            for c in cmp.failing()]
    return bool(hits), hits


def realized(base: Run, head: Run) -> float | None:
    """Measured slowdown of the compiled median, head vs base (what the gate saw)."""
    b, h = base.records[0], head.records[0]
    if b.status != "ok" or h.status != "ok":
        return None
    return statistics.median(h.compiled["samples_s"]) / statistics.median(b.compiled["samples_s"]) - 1.0


def real_phase(rounds: int, levels: list[float], workloads: list[str]) -> dict[str, Any]:
    from harness.environment import capture_environment

    opts = RunOptions(workloads=workloads, workload_files=[WORKLOAD_FILE], compilers=["inductor"], devices=["cpu"],
                      scenarios=["forward"], ingest=False)
    cases, _ = plan_cases(opts)
    policy = {**StopPolicy().to_dict(), **SMOKE_POLICY}
    env = capture_environment(["cpu"])
    arms = ["base", "twin", *[f"{f:.2f}" for f in levels]]
    fraction = {"base": 0.0, "twin": 0.0, **{f"{f:.2f}": f for f in levels}}
    aa: list[dict[str, Any]] = []
    slow: dict[str, list[dict[str, Any]]] = {f"{f:.2f}": [] for f in levels}
    started = time.monotonic()
    for r in range(rounds):
        order = arms[r % len(arms):] + arms[:r % len(arms)]  # rotate who goes first
        for case in cases:
            runs = {arm: one_process(case, opts, policy, fraction[arm], env, f"r{r}-{arm}") for arm in order}
            hit, why = flagged(runs["base"], runs["twin"])
            aa.append({"round": r, "case": case.workload, "false_regression": hit, "why": why,
                       "statuses": [runs["base"].records[0].status, runs["twin"].records[0].status]})
            for level in slow:
                hit, why = flagged(runs["base"], runs[level])
                slow[level].append({"round": r, "case": case.workload, "flagged": hit, "why": why,
                                    "realized": realized(runs["base"], runs[level])})
            print(f"round {r + 1}/{rounds} {case.workload}: A/A {'FALSE ALARM ' + str(aa[-1]['why']) if aa[-1]['false_regression'] else 'clean'}; "
                  + "; ".join(f"+{float(k):.0%} {'flagged' if v[-1]['flagged'] else 'MISSED'}"
                              f" (compiled {v[-1]['realized']:+.1%})" if v[-1]['realized'] is not None else f"+{k} n/a"
                              for k, v in slow.items())
                  + f"  [{time.monotonic() - started:.0f}s, load {load_average()}]", flush=True)
    return {"aa": aa, "slow": slow, "wall_s": time.monotonic() - started, "cases": [c.case_id for c in cases]}


def decision_time(repeats: int = 3) -> dict[str, float]:
    from harness.synthetic import synthetic_run

    base = synthetic_run(1000, 1, run_id="base")
    scenarios = {"A/A": synthetic_run(1000, 2, run_id="head"),
                 "5% of cases 15% slower": synthetic_run(1000, 2, slowdown=0.15, slow_cases=50, run_id="head"),
                 "every case 15% slower": synthetic_run(1000, 2, slowdown=0.15, run_id="head")}
    compare_runs([base], [scenarios["A/A"]])  # imports and caches outside the clock
    out = {}
    for name, head in scenarios.items():
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            cmp = compare_runs([base], [head])
            times.append(time.perf_counter() - start)
        out[name] = {"seconds_median": statistics.median(times), "regressions": len(cmp.failing())}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--levels", default="0.05,0.10,0.15", help="extra-work fractions for the head arms")
    parser.add_argument("--workloads", default="gate-mlp-classic", help="gate-mlp-classic and/or gate-mlp-deep")
    parser.add_argument("--skip-real", action="store_true", help="only the 1,000-case decision timing")
    parser.add_argument("--json", help="write all results here")
    args = parser.parse_args()
    levels = [float(x) for x in args.levels.split(",") if x]
    print(f"machine: {os.cpu_count()} CPUs, load average {load_average()} (other processes share these cores)")
    results: dict[str, Any] = {"decision_time": decision_time()}
    for name, d in results["decision_time"].items():
        print(f"decision on 1,000 cases, {name}: {d['seconds_median']:.3f} s (median of 3), "
              f"{d['regressions']} flagged")
    if not args.skip_real:
        real = real_phase(args.rounds, levels, [w for w in args.workloads.split(",") if w])
        results["real"] = real
        n_aa = len(real["aa"])
        print(f"\nA/A: {sum(a['false_regression'] for a in real['aa'])} false regression(s) in {n_aa} comparisons")
        reliable = []
        for level, rows in real["slow"].items():
            hits = sum(r["flagged"] for r in rows)
            seen = [r["realized"] for r in rows if r["realized"] is not None]
            print(f"head with {float(level):.0%} more compiled work: flagged {hits}/{len(rows)}; compiled median "
                  f"{statistics.median(seen):+.1%} (range {min(seen):+.1%}..{max(seen):+.1%})" if seen else
                  f"head with {float(level):.0%} more work: no ok runs")
            if rows and hits == len(rows):
                reliable.append(float(level))
        print(f"smallest extra work flagged in every comparison: {min(reliable):.0%}" if reliable
              else "no level was flagged in every comparison")
        print(f"real phase wall time: {real['wall_s']:.0f} s, load average now {load_average()}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
