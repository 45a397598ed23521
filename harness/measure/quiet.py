"""Overlapped compiles, measurements alone: the reader-writer lock of `run --compile-overlap N`.

With `--compile-overlap N` the runner keeps up to N workers alive at once (harness/run/runner.py,
the case pool), so the cold compiles of, say, a model's inductor and reduce-overhead cases run
side by side on a host with cores to spare. Only the compiles may overlap: whatever a case
times after its compile (warm-up, timed rounds, memory, break cost) must run on a host where no
other worker does anything. One lock file per run, named by `QUIET_LOCK_ENV`, does both:

- a worker takes it shared the moment its process starts (harness/run/forkserver.py `_child`
  before it copies its server's pages; harness/run/isolation.py `main` before the imports), so
  workers that build, first-call and compile hold it together; the runner holds it shared
  too while it readies a worker (`RunnerHold`: a fork server started on first use imports
  then), up to the worker's start;
- before the `measure` phase it converts it to exclusive (flock drops the shared lock and
  waits for every other holder: no other worker is past its start and before its own measure),
  and keeps it to its exit, when the kernel releases it (a crash or a kill too).

A worker that starts while another measures waits at its start, before it does any work. A
case the runner runs again alone (`ALONE_ENV`: it ran out of memory beside another worker)
takes the lock exclusive at its start and keeps it: nothing else runs beside it at all. The
seconds spent waiting are recorded (`record.worker["quiet"]`, phase_s["quiet"]), with the
windows that let the runner say how much of each compile overlapped another worker's work
(`overlap_seconds`, metrics.compile_overlap.overlapped_s).

Times are `time.monotonic()`: CLOCK_MONOTONIC is one clock for every process on the host.
"""

from __future__ import annotations

import fcntl
import os
import time
from typing import Any

QUIET_LOCK_ENV = "COMPILEBENCH_QUIET_LOCK"
# set for a case the runner runs again alone (it ran out of memory beside another worker):
# the lock is taken exclusive at the start, so no other worker is alive beside any of it
ALONE_ENV = "COMPILEBENCH_QUIET_ALONE"

_fd: int | None = None
_times: dict[str, float] = {}


def hold_shared(path: str | None = None) -> bool:
    """Take the run's lock shared, waiting while another worker measures. No lock named
    (the variable unset: no --compile-overlap): nothing, False."""
    global _fd
    path = path if path is not None else os.environ.get(QUIET_LOCK_ENV)
    if not path or _fd is not None:
        return _fd is not None
    asked = time.monotonic()
    _fd = _locked(path, exclusive=os.environ.get(ALONE_ENV) == "1")
    _times.update(shared_asked=asked, shared_at=time.monotonic())
    return True


def _locked(path: str, exclusive: bool) -> int:
    """A descriptor of the lock file holding it shared (or exclusive), waiting as flock waits."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    return fd


class RunnerHold:
    """The runner's own hold on the lock while it readies a worker: a fork server that starts on
    first use imports torch and settles the ISA probe in the runner's time, before any worker
    holds the lock, and that work must not land in another worker's measurement. Taken shared
    (exclusive for a case run alone) before the server is looked up, released once the worker
    exists: the worker takes its own at its first line. No path (no --compile-overlap): nothing."""

    def __init__(self, path: str | None, alone: bool = False) -> None:
        self._fd: int | None = _locked(path, exclusive=alone) if path else None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def active() -> bool:
    return _fd is not None


def take_exclusive() -> float:
    """Convert to exclusive: returns the seconds waited for the other workers to finish their
    compiles (or their measurements). Held until `release` or the process's exit."""
    if _fd is None:
        raise RuntimeError("take_exclusive without hold_shared")
    asked = time.monotonic()
    fcntl.flock(_fd, fcntl.LOCK_EX)
    now = time.monotonic()
    _times.update(exclusive_asked=asked, exclusive_at=now)
    return now - asked


def mark(name: str) -> None:
    """A moment of this worker's life on the shared clock (the compile's start and end); only
    under a lock, so a run without --compile-overlap records nothing."""
    if _fd is not None:
        _times[name] = time.monotonic()


def release() -> None:
    global _fd
    if _fd is not None:
        os.close(_fd)  # closing the last descriptor of the open file drops the lock
        _fd = None


def times() -> dict[str, float]:
    """What `hold_shared`, `take_exclusive` and `mark` saw, for the record (empty without a lock)."""
    return {k: round(v, 6) for k, v in _times.items()}


def reset_for_tests() -> None:
    release()
    _times.clear()


def _interval(times: dict[str, Any], start: str, end: str) -> tuple[float, float] | None:
    a, b = times.get(start), times.get(end)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b >= a:
        return float(a), float(b)
    return None


def busy_window(times: dict[str, Any], end_s: float | None = None) -> tuple[float, float] | None:
    """When a worker was doing work that loads the host before measuring: from its shared lock
    to its exclusive request (or to `end_s`, its exit as the runner saw it, when it never asked:
    a worker that failed before measuring)."""
    window = _interval(times, "shared_at", "exclusive_asked")
    if window is None and isinstance(times.get("shared_at"), (int, float)) and end_s is not None:
        window = (float(times["shared_at"]), max(float(times["shared_at"]), end_s))
    return window


def measure_window(times: dict[str, Any], end_s: float | None) -> tuple[float, float] | None:
    """From the exclusive lock to the worker's exit (the runner's view of it)."""
    start = times.get("exclusive_at")
    if not isinstance(start, (int, float)) or end_s is None or end_s < start:
        return None
    return float(start), float(end_s)


def overlap_seconds(window: tuple[float, float] | None, others: list[tuple[float, float]]) -> float:
    """Seconds of `window` during which at least one of `others` was open (their union)."""
    if window is None:
        return 0.0
    lo, hi = window
    spans = sorted((max(a, lo), min(b, hi)) for a, b in others if min(b, hi) > max(a, lo))
    total, cur_a, cur_b = 0.0, None, None
    for a, b in spans:
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total
