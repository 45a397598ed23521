"""GcPauses (the garbage collector's pauses per generation, from gc.callbacks) and
descendants_cpu_s (the compile-worker pool's share of a compile's CPU time)."""

from __future__ import annotations

import gc

from harness.measure.timing import GcPauses


class StepClock:
    """Each reading 0.5 s after the last: every collection then lasts 0.5 s."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.5
        return self.now


def test_collections_are_counted_and_timed_per_generation():
    pauses = GcPauses(clock=StepClock()).start()
    gc.disable()  # only the explicit collections below
    try:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    finally:
        gc.enable()
        result = pauses.stop()
    assert result["collections"] == [1, 0, 2]
    assert result["seconds_by_generation"] == [0.5, 0.0, 1.0]
    assert result["seconds"] == 1.5


def test_stop_removes_the_callback_and_later_collections_are_not_counted():
    pauses = GcPauses(clock=StepClock()).start()
    first = pauses.stop()
    gc.collect(2)
    assert pauses._callback not in gc.callbacks
    assert pauses.stop() == first == {"seconds": 0.0, "seconds_by_generation": [0.0, 0.0, 0.0], "collections": [0, 0, 0]}


def test_a_real_allocation_burst_takes_young_collections():
    pauses = GcPauses().start()
    try:
        junk = [[i] for i in range(200_000)]  # container objects: they count towards gen-0 collections
    finally:
        result = pauses.stop()
    del junk
    assert result["collections"][0] > 10 and result["seconds"] > 0, result


DESCENDANTS_SCRIPT = """
import json, subprocess, sys, time
from harness.measure.timing import descendants_cpu_s, process_cpu_s
burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.6: pass\\ntime.sleep(30)"
child = subprocess.Popen([sys.executable, "-c", burn])
deadline = time.monotonic() + 20
while (descendants_cpu_s() or 0.0) < 0.5 and time.monotonic() < deadline:
    time.sleep(0.1)
live, before_reap = descendants_cpu_s(), process_cpu_s()
child.kill()
child.wait()
print(json.dumps({"live": live, "after": descendants_cpu_s(), "reaped": process_cpu_s() - before_reap}))
"""


def test_descendants_cpu_counts_a_live_child_and_drops_it_once_reaped():
    """In a process of its own: pytest's process has other descendants (tests/background.py's runs)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", DESCENDANTS_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["live"] >= 0.5, result  # the child's 0.6 s (and its interpreter start) while it lives
    assert result["after"] == 0.0, result  # reaped: its time is RUSAGE_CHILDREN's now, so the sum of both holds
    assert result["reaped"] >= 0.5, result
