"""Contention: run-queue wait of the process's threads over the timed rounds."""

import sys
import threading
import time

import pytest

from harness.measure.contention import (
    ContentionMeter,
    ThreadStat,
    delta,
    is_contended,
    parse_schedstat,
    read_proc_schedstat,
    snapshot,
    wait_fraction,
)

MS = 1_000_000  # ns


class FakeProc:
    """Schedstat text per thread and a clock, both advanced by the test."""

    def __init__(self) -> None:
        self.now = 0
        self.threads: dict[str, list[int]] = {}

    def clock(self) -> int:
        return self.now

    def reader(self):
        return {tid: f"{c} {w} {s}\n" for tid, (c, w, s) in self.threads.items()} or None

    def run(self, wall_ms: int, **per_thread: tuple[int, int]) -> None:
        """Advance the clock; each named thread gains (cpu ms, wait ms) and one slice."""
        self.now += wall_ms * MS
        for tid, (cpu, wait) in per_thread.items():
            c, w, s = self.threads.setdefault(tid, [0, 0, 0])
            self.threads[tid] = [c + cpu * MS, w + wait * MS, s + 1]


def test_parse_schedstat():
    assert parse_schedstat("503805508 3097193 43\n") == ThreadStat(503805508, 3097193, 43)
    assert parse_schedstat("") is None and parse_schedstat("1 2") is None and parse_schedstat("a b c") is None


def test_quiet_window_is_not_contended():
    proc = FakeProc()
    proc.run(0, t1=(0, 0), t2=(0, 0))
    meter = ContentionMeter(2, reader=proc.reader, clock=proc.clock, threshold=0.15).start()
    for _ in range(4):
        proc.run(100, t1=(99, 1), t2=(98, 2))
        meter.after_round()
    block = meter.stop()
    assert block["contended"] is False
    assert block["cpu_wait_fraction"] == pytest.approx(12 / (2 * 400))
    assert block["cpu_share"] == pytest.approx(788 / 800)
    assert block["threads"] == 2 and block["threads_ran"] == 2 and block["rounds"] == 4
    assert block["rounds_over_threshold"] == 0 and block["threshold"] == 0.15


def test_hog_on_every_core_is_contended():
    proc = FakeProc()
    proc.run(0, t1=(0, 0), t2=(0, 0))
    meter = ContentionMeter(2, reader=proc.reader, clock=proc.clock).start()
    for _ in range(3):
        proc.run(100, t1=(50, 50), t2=(45, 55))  # each thread ready the whole time, on a core half of it
        meter.after_round()
    block = meter.stop()
    assert block["contended"] is True
    assert block["cpu_wait_fraction"] == pytest.approx(0.525)
    assert block["rounds_over_threshold"] == 3 and block["max_round_wait_fraction"] == pytest.approx(0.525)


def test_a_burst_shows_per_round_though_the_window_average_stays_low():
    proc = FakeProc()
    proc.run(0, t1=(0, 0))
    meter = ContentionMeter(1, reader=proc.reader, clock=proc.clock, threshold=0.15).start()
    for wait in (0, 0, 60, 0, 0, 0, 0, 0):
        proc.run(100, t1=(100 - wait, wait))
        meter.after_round()
    block = meter.stop()
    assert block["contended"] is False and block["cpu_wait_fraction"] == pytest.approx(60 / 800)
    assert block["rounds_over_threshold"] == 1 and block["max_round_wait_fraction"] == pytest.approx(0.6)


def test_threads_born_in_the_window_count_whole_and_lost_ones_are_reported():
    before = {"1": ThreadStat(10, 5, 1), "2": ThreadStat(10, 5, 1)}
    after = {"1": ThreadStat(30, 15, 3), "3": ThreadStat(7, 4, 2)}  # 2 exited, 3 was born
    d = delta(before, after)
    assert (d.cpu_ns, d.wait_ns, d.slices, d.threads_ran, d.threads_lost) == (27, 14, 4, 2, 1)


def test_the_wait_of_threads_beyond_the_pool_is_counted_too():
    # a thread outside the case's pool (the probe's helper) waits as well: the process waited
    proc = FakeProc()
    proc.run(0, t1=(0, 0))
    meter = ContentionMeter(1, reader=proc.reader, clock=proc.clock).start()
    proc.run(100, t1=(90, 10), helper=(5, 20))
    assert meter.stop()["cpu_wait_fraction"] == pytest.approx(0.30)


def test_no_schedstat_is_unmeasured_never_zero():
    meter = ContentionMeter(2, reader=lambda: None).start()
    meter.after_round()
    block = meter.stop()
    assert block["contended"] is None and block["cpu_wait_fraction"] is None and block["threads"] == 2
    assert "not measured" in block["note"]
    assert is_contended({"contention": block}) is None


def test_counters_that_never_move_are_unmeasured():
    proc = FakeProc()
    proc.run(0, t1=(0, 0))
    meter = ContentionMeter(1, reader=proc.reader, clock=proc.clock).start()
    proc.now += 100 * MS  # wall moves, the kernel's counters do not
    block = meter.stop()
    assert block["contended"] is None and "did not move" in block["note"]


def test_schedstat_lost_mid_window_is_unmeasured():
    proc = FakeProc()
    proc.run(0, t1=(0, 0))
    meter = ContentionMeter(1, reader=proc.reader, clock=proc.clock).start()
    proc.threads.clear()
    meter.after_round()
    assert meter.stop()["contended"] is None


def test_wait_fraction_needs_a_window():
    assert wait_fraction(5, 2, 0) is None and wait_fraction(5, 0, 10) is None
    assert wait_fraction(5, 2, 10) == 0.25


def test_is_contended_reads_only_a_measured_bool():
    assert is_contended({"contention": {"contended": True}}) is True
    assert is_contended({"contention": {"contended": False}}) is False
    assert is_contended({}) is None and is_contended(None) is None


@pytest.mark.skipif(not sys.platform.startswith("linux") or read_proc_schedstat() is None,
                    reason="needs Linux /proc/self/task/*/schedstat")
def test_real_schedstat_sees_every_thread_and_its_cpu_time():
    release = threading.Event()
    spun = threading.Event()

    def spin() -> None:
        # 0.1 s of this thread's own CPU, however long the neighbours make that take
        deadline = time.perf_counter() + 10
        while time.thread_time() < 0.1 and time.perf_counter() < deadline:
            pass
        spun.set()
        release.wait()  # alive (asleep) until the meter has read it: a dead thread's counters are gone

    meter = ContentionMeter(1).start()
    thread = threading.Thread(target=spin)
    thread.start()
    try:
        assert str(thread.native_id) in (snapshot(read_proc_schedstat) or {})
        spun.wait(10)
        meter.after_round()
        block = meter.stop()
    finally:
        release.set()
        thread.join()
    assert block["contended"] in (True, False) and block["threads_ran"] >= 1
    assert block["cpu_s"] >= 0.1  # the spinning thread's CPU, read from its schedstat
    assert block["cpu_wait_fraction"] >= 0 and block["read_cost_s"] < 0.05 and block["rounds"] == 1


@pytest.mark.skipif(not sys.platform.startswith("linux") or read_proc_schedstat() is None,
                    reason="needs Linux /proc/self/task/*/schedstat")
def test_the_worker_records_contention_for_the_timed_rounds():
    """The real worker path (in this process, an eager tiny MLP): the record carries the
    block compare reads, with the case's thread count."""
    import torch

    from compiler import get_compiler
    from harness.measure.worker import run_case
    from harness.model.schema import Case
    from harness.run.runner import modules_for

    case = Case(workload="mlp-classic", scenario="forward", compiler="eager", device="cpu", dtype="float32",
                batch_size=8, size="tiny")
    spec = {"case": case.to_dict(), "compiler": get_compiler("eager").to_dict(),
            "policy": {"warmup": 1, "min_samples": 5, "min_time_s": 0.05, "max_samples": 50, "max_time_s": 3.0},
            "workload_modules": modules_for("mlp-classic"), "workload_files": [], "seed": 0}
    record = run_case(spec)
    assert record.status == "ok", record.error
    block = record.metrics["contention"]
    assert block["threads"] == torch.get_num_threads()
    assert isinstance(block["contended"], bool) and block["cpu_wait_fraction"] >= 0
    assert block["contended"] == (block["cpu_wait_fraction"] > block["threshold"])
    assert block["cpu_s"] > 0 and block["wall_s"] > 0
    # read before and after the rounds only: a read between them slowed tiny CPU cases' next samples
    assert "rounds" not in block and "rounds_over_threshold" not in block
    # the machine probe ran on the case's threads too, and its helper threads are gone
    probe = record.metrics["machine_probe"]
    assert probe["threads"] == block["threads"]
    # before the warm-up and after the rounds: enough samples for compare even in a case this short
    from harness.measure.probe import EDGE_SAMPLES, cpu_probe_version, kernel_medians

    assert probe["version"] == cpu_probe_version(block["threads"])

    assert probe["n"] == 2 * EDGE_SAMPLES and kernel_medians(probe) is not None
    assert not [t for t in threading.enumerate() if t.name.startswith("probe-gang")]
