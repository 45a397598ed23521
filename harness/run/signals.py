"""Stopping a run: SIGINT (Ctrl-C) and SIGTERM (a CI cancel) end it at any moment, losing no finished case.

While a run is in progress the runner holds `StopSignals`: both signals raise
KeyboardInterrupt in the main thread, and the runner turns that into "kill the case in
flight, save the finished ones, exit 130".

SIGINT is taken over even when the runner was started with it ignored. Python leaves an
inherited SIG_IGN in place, and a non-interactive shell gives one to every `cmd &` it
starts: a run launched that way (a CI script, a tool that backgrounds its jobs, a test
suite started with `&`) used to ignore Ctrl-C and `kill -INT` and ran on to the end. That
is how issue 18's SIGINT test failed while SIGTERM passed.

A few stretches must not be cut in half, so a signal that lands in one is held and raised
the moment the stretch ends (`deferred()`): spawning a worker and registering it for the
kill, the span from a case's last process exit to its record's fsync in the journal (the
case is finished once the runner has seen its worker exit, and with --warm-compile / --trace
its warm worker and tlparse too), and writing the run file and its history rows. Each of
those is short and bounded; the long waits inside them (the worker, the warm worker,
tlparse) reopen the window with `interruptible()`. Handlers only ever run in the main thread,
so all of this is a no-op in other threads (the `--gpus` pool's slots).

`checkpoint(name)` marks the named points of a run ("next-case", "worker-started",
"record-in-hand", "run-file-written") for tests, which place a signal exactly there with no
sleep and no race against a short case (tests/test_signals.py):
- in process, `set_checkpoint_hook(fn)`: fn(name) runs at each point (and may raise a signal);
- in a `python -m harness run` child, `COMPILEBENCH_TEST_PAUSE_AT=NAME:N:MARKER`: the N-th time
  the run reaches NAME it writes MARKER and waits for a stop signal, then handles it exactly
  as if it had arrived at that line.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
PAUSE_ENV = "COMPILEBENCH_TEST_PAUSE_AT"

_active: StopSignals | None = None
_checkpoint_hook: Callable[[str], None] | None = None


class StopSignals:
    """Install for the span of a run (main thread only; elsewhere it does nothing)."""

    def __init__(self) -> None:
        self.pending: int | None = None  # a signal held during a deferred stretch
        self.deferring = False
        self._previous: dict[int, Any] = {}
        self._reached: dict[str, int] = {}

    def __enter__(self) -> StopSignals:
        global _active
        if _active is not None or threading.current_thread() is not threading.main_thread():
            return self  # a nested run, or a run driven from a thread: the outer owner handles signals
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        _active = self
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        global _active
        if _active is not self:
            return
        for sig, previous in self._previous.items():
            if previous is not None:  # None: a handler installed outside Python, which cannot be put back
                signal.signal(sig, previous)
        _active = None
        if self.pending is not None and exc_type is None:
            self.pending = None
            raise KeyboardInterrupt

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.deferring:
            self.pending = self.pending or signum
            return
        raise KeyboardInterrupt


def _owner() -> StopSignals | None:
    return _active if threading.current_thread() is threading.main_thread() else None


@contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends, then raise KeyboardInterrupt (unless the
    block is already leaving with an exception, which then carries the run's end)."""
    owner = _owner()
    if owner is None:
        yield
        return
    outer = owner.deferring
    owner.deferring = True
    try:
        yield
    finally:
        owner.deferring = outer
    if not outer and owner.pending is not None:
        owner.pending = None
        raise KeyboardInterrupt


@contextmanager
def interruptible() -> Iterator[None]:
    """Inside a deferred stretch, let a signal interrupt this block (a blocking wait);
    one held already is raised on entry."""
    owner = _owner()
    if owner is None:
        yield
        return
    if owner.pending is not None:
        owner.pending = None
        raise KeyboardInterrupt
    outer = owner.deferring
    owner.deferring = False
    try:
        yield
    finally:
        owner.deferring = outer


def set_checkpoint_hook(hook: Callable[[str], None] | None) -> None:
    """Tests: call hook(name) at every checkpoint of a run in this process (None: stop)."""
    global _checkpoint_hook
    _checkpoint_hook = hook


def checkpoint(name: str) -> None:
    """A named point of a run, for tests (see the module doc); a no-op otherwise."""
    owner = _owner()
    if owner is None:
        return
    if _checkpoint_hook is not None:
        _checkpoint_hook(name)
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return
    point, _, rest = spec.partition(":")
    nth, _, marker = rest.partition(":")
    if point != name:
        return
    owner._reached[name] = owner._reached.get(name, 0) + 1
    if owner._reached[name] != int(nth):
        return
    # Blocked first, so a signal sent as soon as the marker exists cannot slip past sigwait.
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        tmp = Path(marker + ".tmp")
        tmp.write_text(name)
        tmp.replace(marker)
        signum = signal.sigwait(STOP_SIGNALS)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    owner._on_signal(signum, None)
