"""GcPauses: the garbage collector's pauses per generation, read from gc.callbacks."""

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
