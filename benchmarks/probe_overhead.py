"""What the machine-speed probe costs a case, measured two ways.

    python benchmarks/probe_overhead.py [RUN_FILES_OR_FOLDERS ...] [--reps 6]

1. From real worker records (run files, e.g. the gate error-rate study's): the probe's own
   wall seconds over the case's timed seconds (`machine_probe.share_of_case`), and over the
   worker's whole wall time, per process.
2. In this process, on the smoke suite's deep MLP (eager, one thread): the timed loop
   (`measure_interleaved`, 0.5 s, 50 samples) with the probe schedule's samples before and
   after it and without, in alternating repetitions; the extra wall time is the probe's
   cost, timer included. Whether the probe slows the case's samples (it did between rounds):
   benchmarks/probe_between_rounds.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def shares_from_runs(refs: list[str]) -> None:
    from harness.model.schema import load_run

    files = [f for ref in refs for f in (sorted(Path(ref).rglob("*.json")) if Path(ref).is_dir() else [Path(ref)])]
    case_share, wall_share, n = [], [], []
    for f in files:
        try:
            run = load_run(f)
        except Exception:  # noqa: BLE001 - a folder may hold other JSON (study rows, comparisons)
            continue
        for r in run.records:
            p = (r.metrics or {}).get("machine_probe") or {}
            if r.status != "ok" or p.get("share_of_case") is None:
                continue
            case_share.append(p["share_of_case"])
            n.append(p["n"])
            if r.worker.get("wall_s"):
                wall_share.append(p["spent_s"] / r.worker["wall_s"])
    if not case_share:
        print("no records with a machine probe in", refs)
        return
    q = statistics.quantiles(case_share, n=20, method="inclusive")
    print(f"{len(case_share)} worker records: probe / case timed seconds median {statistics.median(case_share):.2%}, "
          f"p95 {q[-1]:.2%}, max {max(case_share):.2%}; probe samples per process median {statistics.median(n):.0f} "
          f"(min {min(n)})")
    if wall_share:
        print(f"probe / worker wall time: median {statistics.median(wall_share):.3%}, max {max(wall_share):.3%}")


def in_process(reps: int) -> None:
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from harness.measure.probe import ProbeSchedule, make_probe
    from harness.measure.timing import HostTimer, StopPolicy, measure_interleaved
    from harness.model.workloads import WorkloadContext
    from suites.mlp import deep

    model, (x,) = deep(WorkloadContext(device="cpu", dtype=torch.float32, batch_size=64, size="tiny", options={}))
    timer = HostTimer()
    policy = StopPolicy(warmup=3, min_samples=50, min_time_s=0.5, max_time_s=5.0)

    def fn():
        with torch.no_grad():
            return model(x)

    variants = {"eager": fn}
    walls: dict[str, list[float]] = {"with probe": [], "without": []}
    shares = []
    for i in range(2 * reps):
        probe = (i % 2 == 0)
        schedule = None
        if probe:
            p = make_probe("cpu", "cpu", timer)
            p.warm_up()
            schedule = ProbeSchedule(p)
        start = time.perf_counter()
        if schedule:
            schedule.before_rounds()
        samples = measure_interleaved(variants, timer, policy)
        if schedule:
            schedule.after_rounds(sum(sum(v) for v in samples.values()))
        walls["with probe" if probe else "without"].append(time.perf_counter() - start)
        if schedule:
            shares.append(schedule.probe.spent_s / schedule.timed_s)
    w, wo = statistics.median(walls["with probe"]), statistics.median(walls["without"])
    print(f"in-process timed loop ({reps} reps each, alternating): median {w:.3f} s with the probe, {wo:.3f} s "
          f"without ({w / wo - 1:+.1%}, which includes run-to-run noise); probe's own share of timed seconds "
          f"median {statistics.median(shares):.2%}, max {max(shares):.2%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", help="run files or folders of them")
    parser.add_argument("--reps", type=int, default=6, help="in-process repetitions of each variant (0: skip part 2)")
    args = parser.parse_args()
    if args.runs:
        shares_from_runs(args.runs)
    if args.reps > 0:
        in_process(args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
