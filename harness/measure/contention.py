"""Did the timed rounds get the CPU they asked for? Run-queue wait of the process's threads.

A case timed next to a neighbour that holds every core is slow because its threads wait for
a core, not because of its code: on this 2-core box an A/A pair with a CPU hog on both cores
moved a 2-thread case's latency +2,460%. compare must answer "machine contended: cannot
judge" for such a record, not "regression", so the worker measures the wait.

Linux keeps per thread `/proc/self/task/<tid>/schedstat`: nanoseconds on a CPU, nanoseconds
runnable but waiting on a run queue, and timeslices. Summed over every thread of the
process (the OpenMP pool included) and taken over the timed window (the timed rounds and
the probe gaps between them, from the first round's start to the last one's end):

    cpu_wait_fraction = run-queue wait of all threads / (threads x window wall time)

with `threads` the threads the case runs on (`torch.get_num_threads()` on CPU, 1 for a
GPU case's host thread). It is the average share of the case's threads that were ready
to run but had no core: ~0 on a quiet machine, ~0.5 for 2 threads sharing 2 cores with 2
busy loops. A thread spinning at an OpenMP barrier counts as CPU time, not wait, so the
figure is not diluted by the pool spinning while a sibling waits. `cpu_share` (CPU time
of all threads over threads x wall) is kept next to it.

The worker reads the window before the first timed round and after the last only. A caller
may read it per round too (`after_round`, outside every timed region), so a burst shows in
`rounds_over_threshold` and `max_round_wait_fraction`; the worker stopped doing so because a
read between rounds slowed the next samples of tiny CPU cases (mlp-classic forward inductor
tiny: speedup 0.324x -> 0.273x, 3 processes a side, found by bisecting 7edde66..main).

Where schedstat is missing (not Linux, a kernel without CONFIG_SCHED_INFO) or never moves,
the record says `contended: null` with a note: unmeasured, never a fake 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONTENTION_KEY = "contention"  # where the worker stores the block in record.metrics
# Above this share of the case's threads waiting for a core, the timings measure the queue.
# Fair sharing puts 2 threads on 2 cores at ~0 alone, ~1/3 next to one busy loop, ~1/2 next
# to two. Measured on the 2-core dev box, quiet: 0.001-0.006 alone, 0.50 next to two busy
# loops, 0.67 next to four (docs/GATING.md "Contention", benchmarks/contention_aa.py).
DEFAULT_THRESHOLD = 0.15
TASK_DIR = Path("/proc/self/task")

Reader = Callable[[], Mapping[str, str] | None]  # thread id -> schedstat text; None: unavailable
Clock = Callable[[], int]  # nanoseconds, monotonic


@dataclass(frozen=True)
class ThreadStat:
    """One thread's cumulative schedstat counters."""

    cpu_ns: int
    wait_ns: int
    slices: int


def read_proc_schedstat(task_dir: Path = TASK_DIR) -> dict[str, str] | None:
    """Every thread's schedstat text; None when the files do not exist (not Linux, or a
    kernel without schedstat). A thread that exits between listing and reading is left out."""
    try:
        tasks = list(task_dir.iterdir())
    except OSError:
        return None
    out = {}
    for task in tasks:
        try:
            out[task.name] = (task / "schedstat").read_text()
        except OSError:  # the thread exited, or this kernel keeps no schedstat
            continue
    return out or None


def parse_schedstat(text: str) -> ThreadStat | None:
    """`"<cpu ns> <wait ns> <timeslices>"`; None for anything else."""
    parts = text.split()
    if len(parts) < 3:
        return None
    try:
        cpu, wait, slices = (int(p) for p in parts[:3])
    except ValueError:
        return None
    return ThreadStat(cpu, wait, slices) if min(cpu, wait, slices) >= 0 else None


def snapshot(reader: Reader) -> dict[str, ThreadStat] | None:
    """Parsed counters per thread, or None when the reader has none."""
    raw = reader()
    if not raw:
        return None
    parsed = {tid: parse_schedstat(text) for tid, text in raw.items()}
    stats = {tid: s for tid, s in parsed.items() if s is not None}
    return stats or None


@dataclass(frozen=True)
class Delta:
    """What all threads did between two snapshots."""

    cpu_ns: int
    wait_ns: int
    slices: int
    threads_ran: int  # threads with CPU time in the window
    threads_lost: int  # threads in the first snapshot but gone from the second (their share is lost)


def delta(before: Mapping[str, ThreadStat], after: Mapping[str, ThreadStat]) -> Delta:
    """Sum over threads of after - before; a thread born in the window counts from 0 (its
    whole life is inside it)."""
    zero = ThreadStat(0, 0, 0)
    cpu = wait = slices = ran = 0
    for tid, now in after.items():
        then = before.get(tid, zero)
        d_cpu, d_wait = max(now.cpu_ns - then.cpu_ns, 0), max(now.wait_ns - then.wait_ns, 0)
        cpu, wait, slices = cpu + d_cpu, wait + d_wait, slices + max(now.slices - then.slices, 0)
        ran += d_cpu > 0
    return Delta(cpu, wait, slices, ran, sum(1 for tid in before if tid not in after))


def wait_fraction(wait_ns: int, threads: int, wall_ns: int) -> float | None:
    """Run-queue wait over threads x wall (None without a window)."""
    if wall_ns <= 0 or threads <= 0:
        return None
    return wait_ns / (threads * wall_ns)


@dataclass
class ContentionMeter:
    """`start()` before the first timed round, `after_round()` between rounds, `stop()`
    after the last; `stop()` returns the record's block. Reader and clock are injectable."""

    threads: int
    reader: Reader = read_proc_schedstat
    clock: Clock = time.perf_counter_ns
    threshold: float = DEFAULT_THRESHOLD
    _first: dict[str, ThreadStat] | None = None
    _last: dict[str, ThreadStat] | None = None
    _started_ns: int = 0
    _last_ns: int = 0
    _read_ns: int = 0
    _rounds: list[float] = field(default_factory=list)
    _unavailable: str | None = None

    def _read(self) -> tuple[dict[str, ThreadStat] | None, int]:
        start = self.clock()
        snap = snapshot(self.reader)
        now = self.clock()
        self._read_ns += now - start
        return snap, now

    def start(self) -> ContentionMeter:
        self._first, self._started_ns = self._read()
        self._last, self._last_ns = self._first, self._started_ns
        if self._first is None:
            self._unavailable = "no /proc/self/task/*/schedstat (not Linux, or a kernel without schedstat)"
        return self

    def after_round(self, round_seconds: float = 0.0) -> None:
        """Close one round's window (round_seconds is unused: the window is wall time)."""
        if self._unavailable:
            return
        snap, now = self._read()
        if snap is None or self._last is None:
            self._unavailable = "schedstat could not be read during the timed rounds"
            return
        fraction = wait_fraction(delta(self._last, snap).wait_ns, self.threads, now - self._last_ns)
        if fraction is not None:
            self._rounds.append(fraction)
        self._last, self._last_ns = snap, now

    def stop(self) -> dict[str, Any]:
        """The record's `metrics["contention"]` block."""
        base: dict[str, Any] = {"contended": None, "cpu_wait_fraction": None, "threads": self.threads,
                                "threshold": self.threshold, "source": "schedstat"}
        if self._unavailable is None:
            snap, now = self._read()
            if snap is None or self._first is None:
                self._unavailable = "schedstat could not be read after the timed rounds"
            else:
                return {**base, **self._summary(delta(self._first, snap), now - self._started_ns)}
        return {**base, "note": f"contention not measured: {self._unavailable}"}

    def _summary(self, d: Delta, wall_ns: int) -> dict[str, Any]:
        fraction = wait_fraction(d.wait_ns, self.threads, wall_ns)
        if fraction is None or d.cpu_ns == 0:
            # counters that never move are a kernel keeping no schedstat, not a quiet machine
            return {"note": "contention not measured: schedstat counters did not move over the timed rounds"}
        return {
            "contended": fraction > self.threshold,
            "cpu_wait_fraction": round(fraction, 6),
            "cpu_share": round(d.cpu_ns / (self.threads * wall_ns), 6),
            "wall_s": wall_ns / 1e9,
            "cpu_s": d.cpu_ns / 1e9,
            "wait_s": d.wait_ns / 1e9,
            "timeslices": d.slices,
            "threads_ran": d.threads_ran,
            "threads_lost": d.threads_lost,
            "read_cost_s": self._read_ns / 1e9,
            **self._per_round(),
        }

    def _per_round(self) -> dict[str, Any]:
        """Per-round fractions where after_round() was called (the worker does not: its reads
        between rounds slowed the next samples of tiny CPU cases)."""
        if not self._rounds:
            return {}
        return {"rounds": len(self._rounds),
                "rounds_over_threshold": sum(1 for f in self._rounds if f > self.threshold),
                "max_round_wait_fraction": round(max(self._rounds), 6)}


def contention_block(metrics: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A record's contention block, or None when it has none."""
    block = metrics.get(CONTENTION_KEY) if isinstance(metrics, Mapping) else None
    return block if isinstance(block, Mapping) else None


def is_contended(metrics: Mapping[str, Any] | None) -> bool | None:
    """True / False as the worker measured it; None when it was not measured."""
    block = contention_block(metrics)
    value = block.get("contended") if block is not None else None
    return value if isinstance(value, bool) else None
