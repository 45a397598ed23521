"""Timing: per-call samples, interleaved across variants, device-correct.

`measure_interleaved` alternates the variants (eager, compiled) round by round in the same
process, so drift (thermal, frequency, noisy neighbours) hits both alike; it keeps every raw
sample and stops when BOTH a minimum total time and a minimum sample count are reached (or a
hard cap). The clock is injectable so the stop logic is tested without sleeping.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


class Clock(Protocol):
    def __call__(self) -> int: ...  # nanoseconds, monotonic


@dataclass(frozen=True)
class StopPolicy:
    warmup: int = 3  # untimed calls per variant before sampling
    min_samples: int = 10  # per variant
    min_time_s: float = 1.0  # total timed seconds across variants
    max_samples: int = 2000  # per variant
    max_time_s: float = 30.0  # wall-clock cap for the whole measurement
    target_sample_s: float = 0.0  # >0: batch fast calls so one sample lasts about this long
    # >0: fewer warm-up rounds where one round is long (warmup_rounds): a 64-token decode call
    # is itself 64 steady-state steps, and its third warm-up round cost 2-3 s of an H200 run
    warmup_budget_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def warmup_rounds(policy: StopPolicy, first_round_s: float, floor: int = 1) -> int:
    """How many warm-up rounds to make, the first one (`first_round_s` seconds) made: the
    policy's `warmup`, or, with a `warmup_budget_s`, rounds at the first round's pace until they
    reach the budget (the round that reaches it is made: ceil(budget / first round)), never
    fewer than `floor` (the memory fold reads its peak on the last of at least 2) nor more than
    `warmup`. Rounds of under half the budget are all kept; only rounds that each take a
    sizeable share of it are dropped. No finite positive budget (0, None, NaN, inf): every round."""
    budget = policy.warmup_budget_s
    if budget is None or not 0 < budget < math.inf or policy.warmup <= 1:
        return policy.warmup
    fit = math.ceil(budget / max(first_round_s, 1e-9))
    return max(min(policy.warmup, fit), min(floor, policy.warmup))


class HostTimer:
    """Times `fn` with the host clock, synchronising the device around the timed region.
    Also keeps the process CPU seconds of the last sample (`last_cpu_s`): a sample whose
    process barely ran (descheduled by a neighbour for a whole time slice) is a measure of
    the machine's queue, not of the code, and compare leaves it out (docs/GATING.md)."""

    def __init__(self, sync: Callable[[], None] = lambda: None, clock: Clock = time.perf_counter_ns,
                 cpu_clock: Clock = time.process_time_ns):
        self.sync = sync
        self.clock = clock
        self.cpu_clock = cpu_clock
        self.last_cpu_s: float | None = None

    def __call__(self, fn: Callable[[], Any], inner: int = 1) -> float:
        self.sync()
        cpu_start = self.cpu_clock()
        start = self.clock()
        for _ in range(inner):
            fn()
        self.sync()
        end = self.clock()
        self.last_cpu_s = (self.cpu_clock() - cpu_start) / 1e9 / inner
        return (end - start) / 1e9 / inner


class EventTimer:
    """Times `fn` with device events (CUDA/ROCm/XPU/MPS): the GPU's own clock, so host-side
    launch overhead that overlaps GPU work is not counted twice."""

    def __init__(self, make_events: Callable[[], tuple[Any, Any]], sync: Callable[[], None]):
        self.make_events = make_events
        self.sync = sync

    def __call__(self, fn: Callable[[], Any], inner: int = 1) -> float:
        start, end = self.make_events()
        self.sync()
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / inner


def calibrate_inner(timer: Callable[[Callable[[], Any], int], float], fn: Callable[[], Any], target_s: float) -> int:
    """How many calls per sample make one sample last about `target_s` (1 if disabled)."""
    if target_s <= 0:
        return 1
    one = max(timer(fn, 1), 1e-9)
    return max(1, min(10_000, int(math.ceil(target_s / one))))


def measure_interleaved(
    variants: dict[str, Callable[[], Any]],
    timer: Callable[[Callable[[], Any], int], float],
    policy: StopPolicy = StopPolicy(),
    clock: Clock = time.perf_counter_ns,
    inner: dict[str, int] | None = None,
    after_round: Callable[[float], None] | None = None,
    cpu_samples: dict[str, list[float]] | None = None,
    before_sample: Callable[[str], None] | None = None,
    after_sample: Callable[[str], None] | None = None,
) -> dict[str, list[float]]:
    """Return raw per-call seconds per variant, after `policy.warmup` untimed rounds (the
    worker makes its own warm-up, with `warmup_budget_s`, and passes warmup=0 here). Order
    alternates every round (ABBA...) so neither variant always runs right after the other.
    `after_round(seconds timed in the round)` runs between rounds, outside every timed
    region; the worker passes none: work between rounds, even the old probe schedule's
    per-round budget check, slowed the next samples of tiny CPU cases
    (benchmarks/probe_between_rounds.py), so its probe samples before and after the rounds.
    `cpu_samples`, when given, receives each sample's process CPU seconds from timers that
    report them (`last_cpu_s`), index-aligned with the wall samples.
    `before_sample(variant)` and `after_sample(variant)` run right before and right after
    each timed sample, outside the timer: the before-hook after the previous round's
    `after_round`, so what that hook does is never inside a before/after pair (the worker
    reads the allocator's peak memory of each sample this way on GPUs)."""
    names = list(variants)
    for name in names:
        for _ in range(policy.warmup):
            variants[name]()
    inner = inner or {n: 1 for n in names}
    samples: dict[str, list[float]] = {n: [] for n in names}
    timed_total = 0.0
    started = clock()
    round_no = 0
    while True:
        order = names if round_no % 2 == 0 else names[::-1]
        round_s = 0.0
        for name in order:
            if before_sample is not None:
                before_sample(name)
            seconds = timer(variants[name], inner[name])
            if after_sample is not None:
                after_sample(name)
            samples[name].append(seconds)
            cpu = getattr(timer, "last_cpu_s", None)
            if cpu_samples is not None and cpu is not None:
                cpu_samples.setdefault(name, []).append(cpu)
            round_s += seconds * inner[name]
        timed_total += round_s
        round_no += 1
        if after_round is not None:
            after_round(round_s)
        n = min(len(s) for s in samples.values())
        elapsed = (clock() - started) / 1e9
        if n >= policy.max_samples or elapsed >= policy.max_time_s:
            break
        if n >= policy.min_samples and timed_total >= policy.min_time_s:
            break
    return samples


def process_cpu_s() -> float:
    """CPU seconds of this process plus its waited-for children (Inductor's C++ compiler
    runs are children): the compile's work, which a neighbour stealing the core does not
    inflate the way it inflates wall time. Not the compile-worker pool's processes (Triton
    compiles on GPUs): they outlive the compile and are never waited for."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def descendants_cpu_s(pid: int | None = None) -> float | None:
    """CPU seconds of the live descendants of `pid` (default: this process), each with the
    children it reaped (/proc/<pid>/stat utime + stime + cutime + cstime). Inductor's
    compile-worker pool lives there (Triton compiles on a GPU), which process_cpu_s misses
    until the pool exits. The delta over a compile plus process_cpu_s's delta is the whole
    compile's CPU time: a child reaped in between moves from here into RUSAGE_CHILDREN.
    None where /proc is missing."""
    import os

    root = os.getpid() if pid is None else pid
    proc = Path("/proc")
    if not (proc / str(root) / "stat").exists():
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited while we looked
        # after the command name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 1-based from state
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = sum(int(v) for v in fields[11:15]) / ticks
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    total, stack = 0.0, list(children.get(root, []))
    while stack:
        p = stack.pop()
        total += cpu.get(p, 0.0)
        stack.extend(children.get(p, []))
    return total


def minor_faults() -> int:
    """Minor page faults this process has taken (getrusage ru_minflt): a fault that needed no
    disk read, e.g. a first touch or a copy-on-write copy."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


class GcPauses:
    """The garbage collector's pauses while it is started: seconds and collections per
    generation (gc.callbacks). A compile allocates millions of objects, and its collections
    took 0.4-1.2 s of a 2.5 s tiny-MLP compile on a 2-core CPU, depending on how large the
    heap was (full collections come when the young objects outgrow a quarter of the old ones),
    so a compile-time difference between two ways of starting a process shows here first."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self._began: float | None = None

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = self.clock()
        elif self._began is not None:
            generation = min(int(info.get("generation", 0)), 2)
            self.seconds[generation] += self.clock() - self._began
            self.collections[generation] += 1
            self._began = None

    def start(self) -> GcPauses:
        import gc

        gc.callbacks.append(self._callback)
        return self

    def stop(self) -> dict[str, Any]:
        import gc

        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        return {"seconds": round(sum(self.seconds), 6), "seconds_by_generation": [round(x, 6) for x in self.seconds],
                "collections": list(self.collections)}


def timer_overhead_s(timer: Callable[[Callable[[], Any], int], float], n: int = 10_000) -> float:
    """Median seconds the timer itself adds to one sample (timing a no-op)."""
    noop: Callable[[], None] = lambda: None  # noqa: E731
    values = sorted(timer(noop, 1) for _ in range(n))
    return values[len(values) // 2]
