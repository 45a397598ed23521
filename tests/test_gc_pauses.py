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


def test_descendants_cpu_counts_a_live_child_and_drops_it_once_reaped():
    import subprocess
    import sys
    import time

    from harness.measure.timing import descendants_cpu_s, process_cpu_s

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", burn])
    try:
        deadline = time.monotonic() + 20
        while (descendants_cpu_s() or 0.0) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.1)
        live = descendants_cpu_s()
        before_reap = process_cpu_s()
    finally:
        child.kill()
        child.wait()
    assert live is not None and live >= 0.5  # the child's 0.6 s (and the interpreter start) are counted while it lives
    assert descendants_cpu_s() == 0.0  # reaped: its time is RUSAGE_CHILDREN's now, so the sum of both is kept
    assert process_cpu_s() - before_reap >= 0.5
