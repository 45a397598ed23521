"""`run --compile-overlap N`: up to N workers at once on one device, their compiles side by side,
every measurement alone.

A GPU suite's wall is mostly cold compiles (the `gpu` suite on an H200: 427-521 s of 606-729 s),
and a compile keeps one core busy in Dynamo, AOTAutograd and Inductor's lowering and the
compile-worker pool busy in bursts, while the host has 16 cores. So the runner keeps N workers
alive (a case pool like `--gpus`'s, harness/run/multigpu.py, with every slot on the same device;
a model's twin group, its inductor and reduce-overhead cases, starts together and compiles side
by side, and the next group starts when it is done) and the workers share the run's quiet lock (harness/measure/quiet.py): shared from their start
to their measure phase, exclusive from there to their exit. No worker measures while another
builds, compiles or measures; a worker that starts while one measures waits before it does
anything.

What changes in the figures, and what the records say about it:
- the compile time is a cold compile on a host where another compile may run; each record's
  `metrics.compile_overlap` says for how many of its compile's seconds another worker of the
  run was busy (`overlapped_s`, `share`), and with which cases (`annotate`, at the run's end);
- the timed rounds, memory peaks and break costs are measured alone; `annotate` checks that
  from the lock's moments and notes any record whose measurement another worker's busy window
  touched (`measured_beside_s`), which would be a fault of the lock, not of the case;
- the run file's `config.compile_overlap` is the width used (N, cut to the largest group);
  compare says so when two runs differ in it
  (their compile times were taken under different conditions);
- a case that runs out of memory (two large models on a small GPU) or out of time (its waits for
  the lock count against its timeout) beside another worker runs again alone (`RunAgainAlone`),
  so the width does not turn a case that fits into an `oom` or a `timeout`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.measure import quiet
from harness.measure.quiet import ALONE_ENV, QUIET_LOCK_ENV
from harness.model.errors import UserError
from harness.model.schema import Case, Record
from harness.run.multigpu import Derive, GpuPool, OnStart, RunOne
from harness.run.twins import group_key

# a slot's mark in its workers' environment: not a per-case key, so each slot forks from servers
# of its own (a fork server runs one case at a time; harness/run/forkserver.py)
OVERLAP_SLOT_ENV = "COMPILEBENCH_OVERLAP_SLOT"
POOL_KEY = "overlap_pool"  # record.worker: the slot and span a pool stamps (multigpu.GpuPool)
OVERLAP_KEY = "compile_overlap"  # record.metrics: what annotate derived
MAX_WIDTH = 8
MEASURED_BESIDE_SLOP_S = 0.05  # the lock's own moments are read a few microseconds apart


class OverlapPlanError(UserError, ValueError):
    """--compile-overlap that cannot work with this run; the message says the fix."""


def resolve_width(asked: int | None, suite_default: int, gpus: Sequence[int], warm_compile: bool,
                  trace: bool = False) -> int:
    """The run's width: --compile-overlap as given (checked), else the suite's default, which
    gives way to --gpus (a worker per GPU already), --warm-compile (a warm compile is timed
    alone) and --trace (tlparse runs in the runner after each case, beside the next one's)."""
    if asked is None:
        return 1 if gpus or warm_compile or trace else max(1, int(suite_default))
    check_width(asked, gpus, warm_compile, trace)
    return asked


def check_width(width: int, gpus: Sequence[int], warm_compile: bool, trace: bool = False) -> None:
    if width < 1 or width > MAX_WIDTH:
        raise OverlapPlanError(f"--compile-overlap {width}: use 1 (off) to {MAX_WIDTH}")
    if width > 1 and gpus:
        raise OverlapPlanError("--compile-overlap runs several workers on one device; with --gpus each GPU "
                               "already runs its own: drop one of the two")
    if width > 1 and warm_compile:
        raise OverlapPlanError("--compile-overlap with --warm-compile would time the warm compile beside other "
                               "workers' cold ones: drop one of the two")
    if width > 1 and trace:
        raise OverlapPlanError("--compile-overlap with --trace would run tlparse (up to minutes a case) beside other "
                               "workers' measurements: drop one of the two")


def lock_folder() -> Path:
    """Where a run's lock file lives (removed by the runner at the run's end)."""
    return Path(tempfile.mkdtemp(prefix="cb-quiet-"))


def start_overlap_pool(cases: Sequence[Case], run_one: RunOne, width: int, lock_path: Path, *,
                       held: Mapping[str, str] | None = None, derive: Derive | None = None,
                       known: Mapping[str, Record] | None = None, on_start: OnStart | None = None) -> GpuPool:
    """The case pool of an overlapped run: `width` slots, twin groups one after another (gang_order),
    every worker given the lock, a case that ran out of memory or time beside another run again alone."""
    def slot_env(case: Case, slot: int) -> dict[str, str]:
        return {QUIET_LOCK_ENV: str(lock_path), **slot_marker(slot)}

    return GpuPool(gang_order(cases), run_one, list(range(width)), None, held=held, derive=derive, known=known,
                   on_start=on_start, slot_env=slot_env, group_of=group_key, again_alone=RunAgainAlone(run_one))


# a first try that another worker may have caused: out of device memory beside it, or out of time
# while it waited for the lock (its waits count against the case's timeout)
AGAIN_STATUSES = ("oom", "timeout")


class RunAgainAlone:
    """A case that ran out of memory (two Llama-3.1-8B twins on a 24 GB GPU) or out of time (its
    waits for the lock are in its timeout) beside another worker runs again alone: the pool waits
    until no other case runs and starts none meanwhile (multigpu.GpuPool `again_alone`), and the
    worker takes the lock exclusive from its start. An `oom` or `timeout` then is the case's own;
    the first try stays in the record (`worker.overlap_retry`, a note). A host memory cap's
    `oom` (--max-memory-gb, RLIMIT_AS) is the same alone: not retried."""

    def __init__(self, run_one: RunOne) -> None:
        self._run_one = run_one

    def wanted(self, record: Record) -> bool:
        return record.status in AGAIN_STATUSES and not (record.error or {}).get("memory_cap_bytes")

    def run(self, case: Case, env: Mapping[str, str], first: Record) -> Record:
        tried = {"status": first.status, "error": _error_text(first), "wall_s": first.worker.get("wall_s")}
        record = self._run_one(case, {**env, ALONE_ENV: "1"})
        record.worker["overlap_retry"] = tried
        outcome = f"{record.status} again" if record.status == first.status else f"then {record.status}"
        what = "ran out of memory" if first.status == "oom" else "timed out"
        record.notes.append(f"{what} beside another worker ({tried['error'][:200]}); run again alone: {outcome}")
        return record


def _error_text(record: Record) -> str:
    err = record.error or {}
    return f"{err.get('type', '')}: {err.get('message', '')}".strip(": ")[:500]


def slots_needed(cases: Sequence[Case], width: int) -> int:
    """Slots worth having: a group runs alone, so a width above the largest group's case count
    would only idle slots (and start their fork servers)."""
    sizes: dict[Any, int] = {}
    for case in cases:
        sizes[group_key(case)] = sizes.get(group_key(case), 0) + 1
    return max(1, min(width, max(sizes.values(), default=1)))


def gang_order(cases: Sequence[Case]) -> list[Case]:
    """Plan order by twin group (a model's scenario, all its compilers), each group's compiled
    cases first: they start together and compile side by side, and an `eager` case of its own
    process (a train step) comes last (it starts when a slot frees, beside the last twin's
    compile or measurement, whose end its own measurement waits for)."""
    first: dict[Any, int] = {}
    for i, case in enumerate(cases):
        first.setdefault(group_key(case), i)
    return sorted(cases, key=lambda c: (first[group_key(c)], c.compiler == "eager"))


def slot_marker(slot: int) -> dict[str, str]:
    """What sets a slot's workers apart in their environment (and so their fork servers)."""
    return {OVERLAP_SLOT_ENV: str(slot)}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _windows(record: Record) -> dict[str, Any] | None:
    """The record's busy, measure and compile windows on the host's monotonic clock, or None
    for a record no pool ran (derived, journaled before a resume without the lock)."""
    pool = (record.worker or {}).get(POOL_KEY)
    if not isinstance(pool, Mapping):
        return None
    times = (record.worker or {}).get("quiet")
    times = times if isinstance(times, Mapping) else {}
    started, ended = _number(pool.get("started_at")), _number(pool.get("ended_at"))
    busy = quiet.busy_window(dict(times), _number(times.get("record_at")) or ended)
    known = bool(times)
    if busy is None and started is not None and ended is not None:
        busy = (started, ended)  # no lock times (a crash before its record): busy all its life
    compile_start, compile_end = _number(times.get("compile_start")), _number(times.get("compile_end"))
    compile_window = (compile_start, compile_end) if compile_start is not None and compile_end is not None else None
    # the measurement ends where the worker wrote its record; the lock is held to its exit, which
    # the runner sees a little later (the reap, the sweep): a start waiting on it is not beside it
    end = _number(times.get("record_at")) or ended
    return {"busy": busy, "measure": quiet.measure_window(dict(times), end), "compile": compile_window,
            "known": known, "pool": pool.get("pool")}


def annotate(records: Sequence[Record]) -> None:
    """Fill metrics.compile_overlap on each record a pool ran (module doc), and note a
    measurement another worker's busy window reached."""
    windows = {id(r): w for r in records if (w := _windows(r)) is not None}
    for record in records:
        mine = windows.get(id(record))
        if mine is None:
            continue
        # one pool's records only: a resumed run's earlier pool ran at another time, perhaps before a
        # reboot reset the monotonic clock its moments are on
        others = [(r, windows[id(r)]) for r in records
                  if r is not record and id(r) in windows and windows[id(r)]["pool"] == mine["pool"]]
        busy = [(r, w["busy"]) for r, w in others if w["busy"] is not None]
        block: dict[str, Any] = {}
        if mine["compile"] is not None:
            start, end = mine["compile"]
            overlapped = quiet.overlap_seconds(mine["compile"], [b for _, b in busy])
            block.update(overlapped_s=round(overlapped, 3),
                         share=round(overlapped / (end - start), 3) if end > start else None,
                         beside=[r.case_id for r, b in busy if quiet.overlap_seconds(mine["compile"], [b]) > 0])
        if mine["measure"] is not None:
            # another worker's busy window, from known lock times only: a crashed worker's span
            # includes its wait for the lock at its start, which is not work
            beside = quiet.overlap_seconds(mine["measure"], [b for r, b in busy if windows[id(r)]["known"]])
            block["measured_beside_s"] = round(beside, 3)
            if beside > MEASURED_BESIDE_SLOP_S:
                record.notes.append(f"another worker of the run was busy for {beside:.2f} s of this case's "
                                    "measurement (the quiet lock did not hold: a harness fault)")
        times = (record.worker or {}).get("quiet") or {}
        asked, got = _number(times.get("shared_asked")), _number(times.get("shared_at"))
        if asked is not None and got is not None:
            block["start_wait_s"] = round(got - asked, 3)
        if isinstance(record.metrics, dict) and block:
            record.metrics[OVERLAP_KEY] = block
