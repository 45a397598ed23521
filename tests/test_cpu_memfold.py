"""CPU peak memory from the timed rounds (harness/measure/worker.py RoundsWindowPeak): the
RSS high-water mark reset once before the first timed sample and read once after the last
where Linux resets it (devices.cpu_peak_reset_refusal), else the pass; the real path on a
tiny MLP against a pass in the same process; benchmarks/overhead.py's accounting of it."""

from __future__ import annotations

import importlib.util
import io
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import harness.measure.devices as devices
import harness.measure.worker as worker
from harness.measure.devices import CpuDevice
from tests.worker_fakes import case_state

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]
HAS_CLEAR_REFS = os.path.exists("/proc/self/clear_refs")


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- the reset check ----------------------------------------------------------------------

@pytest.mark.skipif(not HAS_CLEAR_REFS, reason="no /proc/self/clear_refs (not Linux)")
def test_the_rss_high_water_mark_resets_here_and_the_check_says_so():
    import numpy as np

    held = np.ones(64 * MiB // 8)  # 64 MiB touched, then freed: VmHWM stays above VmRSS
    del held
    assert devices.cpu_peak_rss() - devices.cpu_rss() > 32 * MiB
    assert devices.cpu_peak_reset_refusal() is None
    assert devices.cpu_peak_rss() - devices.cpu_rss() <= devices.RESET_SLACK_BYTES


def fake_proc(monkeypatch, status: str, refuse_write: bool = False) -> list[str]:
    """/proc/self/clear_refs and /proc/self/status as the devices module opens them."""
    writes: list[str] = []

    class ClearRefs(io.StringIO):
        def write(self, text: str) -> int:
            if refuse_write:
                raise PermissionError(13, "Permission denied")
            writes.append(text)
            return len(text)

    def fake_open(path, mode="r", *args, **kwargs):
        if path == "/proc/self/clear_refs":
            return ClearRefs()
        if path == "/proc/self/status":
            return io.StringIO(status)
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(devices, "open", fake_open, raising=False)
    return writes


def test_a_write_the_kernel_refuses_is_named(monkeypatch):
    fake_proc(monkeypatch, "VmHWM:\t 400000 kB\nVmRSS:\t 400000 kB\n", refuse_write=True)
    reason = devices.cpu_peak_reset_refusal()
    assert reason is not None and "clear_refs" in reason and "Permission denied" in reason


def test_a_reset_that_leaves_the_mark_above_the_rss_is_named(monkeypatch):
    writes = fake_proc(monkeypatch, "Name:\tpython\nVmHWM:\t 500000 kB\nVmRSS:\t 300000 kB\n")
    reason = devices.cpu_peak_reset_refusal()
    assert writes == ["5"] and reason is not None and "VmHWM stayed 195.3 MiB above VmRSS" in reason


def test_a_reset_that_worked_is_accepted_with_a_page_or_two_of_slack(monkeypatch):
    fake_proc(monkeypatch, "VmHWM:\t 300008 kB\nVmRSS:\t 300000 kB\n")
    assert devices.cpu_peak_reset_refusal() is None


def test_without_a_reset_the_memory_phase_takes_a_pass_and_says_why(monkeypatch):
    fake_proc(monkeypatch, "VmHWM:\t 400000 kB\nVmRSS:\t 400000 kB\n", refuse_write=True)
    calls = {"n": 0}

    def eager() -> None:
        calls["n"] += 1

    state = case_state(CpuDevice(), lambda: 0, {"eager": eager}, probe=False, samples=4)
    state.compiled_first_s = None
    worker.measure(state)
    assert state.round_peaks is None
    assert "clear_refs" in state.record.metrics["memory_rounds"]["refused"]
    timed = calls["n"]
    worker.memory(state)
    assert calls["n"] == timed + 3 and state.record.eager.memory_source == "pass"


# ---- the window, on a fake CPU whose RSS the calls move --------------------------------------

class FakeRss(CpuDevice):
    """A process's RSS and its high-water mark, which only a reset lowers; events logged."""

    def __init__(self, events: list[str]) -> None:
        super().__init__(0)
        self.events = events
        self.rss = 300 * MiB
        self.hwm = 450 * MiB  # the compile's peak, before the rounds

    def touch(self, nbytes: int) -> None:
        self.hwm = max(self.hwm, self.rss + nbytes)

    def peak_reset_refusal(self) -> str | None:
        return None

    def reset_peak_memory(self) -> int:
        self.events.append("reset")
        self.hwm = self.rss
        return self.rss

    def peak_memory(self) -> int | None:
        self.events.append("read")
        return self.hwm


def test_the_window_resets_before_the_first_timed_sample_and_reads_after_the_last(monkeypatch):
    events: list[str] = []
    device = FakeRss(events)

    def call(name: str, rise: int):
        def fn() -> None:
            events.append(name)
            device.touch(rise)
        return fn

    state = case_state(device, lambda: 0, {"eager": call("eager", 7 * MiB), "compiled": call("compiled", 3 * MiB)},
                       probe=False, samples=4)
    # no gc before the CPU rounds (RoundsWindowPeak says why)
    monkeypatch.setattr(worker, "gc", SimpleNamespace(collect=lambda *a: pytest.fail("a gc before the CPU rounds")))
    worker.measure(state)
    monkeypatch.setattr(worker, "memory_pass", lambda *a: pytest.fail("the rounds should replace the pass"))
    worker.memory(state)
    # warm-up calls, the window's reset, 4 rounds untouched, one read
    last_reset = len(events) - 1 - events[::-1].index("reset")
    window = events[last_reset + 1:]
    assert window[-1] == "read" and "reset" not in window and window.count("read") == 1
    assert window[:-1] == ["eager", "compiled", "compiled", "eager"] * 2
    assert events[:last_reset].count("eager") == 1  # the warm-up call came before the window
    for block in (state.record.eager, state.record.compiled):
        # the process's peak over all the timed calls, for each variant; not the compile's 450 MiB
        assert block.memory_source == "rounds" and block.memory_kind == "process_rss"
        assert block.peak_memory_bytes == 307 * MiB and block.peak_memory_delta_bytes == 7 * MiB
    rounds = state.record.metrics["memory_rounds"]
    assert rounds["scope"] == "all_rounds" and rounds["reads"] == {"eager": 1, "compiled": 1}
    assert rounds["probe_resident_bytes"] == 0 and "gc_s" not in rounds and events.count("reset") == 1


# ---- the real path -----------------------------------------------------------------------------

@pytest.mark.skipif(not HAS_CLEAR_REFS, reason="no /proc/self/clear_refs (not Linux)")
def test_real_tiny_mlp_peak_from_the_rounds_equals_a_pass_in_the_same_process(tmp_path, monkeypatch):
    """The worker's own phases on mlp-classic/forward tiny (aot_eager: an eager and a compiled
    variant, no C++ build) with the smoke suite's policy; then the old pass per variant."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    script = load_script("cpu_memfold")
    spec, _ = script.plan("mlp-classic/forward/aot_eager")
    state = script.run_until_memory(spec)
    assert isinstance(state.round_peaks, worker.RoundsWindowPeak)
    rows = script.memory_rows(state)
    assert [row["variant"] for row in rows] == ["eager", "compiled"]
    for row in rows:
        assert row["rounds_reads"] == 1 and row["samples"] >= 10
        # the same figure: RSS is page-granular, and the rounds ran hundreds of calls to the pass's 3
        assert abs(row["rounds_peak_bytes"] - row["pass_peak_bytes"]) <= MiB, row
        assert abs(row["rounds_delta_bytes"] - row["pass_delta_bytes"]) <= MiB, row
    worker.memory(state)
    for block in (state.record.eager, state.record.compiled):
        assert block.memory_source == "rounds" and block.peak_memory_bytes == rows[0]["rounds_peak_bytes"]


# ---- benchmarks/overhead.py ----------------------------------------------------------------------

def record(case_id: str, wall: float, phases: dict, rounds: dict | None = None, **worker_extra) -> dict:
    metrics = {"phase_s": phases}
    if rounds is not None:
        metrics["memory_rounds"] = rounds
    return {"case_id": case_id, "status": "ok", "metrics": metrics, "eager": {"memory_source": "rounds"},
            "worker": {"wall_s": wall, "start": "preloaded", **worker_extra}}


def test_overhead_adds_the_memory_read_in_the_rounds_back_and_skips_derived_records(capsys):
    script = load_script("overhead")
    run = {"config": {"wall_s": 30.0}, "records": [
        record("mlp-classic/forward/inductor/cpu/float32/bs16/tiny", 4.0, {"compile": 1.5, "measure": 1.5},
               {"gc_s": 0.5, "spent_s": {"eager": 0.1, "compiled": 0.1}}),
        record("mlp-deep/forward/inductor/cpu/float32/bs64/tiny", 6.0, {"compile": 3.0, "measure": 2.0, "memory": 0.8}),
        record("llama-3.1-8b/prefill/inductor/cpu/float32/bs1/tiny", 20.0, {"compile": 15.0, "measure": 1.0}),
        record("mlp-classic/forward/eager/cpu/float32/bs16/tiny", 0.0, {}, from_case="x"),
    ]}
    rows = script.case_overheads(run)
    assert [r["case_id"].split("/")[0] for r in rows] == ["mlp-classic", "mlp-deep", "llama-3.1-8b"]
    assert rows[0]["overhead_s"] == pytest.approx(4.0 - 1.5 - 1.5 + 0.7) and rows[0]["mem_rounds_s"] == pytest.approx(0.7)
    assert rows[1]["overhead_s"] == pytest.approx(1.0) and rows[2]["overhead_s"] == pytest.approx(4.0)
    med = script.print_table(rows, run)
    assert med == pytest.approx((1.7 + 1.0) / 2)  # the tiny MLP cases only
    out = capsys.readouterr().out
    assert "tiny MLP cases (2): overhead median 1.35 s" in out and "PASS" in out and "all 3 case(s)" in out
