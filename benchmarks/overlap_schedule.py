"""Replay a run's measured phase times under three schedules (issue 25, item 1: which pool
order `--compile-overlap` uses). A projection from measured durations, not a measurement.

  python benchmarks/overlap_schedule.py RUN.json [--slots 2]

Each case that ran a process is: start work (setup, ISA probe, build, eager first call) and its
compile, both holding the quiet lock shared, then its measurement (accuracy, measure, memory,
break cost and 0.5 s of exit) holding it exclusive (harness/measure/quiet.py). Printed: the
sum of the cases (one at a time), a pool that takes the next case in plan order whenever a
slot is free, and the twin-group pool harness/run/overlap.py runs (a group starts when the
last one is done, compiled cases first). Contention is not modelled: the durations are the
run's own, so replaying an overlapped run keeps what overlap cost its compiles.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.model.schema import Record, load_run  # noqa: E402
from harness.run.overlap import gang_order  # noqa: E402
from harness.run.twins import group_key  # noqa: E402

START = ("setup", "isa_probe", "build", "fp64_reference", "eager_first_call")
MEASURE = ("accuracy", "measure", "memory", "break_cost")
EXIT_S = 0.5


@dataclass
class Job:
    record: Record
    work_s: float  # start work + compile: the lock shared
    measure_s: float  # the lock exclusive
    state: str = "waiting to start"
    until: float | None = None


def job(record: Record) -> Job:
    phases = record.metrics.get("phase_s") or {}
    work = sum(float(phases.get(p, 0.0)) for p in START) + float(phases.get("compile", 0.0))
    return Job(record, work, sum(float(phases.get(p, 0.0)) for p in MEASURE) + EXIT_S)


def _step_locks(running: list[Job], now: float) -> None:
    """Grant what the lock allows at `now`: exclusive first, to a worker that waits to measure
    while no other worker works or measures (it was blocked in flock when the last holder
    left; a case the runner starts after that exit asks later), then shared while nobody
    measures."""
    for j in running:
        busy = any(o.state in ("working", "measuring") for o in running if o is not j)
        if j.state == "waiting to measure" and not busy:
            j.state, j.until = "measuring", now + j.measure_s
            break
    measuring = any(j.state == "measuring" for j in running)
    for j in running:
        if j.state == "waiting to start" and not measuring:
            j.state, j.until = "working", now + j.work_s


def replay(records: list[Record], slots: int, grouped: bool) -> float:
    queue, running, now = [job(r) for r in records], [], 0.0
    while queue or running:
        while len(running) < slots and queue:
            if grouped and running and group_key(queue[0].record.case) not in {group_key(j.record.case) for j in running}:
                break
            running.append(queue.pop(0))
        _step_locks(running, now)
        now = min(j.until for j in running if j.until is not None)
        for j in list(running):
            if j.until is not None and j.until <= now + 1e-9:
                if j.state == "working":
                    j.state, j.until = "waiting to measure", None
                else:
                    running.remove(j)
    return now


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--slots", type=int, default=2)
    args = ap.parse_args(argv)
    records = [r for r in load_run(args.run).records if (r.worker or {}).get("start") != "derived"]
    by_id = {r.case_id: r for r in records}
    grouped = [by_id[c.case_id] for c in gang_order([r.case for r in records])]
    one = sum(j.work_s + j.measure_s for j in map(job, records))
    print(f"{len(records)} cases that ran a process; case seconds under each schedule ({args.slots} slots):")
    print(f"  one at a time               {one:8.1f}")
    print(f"  plan order, any free slot   {replay(records, args.slots, grouped=False):8.1f}")
    print(f"  twin groups (the runner's)  {replay(grouped, args.slots, grouped=True):8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
