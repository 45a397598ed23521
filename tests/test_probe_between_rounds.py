"""benchmarks/probe_between_rounds.py: its conditions (which work runs around the rounds),
the old between-rounds schedule it keeps as a reference, and its statistics; the GPU-only
conditions (the per-sample peak hooks) through a fake allocator device, since no GPU is here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.measure.probe import EDGE_SAMPLES
from harness.measure.timing import HostTimer, StopPolicy

ROOT = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("probe_between_rounds", ROOT / "benchmarks" / "probe_between_rounds.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


pbr = load_script()


class FakeProbe:
    """Counts samples; each costs `cost_s` of (fake) probe time."""

    version = "fake-1"
    sample_error = None

    def __init__(self, cost_s: float = 1e-3) -> None:
        self.cost_s = cost_s
        self.spent_s = 0.0
        self.calls: list[str] = []

    def sample(self) -> None:
        self.spent_s += self.cost_s
        self.calls.append("sample")

    def close(self) -> None:
        pass


class AllocatorDevice:
    """An allocator device as RoundPeaks sees it: resets and reads logged in order."""

    memory_kind = "device_allocator"

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def reset_peak_memory(self) -> int:
        self.log.append("reset")
        return 100

    def peak_memory(self) -> int:
        self.log.append("read")
        return 150


def rig_with(log: list[str], allocator: bool, probe: FakeProbe, rounds: int = 12):
    def variant(name: str):
        return lambda: log.append(name)

    state = SimpleNamespace(variants={"eager": variant("eager"), "compiled": variant("compiled")},
                            inner={"eager": 1, "compiled": 1},
                            device=AllocatorDevice(log) if allocator else SimpleNamespace(memory_kind="process_rss"))
    policy = StopPolicy(warmup=0, min_samples=rounds, max_samples=rounds, min_time_s=0.0)
    return pbr.Rig(state, HostTimer(), probe, probe.cost_s, allocator, policy)


def test_the_allocator_conditions_exist_only_where_the_peak_is_read_per_sample():
    assert pbr.conditions(rig_with([], False, FakeProbe())) == ["off", "noop", "probe", "edges"]
    assert pbr.conditions(rig_with([], True, FakeProbe())) == [
        "off", "noop", "probe", "edges", "peaks", "probe+peaks", "edges+peaks"]


def test_edges_sample_the_probe_before_the_first_round_and_after_the_last_only():
    log: list[str] = []
    probe = FakeProbe()
    probe.calls = log  # one log: where the samples fall among the timed calls
    loop = pbr.run_loop(rig_with(log, False, probe), "edges")
    k = EDGE_SAMPLES
    assert log[:k] == ["sample"] * k and log[-k:] == ["sample"] * k
    assert "sample" not in log[k:-k] and len(log[k:-k]) == 24
    assert loop.probe_gaps == [] and len(loop.samples["eager"]) == 12


def test_peaks_wrap_every_timed_call_in_a_reset_and_a_read():
    log: list[str] = []
    pbr.run_loop(rig_with(log, True, FakeProbe(), rounds=3), "peaks")
    timed = log[1:]  # the loop's first reset, before any sample (as the worker's before the rounds)
    assert log[0] == "reset"
    assert timed == [x for name in ["eager", "compiled", "compiled", "eager", "eager", "compiled"]
                     for x in ("reset", name, "read")]


def test_the_old_schedule_samples_between_rounds_within_its_budget():
    # each round: 2 calls of ~0 s timed; a budget of 0.5% of nothing never allows a sample
    log: list[str] = []
    probe = FakeProbe(cost_s=1e-3)
    probe.calls = log
    pbr.run_loop(rig_with(log, False, probe), "probe")
    assert "sample" not in log
    # 1 s timed per round: a 0.5 ms sample fits 10 times in the 5 ms share, the gap cap is 5
    gaps: list[int] = []
    schedule = pbr.BetweenRounds(FakeProbe(cost_s=0.5e-3), 0.5e-3, gaps)
    for _ in range(4):
        schedule(1.0)
    assert gaps == [0, 1, 2, 3] and len(schedule.costs) == 4 * pbr.OLD_SAMPLES_PER_GAP


def test_next_over_rest_compares_the_round_after_a_probe_gap_with_the_others():
    values = [1.0, 1.0, 3.0, 1.0, 1.0, 3.0, 1.0]
    assert pbr.next_over_rest(values, [1, 4]) == pytest.approx(3.0)
    assert pbr.next_over_rest(values, []) is None
    assert pbr.next_over_rest(values, [6]) is None  # the last round has no next one


def test_paired_change_sees_a_shift_and_not_its_absence():
    off = [1.0 + 0.01 * (i % 5) for i in range(20)]
    slower = [v * 1.05 for v in off]
    moved = pbr.paired_change(slower, off)
    assert moved["ratio"] == pytest.approx(1.05) and moved["ci"][0] > 1.0 and moved["mw_p"] < 0.05
    same = pbr.paired_change(list(off), off)
    assert same["ratio"] == pytest.approx(1.0) and same["ci"][0] <= 1.0 <= same["ci"][1]


def test_cuda_without_cuda_exits_2_with_one_line(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    assert pbr.main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "CUDA is not available" in err


def test_an_allocator_case_runs_every_condition_into_the_table(capsys):
    """The GPU path's bookkeeping on a fake allocator: every condition in every block set,
    the peak hooks' cost per sample only where they ran, a row per variant and condition."""
    rig = rig_with([], True, FakeProbe(cost_s=1e-6), rounds=4)
    result = pbr.measure_case(rig, 3, lambda what: None)
    rows = pbr.summarise(result)
    assert len(rows) == 2 * len(pbr.conditions(rig)) and all(n == 4 for n in result["rounds"]["peaks"])
    by = {(r["variant"], r["condition"]): r for r in rows}
    assert by[("eager", "peaks")]["hook_us"] > 0 and by[("eager", "probe+peaks")]["hook_us"] > 0
    assert by[("eager", "off")]["hook_us"] is None and by[("compiled", "edges")]["hook_us"] is None
    assert "ratio" not in by[("eager", "off")] and 0 < by[("compiled", "peaks")]["ratio"]
    pbr.print_table("fake/case", rows, 3)
    assert "edges+peaks" in capsys.readouterr().out


def test_block_sets_stop_at_the_deadline_after_three():
    rig = rig_with([], False, FakeProbe(cost_s=1e-6), rounds=2)
    result = pbr.measure_case(rig, 50, lambda what: None, deadline=0.0)
    assert len(result["rounds"]["off"]) == pbr.MIN_BLOCKS


def test_nested_dict_peaks_read_the_cuda_counters_through_the_nested_dict(monkeypatch):
    """The CUDA-only condition, on a fake torch.cuda: reset then current, peak after the call."""
    import torch

    log: list[str] = []
    counters = {"current": 100, "peak": 100}

    def reset(index):
        log.append(f"reset {index}")
        counters["peak"] = counters["current"]

    def call(name):
        def run():
            log.append(name)
            counters["peak"] = max(counters["peak"], counters["current"] + 50)
        return run

    monkeypatch.setattr(torch.cuda, "synchronize", lambda index=None: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict",
                        lambda index=None: {"allocated_bytes": {"all": dict(counters)}})
    rig = rig_with(log, True, FakeProbe(), rounds=2)
    rig.state.device.type, rig.state.device.index = "cuda", 0
    rig.state.variants = {"eager": call("eager"), "compiled": call("compiled")}
    assert pbr.conditions(rig)[-1] == "nestedpeaks"
    loop = pbr.run_loop(rig, "nestedpeaks")
    assert log == ["reset 0"] + [x for name in ("eager", "compiled", "compiled", "eager") for x in ("reset 0", name)]
    assert set(loop.hook_s) == {"eager", "compiled"} and loop.peak_bytes == {"eager": 150, "compiled": 150}
    peaks = pbr.NestedDictPeaks(0)
    assert peaks.reset_peak_memory() == 100 and peaks.peak_memory() == 100
