"""The machine-speed probe: its place before and after the timed rounds, its kernels, its score."""

from __future__ import annotations

import time

import pytest

from harness.measure.probe import (
    CPU_PROBE_VERSION,
    EDGE_SAMPLES,
    GPU_PROBE_VERSION,
    MIN_SAMPLES,
    MachineProbe,
    ProbeKernel,
    ProbeSchedule,
    cpu_kernels,
    probe_block,
    probe_score,
    probe_uses_torch,
    relative_slowness,
)
from harness.measure.timing import StopPolicy, measure_interleaved


class FakeClock:
    """Nanoseconds that advance only when a fake kernel or case 'runs'."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def run(self, seconds: float) -> None:
        self.now += int(seconds * 1e9)


def _fake_probe(clock: FakeClock, kernel_s: float = 1e-4) -> MachineProbe:
    def timer(fn, inner):
        for _ in range(inner):
            fn()
        return kernel_s

    kernels = [ProbeKernel(name, lambda: clock.run(kernel_s), 2) for name in ("a", "b", "c")]
    return MachineProbe(kernels, timer, "test-1", clock)


def test_schedule_samples_before_the_rounds_and_after_them_only():
    """EDGE_SAMPLES samples at each edge: enough for compare (MIN_SAMPLES) however short
    the case, and nothing in between (a sample between rounds slowed the next ones)."""
    clock = FakeClock()
    probe = _fake_probe(clock)  # one sample costs 3 kernels x 2 calls x 0.1 ms = 0.6 ms
    schedule = ProbeSchedule(probe)
    schedule.before_rounds()
    assert len(probe.samples["a"]) == EDGE_SAMPLES
    clock.run(2.0)  # the case's rounds: the probe is not called
    schedule.after_rounds(2.0)
    data = probe.to_dict(schedule.timed_s)
    assert data["n"] == 2 * EDGE_SAMPLES >= MIN_SAMPLES
    assert data["spent_s"] == pytest.approx(2 * EDGE_SAMPLES * 6e-4)
    assert data["share_of_case"] == pytest.approx(probe.spent_s / 2.0)
    assert probe_score(probe_block({"machine_probe": data})) == pytest.approx(1e-4)


def test_the_after_round_hook_runs_between_timed_rounds_never_inside_one():
    log = []

    def timer(fn, inner):
        log.append("start")
        fn()
        log.append("end")
        return 1e-3

    variants = {"eager": lambda: log.append("eager"), "compiled": lambda: log.append("compiled")}
    measure_interleaved(variants, timer, StopPolicy(warmup=0, min_samples=3, min_time_s=0.0), clock=lambda: 0,
                        after_round=lambda s: log.append(f"probe {s:.0e}"))
    assert log.count("probe 2e-03") == 3
    depth = 0
    for entry in log:
        depth += entry == "start"
        depth -= entry == "end"
        assert not (entry.startswith("probe") and depth), "the hook ran inside a timed region"


def test_probe_score_is_the_geomean_of_kernel_medians():
    block = probe_block({"machine_probe": {"version": "x", "samples_s": {"a": [1.0, 9.0, 2.0, 2.0, 3.0],
                                                                       "b": [8.0] * 5}}})
    assert probe_score(block) == pytest.approx(4.0)  # sqrt(2 * 8)
    assert probe_block({"machine_probe": {"error": "RuntimeError: no"}}) is None
    assert probe_score(probe_block({"machine_probe": {"samples_s": {"a": [1.0, 2.0]}}})) is None  # too few to trust
    assert probe_block(None) is None


def test_relative_slowness_resists_one_kernel_hit_by_a_neighbour():
    """Head: every kernel 20% slower except one that a neighbour hit 30x: the factor is the
    median over kernels (1.2), not dragged to 3x by the outlier."""
    def block(gemm, pointwise, python):
        return {"samples_s": {"gemm": [gemm] * 6, "pointwise": [pointwise] * 6, "python": [python] * 6}}

    factors = relative_slowness([block(1.0, 2.0, 3.0), block(1.2, 60.0, 3.6)], n_base=1)
    assert factors == pytest.approx([1.0, 1.2])
    assert relative_slowness([block(1.0, 2.0, 3.0), {"samples_s": {"gemm": [1.0] * 6}}], n_base=1) is None


def test_cpu_kernel_set_runs_for_real():
    import time

    def timer(fn, inner):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - start) / inner

    probe = MachineProbe(cpu_kernels(), timer, CPU_PROBE_VERSION)
    probe.warm_up()
    for _ in range(5):
        probe.sample()
    assert set(probe.samples) == {"gemm", "pointwise", "python"}
    assert all(len(v) == 5 and min(v) > 0 for v in probe.samples.values())
    assert probe_score(probe_block({"machine_probe": probe.to_dict()})) > 0


def test_cpu_kernel_set_never_touches_torch(monkeypatch):
    """The CPU set must not time the torch under test (a slower dispatcher would pass as
    machine drift): with `torch` poisoned, building and running every kernel still works."""
    import sys

    class Poisoned:
        def __getattr__(self, name):
            raise AssertionError(f"the CPU probe used torch.{name}")

    monkeypatch.setitem(sys.modules, "torch", Poisoned())
    kernels = cpu_kernels()
    for k in kernels:
        k.fn()
    assert [k.name for k in kernels] == ["gemm", "pointwise", "python"]
    assert not probe_uses_torch(CPU_PROBE_VERSION)
    assert probe_uses_torch(GPU_PROBE_VERSION) and probe_uses_torch("gpu-1") and probe_uses_torch("cpu-1")
    assert probe_uses_torch(None)


def test_host_timer_reports_cpu_seconds_and_the_loop_keeps_them_aligned():
    from harness.measure.timing import HostTimer

    wall, cpu = FakeClock(), FakeClock()

    def call():
        wall.run(1e-3)
        cpu.run(2.5e-4)  # descheduled for three quarters of the call

    timer = HostTimer(clock=wall, cpu_clock=cpu)
    cpu_samples: dict[str, list[float]] = {}
    samples = measure_interleaved({"eager": call, "compiled": call}, timer,
                                  StopPolicy(warmup=0, min_samples=4, min_time_s=0.0), clock=wall,
                                  cpu_samples=cpu_samples)
    assert samples["eager"] == pytest.approx([1e-3] * 4) and cpu_samples["eager"] == pytest.approx([2.5e-4] * 4)
    assert len(cpu_samples["compiled"]) == len(samples["compiled"])


def test_cpu_probe_runs_on_the_case_threads():
    """An N-thread case gets the set on N threads (`cpu-2xN`): its GEMM and pointwise calls
    run on N threads at once, really, and the record says how many."""
    import threading

    from harness.measure.probe import cpu_probe_version, make_probe

    def timer(fn, inner):
        for _ in range(inner):
            fn()
        return 1e-4

    before = threading.active_count()
    probe = make_probe("cpu", "cpu", timer, threads=2)
    try:
        assert threading.active_count() == before + 1  # one helper next to the calling thread
        probe.warm_up(1)
        probe.sample()
        assert probe.version == cpu_probe_version(2) == "cpu-3x2" and probe.to_dict()["threads"] == 2
        assert set(probe.samples) == {"gemm", "pointwise", "python", "gemm_x2", "pointwise_x2"}
        # the one-thread kernels stay (compare's median over kernels keeps their low noise);
        # the Python loop holds the GIL, so it has no gang form
        assert [k.gang is not None for k in probe.kernels] == [False, False, False, True, True]
    finally:
        probe.close()
    assert threading.active_count() == before  # close() ends the helper
    assert not probe_uses_torch("cpu-2x2") and not probe_uses_torch("cpu-2x16") and probe_uses_torch("cpu-2x")
    assert not probe_uses_torch("cpu-3x2") and not probe_uses_torch("cpu-2") and probe_uses_torch("cpu-4")
    assert make_probe("cpu", "cpu", timer).version == CPU_PROBE_VERSION  # one thread: no xN suffix


def test_thread_gang_waits_for_its_slowest_thread():
    """A run lasts until every thread finished its task, as an OpenMP region does: one
    thread held back (a neighbour took its core) holds the whole run back."""
    import threading

    from harness.measure.probe import ThreadGang

    gang = ThreadGang(3)
    ran: list[str] = []
    lock = threading.Lock()

    def task(name, seconds):
        def fn():
            time.sleep(seconds)
            with lock:
                ran.append(name)
        return fn

    try:
        start = time.perf_counter()
        gang.run([task("caller", 0.0), task("a", 0.0), task("slow", 0.2)])
        took = time.perf_counter() - start
        assert sorted(ran) == ["a", "caller", "slow"] and took >= 0.2
        ran.clear()
        gang.run([task("caller", 0.0), task("a", 0.0), task("b", 0.0)])  # reusable
        assert sorted(ran) == ["a", "b", "caller"]
    finally:
        gang.close()


def test_a_helper_thread_that_raises_fails_the_call_not_hangs_it():
    from harness.measure.probe import ThreadGang

    def boom():
        raise ValueError("kernel failed")

    gang = ThreadGang(2)
    try:
        with pytest.raises(ValueError, match="kernel failed"):
            gang.run([lambda: None, boom])
        gang.run([lambda: None, lambda: None])  # the gang still works after a failed call
    finally:
        gang.close()


def test_a_probe_sample_that_fails_stops_the_probe_not_the_case():
    clock = FakeClock()
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] > 3:
            raise RuntimeError("probe gang timed out")

    probe = MachineProbe([ProbeKernel("a", flaky, 1)], lambda fn, inner: (fn(), 1e-4)[1], "test-1", clock)
    schedule = ProbeSchedule(probe, edge_samples=5)
    schedule.before_rounds()  # would raise into the case without the guard
    schedule.after_rounds(1.0)
    block = probe.to_dict()
    assert block["samples_s"]["a"] == [1e-4] * 3 and block["sample_error"] == "RuntimeError: probe gang timed out"
    assert calls["n"] == 4  # no further tries after the failure
