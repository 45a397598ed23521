"""The memory phase folded into the timed rounds (harness/measure/worker.py RoundPeaks):
a fake allocator device whose peak counter the variants' calls raise, the worker's real
measure() and memory() phases on it, and the real CPU path, where the pass stays."""

from __future__ import annotations

from dataclasses import replace

import pytest

import harness.measure.worker as worker
from harness.measure.devices import CpuDevice, Device
from harness.measure.probe import EDGE_SAMPLES, MachineProbe, ProbeKernel
from harness.measure.timing import HostTimer, StopPolicy, measure_interleaved
from harness.model.payloads import Timing
from harness.model.schema import Case
from tests.worker_fakes import case_state

MiB = 1 << 20


class FakeClock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.ns += int(seconds * 1e9)


class Buffer:
    """Device bytes held while the object lives, freed when it is collected (as a tensor)."""

    def __init__(self, device: FakeAllocator, nbytes: int) -> None:
        self.device, self.nbytes = device, nbytes
        device.in_use += nbytes
        device.peak = max(device.peak, device.in_use)

    def __del__(self) -> None:
        self.device.in_use -= self.nbytes


class FakeAllocator(Device):
    """A caching allocator's counters: bytes in use, and a peak that only a reset lowers."""

    type = "fakegpu"
    has_events = False

    def __init__(self) -> None:
        super().__init__(0)
        self.in_use = 0
        self.peak = 0
        self.resets = 0
        self.blind = False  # the next peak read returns None (a counter that could not be read)

    @property
    def torch_name(self) -> str:
        return "fakegpu:0"

    def transient(self, nbytes: int) -> None:
        Buffer(self, nbytes)  # allocated and freed at once: only the peak remembers it

    def reset_peak_memory(self) -> int:
        self.resets += 1
        self.peak = self.in_use
        return self.in_use

    def peak_memory(self) -> int | None:
        if self.blind:
            self.blind = False
            return None
        return self.peak

    @property
    def memory_kind(self) -> str:
        return "device_allocator"


def variant(device: FakeAllocator, clock: FakeClock, rises: list[int], seconds: float = 0.01):
    """A call that allocates rises[i] bytes on its i-th call (the last one repeated), then frees them."""
    calls = [0]

    def call() -> None:
        device.transient(rises[min(calls[0], len(rises) - 1)])
        calls[0] += 1
        clock.advance(seconds)

    return call


PROBE_RESIDENT = 68 * MiB  # the GPU probe's operands and copy buffers, held while its kernels live
PROBE_TRANSIENT = 500 * MiB  # what one probe sample allocates and frees
METER_TRANSIENT = 900 * MiB
WORKSPACE = 32 * MiB  # what the probe's first GEMM makes the process allocate for good (cuBLAS workspace)


def fake_probe(device: FakeAllocator, clock: FakeClock):
    """The GPU probe as gpu_kernels makes it: buffers its kernels' closures hold, re-made by
    `remake`; its first kernel call also allocates bytes that are not the probe's and stay
    (an H200's cuBLAS workspace, which a CUDA-graph capture had freed, re-made by the
    probe's GEMM): an allocator delta around the probe's start counts them as the probe's."""
    workspace: list[Buffer] = []

    def kernels() -> list[ProbeKernel]:
        held = Buffer(device, PROBE_RESIDENT)

        def kernel() -> None:
            assert held.nbytes  # the kernel keeps its buffers alive, as gpu_kernels' closures do
            if not workspace:
                workspace.append(Buffer(device, WORKSPACE))
            device.transient(PROBE_TRANSIENT)
            clock.advance(0.0001)

        return [ProbeKernel("gemm", kernel, 1)]

    def make_probe(device_type, torch_device, timer, clock_=None, threads=1):
        return MachineProbe(kernels(), timer, "fake-1", clock, remake=kernels)

    return make_probe


class AllocatingMeter(worker.ContentionMeter):
    def after_round(self, seconds: float) -> None:
        super().after_round(seconds)
        self.device.transient(METER_TRANSIENT)


@pytest.fixture
def gpu(monkeypatch):
    device, clock = FakeAllocator(), FakeClock()
    monkeypatch.setattr(worker, "make_probe", fake_probe(device, clock))
    AllocatingMeter.device = device
    monkeypatch.setattr(worker, "ContentionMeter", AllocatingMeter)
    return device, clock


def test_measure_interleaved_runs_the_sample_hooks_around_each_sample_after_the_round_hook():
    clock, events = FakeClock(), []

    def work(name):
        return lambda: (events.append(f"call {name}"), clock.advance(0.01))

    measure_interleaved({"a": work("a"), "b": work("b")}, HostTimer(clock=clock),
                        StopPolicy(warmup=0, min_samples=2, min_time_s=0, max_samples=2, max_time_s=1e9), clock,
                        after_round=lambda s: events.append("round"),
                        before_sample=lambda n: events.append(f"before {n}"),
                        after_sample=lambda n: events.append(f"after {n}"))
    assert events == ["before a", "call a", "after a", "before b", "call b", "after b", "round",
                      "before b", "call b", "after b", "before a", "call a", "after a", "round"]


def test_fold_reports_each_variants_peak_and_rise_and_matches_the_pass(gpu, monkeypatch):
    device, clock = gpu
    model = Buffer(device, 1000 * MiB)  # weights, resident through everything
    state = case_state(device, clock, {"eager": variant(device, clock, [300 * MiB]),
                                       "compiled": variant(device, clock, [120 * MiB])}, warmup=2)
    worker.measure(state)
    assert state.record.metrics["machine_probe"]["n"] == 2 * EDGE_SAMPLES  # before and after the rounds
    # the probe's buffers went with measure(); the workspace its GEMM made stays, as a real one does
    assert device.in_use == model.nbytes + WORKSPACE
    passes = {name: worker.memory_pass(device, fn) for name, fn in state.variants.items()}
    monkeypatch.setattr(worker, "memory_pass", lambda *a: pytest.fail("the fold should replace the pass"))
    worker.memory(state)
    for name, rise in (("eager", 300 * MiB), ("compiled", 120 * MiB)):
        block = getattr(state.record, name)
        assert block.memory_source == "rounds" and block.memory_kind == "device_allocator"
        # neither the probe's buffers nor its (or the meter's) transient allocations count; the
        # workspace does, as it did in the pass after the rounds (and not the probe's 68 MiB only
        # subtracted: an allocator delta around the probe's start read 100 MiB there)
        assert block.peak_memory_bytes == model.nbytes + WORKSPACE + rise and block.peak_memory_delta_bytes == rise
        assert block.peak_memory_bytes == passes[name].peak_memory_bytes
        assert block.peak_memory_delta_bytes == passes[name].peak_memory_delta_bytes
        assert state.round_peaks.reads[name] == 1 and len(block.samples_s) == 6  # the last warm-up call, read
    assert state.round_peaks.resident_bytes == 0
    block = state.record.metrics["memory_rounds"]
    assert block["probe_resident_bytes"] == 0 and block["reads"] == {"eager": 1, "compiled": 1}
    assert block["scope"] == "last_warmup"
    assert set(block["spent_s"]) == {"eager", "compiled"}


@pytest.mark.parametrize("warmup", [2, 3])
def test_nothing_runs_between_the_timed_samples(gpu, monkeypatch, warmup):
    """measure()'s order on an allocator device: the probe (its warm-up, then its first
    edge; then its kernels dropped), the case's untimed warm-up calls, the last of them
    inside a peak reset and read, then the 12 timed calls with nothing between them, then
    the probe's kernels re-made (each run once) and its second edge."""
    device, clock = gpu
    log: list[str] = []

    def kernels():
        log.append("remake")
        return [ProbeKernel("gemm", lambda: log.append("probe"), 1)]

    def logging_probe(device_type, torch_device, timer, clock_=None, threads=1):
        return MachineProbe(kernels(), timer, "fake-1", clock, remake=kernels)

    monkeypatch.setattr(worker, "make_probe", logging_probe)
    monkeypatch.setattr(device, "reset_peak_memory", lambda: log.append("reset") or 0)
    monkeypatch.setattr(device, "peak_memory", lambda: log.append("read") or 0)
    state = case_state(device, clock, {name: (lambda name=name: log.append(name)) for name in ("eager", "compiled")})
    state.policy = replace(state.policy, warmup=warmup)
    worker.measure(state)
    edge = ["probe"] * (1 + 3 + EDGE_SAMPLES)  # the kernels' warm-up call, 3 passes, the first edge
    read_warmup = ["reset", "eager", "read", "reset", "compiled", "read"]
    timed = ["eager", "compiled", "compiled", "eager"] * 3
    assert log == (["remake", *edge] + ["eager", "compiled"] * (warmup - 1) + read_warmup + timed
                   + ["remake", "probe"] + ["probe"] * EDGE_SAMPLES)
    assert state.record.metrics["machine_probe"]["n"] == 2 * EDGE_SAMPLES
    assert state.round_peaks.reads == {"eager": 1, "compiled": 1}


def test_fold_reads_the_last_warm_up_call_and_none_of_the_timed_ones(gpu):
    device, clock = gpu
    model = Buffer(device, 10 * MiB)  # noqa: F841 - held: resident weights
    # 3 warm-up calls (the last one read), then 6 timed calls, one of which allocates most
    state = case_state(device, clock, {"eager": variant(device, clock, [30 * MiB, 20 * MiB, 8 * MiB, 5 * MiB, 40 * MiB,
                                                                        5 * MiB])})
    state.policy = replace(state.policy, warmup=3)
    state.compiled_first_s = None
    worker.measure(state)
    worker.memory(state)
    peak = 10 * MiB + WORKSPACE + 8 * MiB
    assert state.record.eager.peak_memory_bytes == peak and state.record.eager.peak_memory_delta_bytes == 8 * MiB


@pytest.mark.parametrize("warmup", [0, 1])
def test_under_two_warm_up_calls_an_allocator_device_takes_the_pass(gpu, warmup):
    """The read call must be a steady-state one: with one warm-up call it would be a CUDA
    graph's recording (the compile phase made the graph's first call), so no read, and
    the pass after the rounds, whose calls are all replays."""
    device, clock = gpu
    resets = device.resets
    # the only warm-up call allocates more than the steady state's calls
    state = case_state(device, clock, {"eager": variant(device, clock, [9 * MiB, 4 * MiB])}, warmup=warmup)
    state.compiled_first_s = None
    worker.measure(state)
    assert f"warmup {warmup}" in state.record.metrics["memory_rounds"]["refused"] and state.round_peaks is None
    assert device.resets == resets  # nothing read in the measure phase
    worker.memory(state)
    assert state.record.eager.memory_source == "pass" and state.record.eager.peak_memory_delta_bytes == 4 * MiB


def test_a_frame_compiled_in_the_last_two_warm_up_rounds_voids_the_read(gpu, monkeypatch):
    """A train step that recompiles on its second call: with 2 warm-up calls the read one
    would be the new graph's CUDA-graph recording, not a replay; the pass reads instead."""
    import torch._dynamo.utils as dutils

    device, clock = gpu
    calls = variant(device, clock, [2 * MiB, 50 * MiB, 3 * MiB])  # warm-up 1 recompiles, 2 records

    def recompiling() -> None:
        if dutils.counters["frames"]["total"] == start and device.resets == 0:
            dutils.counters["frames"]["total"] += 1  # the first warm-up call compiles a frame
        calls()

    start = dutils.counters["frames"]["total"]
    state = case_state(device, clock, {"eager": recompiling}, probe=False, warmup=2)
    state.compiled_first_s = None
    worker.measure(state)
    assert "1 frame(s) compiled in the last 2 warm-up rounds" in state.record.metrics["memory_rounds"]["refused"]
    worker.memory(state)
    assert state.record.eager.memory_source == "pass" and state.record.eager.peak_memory_delta_bytes == 3 * MiB
    # the same case without the recompile keeps the read, from the second warm-up call
    steady = case_state(device, clock, {"eager": variant(device, clock, [2 * MiB, 4 * MiB])}, probe=False, warmup=2)
    steady.compiled_first_s = None
    worker.measure(steady)
    worker.memory(steady)
    assert steady.record.eager.memory_source == "rounds" and steady.record.eager.peak_memory_delta_bytes == 4 * MiB


def test_fold_without_a_probe_and_a_variant_left_unread_takes_the_pass_for_it(gpu):
    device, clock = gpu
    model = Buffer(device, 10 * MiB)  # noqa: F841 - held: resident weights
    compiled = variant(device, clock, [2 * MiB])
    blind = {"on": True}
    calls = [0]

    def compiled_blinding_the_counter() -> None:
        compiled()
        calls[0] += 1
        device.blind = blind["on"] and calls[0] >= 2  # from its read warm-up call on, its peak read returns None

    state = case_state(device, clock, {"eager": variant(device, clock, [3 * MiB]),
                                       "compiled": compiled_blinding_the_counter}, probe=False, warmup=2)
    worker.measure(state)
    assert state.round_peaks.resident_bytes == 0
    assert state.round_peaks.memory("compiled") is None and state.round_peaks.reads.get("compiled") is None
    blind["on"] = device.blind = False
    worker.memory(state)
    assert state.record.eager.memory_source == "rounds" and state.record.eager.peak_memory_delta_bytes == 3 * MiB
    assert state.record.compiled.memory_source == "pass" and state.record.compiled.peak_memory_delta_bytes == 2 * MiB


class UnresettableCpu(CpuDevice):
    """A CPU whose RSS high-water mark does not reset (no clear_refs: macOS, Linux < 4.0)."""

    def peak_reset_refusal(self) -> str | None:
        return "the RSS high-water mark cannot be reset (no clear_refs)"


def test_cpu_without_a_resettable_peak_keeps_the_separate_pass(monkeypatch):
    clock = FakeClock()
    calls = {"eager": 0}

    def eager() -> None:
        calls["eager"] += 1
        clock.advance(0.001)

    state = case_state(UnresettableCpu(), clock, {"eager": eager}, probe=False)
    state.compiled_first_s = None
    worker.measure(state)
    assert state.round_peaks is None
    assert state.record.metrics["memory_rounds"] == {"refused": "the RSS high-water mark cannot be reset (no clear_refs)"}
    timed = calls["eager"]
    worker.memory(state)
    assert calls["eager"] == timed + 3  # memory_pass's own calls
    block = state.record.eager
    assert block.memory_source == "pass" and block.memory_kind == "process_rss" and block.peak_memory_bytes > 0


def test_a_block_without_memory_source_loads_and_writes_back_unchanged():
    old = {"samples_s": [0.1], "first_call_s": 1.0, "inner_loops": 1, "summary": {"median": 0.1},
           "peak_memory_bytes": 5, "peak_memory_delta_bytes": 2, "memory_kind": "device_allocator"}
    block = Timing.from_dict(old)
    assert block.memory_source is None and block.to_dict() == old
    new = Timing.from_dict({**old, "memory_source": "rounds"})
    assert new.memory.memory_source == "rounds" and new.to_dict()["memory_source"] == "rounds"
    with pytest.raises(ValueError, match="memory_source"):
        Timing.from_dict({**old, "memory_source": 3})


def test_real_cpu_case_records_where_its_memory_came_from():
    """The real worker on a tiny MLP (aot_eager: eager and compiled variants): unchanged
    figures' shape on CPU, the source recorded: the timed rounds where the RSS high-water
    mark resets (Linux), else the pass (tests/test_cpu_memfold.py checks the figures)."""
    from compiler import get_compiler
    from harness.measure.devices import cpu_peak_reset_refusal
    from harness.run.runner import modules_for

    case = Case(workload="mlp-classic", scenario="forward", compiler="aot_eager", device="cpu", dtype="float32",
                batch_size=4, size="tiny")
    record = worker.run_case({"case": case.to_dict(), "compiler": get_compiler("aot_eager").to_dict(),
                              "policy": {"warmup": 1, "min_samples": 3, "min_time_s": 0.0, "max_samples": 5,
                                         "max_time_s": 2.0},
                              "workload_modules": modules_for("mlp-classic"), "seed": 0})
    assert record.status == "ok", record.error
    source = "rounds" if cpu_peak_reset_refusal() is None else "pass"
    for block in (record.eager, record.compiled):
        assert block.memory_source == source and block.memory_kind == "process_rss"
        assert block.peak_memory_bytes > 0 and block.peak_memory_delta_bytes is not None
    assert "memory" in record.metrics["phase_s"]
    saved = record.to_dict()
    assert saved["eager"]["memory_source"] == source


def load_check_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "memfold_check.py"
    spec = importlib.util.spec_from_file_location("memfold_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_script_exits_2_without_cuda(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is present: the script would run")
    assert load_check_script().main(["--out", "/nonexistent/never-written.json"]) == 2
    err = capsys.readouterr().err
    assert "CUDA is not available" in err and "--device cpu" in err and len(err.strip().splitlines()) == 1


def test_gpu_check_script_dry_mode_on_cpu_compares_the_rounds_with_the_pass(tmp_path, monkeypatch):
    import json

    from harness.measure.devices import cpu_peak_reset_refusal

    if cpu_peak_reset_refusal() is not None:
        pytest.skip(f"no per-process RSS peak reset here: {cpu_peak_reset_refusal()}")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    out = tmp_path / "memfold.json"
    assert load_check_script().main(["--device", "cpu", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    (case,) = data["cases"]
    assert case["status"] == "ok" and case["record_memory_source"] == {"eager": "rounds", "compiled": "rounds"}
    for row in case["variants"]:
        assert row["folded"] is True and row["memory_kind"] == "process_rss" and row["rounds_reads"] == 1
        assert row["pass_peak_bytes"] > 0 and row["pass_wall_s"] > 0 and row["samples"] >= 3
    # the RSS over the timed rounds and over the pass's 3 calls: the same figure (within 1 MiB)
    assert data["summary"]["verdicts"] == {"same": 2} and data["summary"]["failed"] == []


def test_gpu_check_script_compares_pass_and_rounds_on_an_allocator_device(gpu, capsys):
    device, clock = gpu
    script = load_check_script()
    model = Buffer(device, 100 * MiB)  # noqa: F841 - held: resident weights
    # compiled: its read warm-up call rises by 30 MiB, the pass's calls by 20 MiB: a real difference
    state = case_state(device, clock, {"eager": variant(device, clock, [8 * MiB]),
                                       "compiled": variant(device, clock, [20 * MiB, 30 * MiB] + [20 * MiB] * 9)},
                       warmup=2)
    worker.measure(state)
    eager, compiled = (script.compare_variant(state, name) for name in ("eager", "compiled"))
    assert eager["folded"] and eager["verdict"] == "same" and eager["peak_diff_mib"] == 0 == eager["delta_diff_mib"]
    assert eager["rounds_reads"] == 1 and eager["rounds_wall_s"] >= 0
    assert compiled["verdict"] == "DIFFERS" and compiled["delta_diff_mib"] == pytest.approx(10.0)
    assert compiled["peak_diff_pct"] == pytest.approx(100 * 10 / (120 + 32))  # the probe's workspace counts
    script.print_table([{"case": "fake/forward/inductor", "status": "ok", "variants": [eager, compiled],
                         "record_memory_source": {}, "probe_resident_bytes": PROBE_RESIDENT, "wall_s": 1.0}])
    table = capsys.readouterr().out
    assert "DIFFERS" in table and "+10.00 (+6.58%)" in table and "68.0 MiB" in table


def test_the_real_gpu_probe_set_frees_its_buffers_on_release_and_remakes_them():
    """gpu_kernels' tensors (here on the CPU) live only in the kernels' closures: release()
    frees them, restore() makes the same set again, and sampling goes on after it."""
    import gc
    import weakref

    from harness.measure.probe import GPU_PROBE_VERSION, make_probe

    probe = make_probe("fakegpu", "cpu", lambda fn, inner: (fn(), 1e-5)[1])
    assert probe.version == GPU_PROBE_VERSION and probe.remake is not None
    import torch

    held = [weakref.ref(cell.cell_contents) for k in probe.kernels for cell in k.fn.__closure__ or ()
            if isinstance(cell.cell_contents, torch.Tensor)]
    assert len(held) == 4  # a, b (the GEMM), src, dst (the copy)
    probe.sample()
    assert probe.release() and not probe.kernels
    gc.collect()
    assert all(ref() is None for ref in held)
    probe.restore()
    probe.sample()
    assert [k.name for k in probe.kernels] == ["gemm", "copy"] and probe.to_dict()["n"] == 2


def _first_call_state(device, clock, eager):
    from types import SimpleNamespace

    state = case_state(device, clock, {"eager": eager})
    state.prepared = SimpleNamespace(eager=eager, compiled=None, compare=None, accuracy_output=None,
                                     build_compiled_state=None)
    return state


def test_the_eager_first_call_peak_is_read_before_any_compile_on_an_allocator(gpu, monkeypatch):
    """The eager first call's peak and rise (the figure a decode eager case is derived from,
    harness/run/twins.py), read around that call alone: a peak left by the build before it
    does not count, what the call allocates does."""
    device, clock = gpu
    monkeypatch.setattr(worker, "_accuracy_output", lambda prepared, variant, out: out)
    weights = Buffer(device, 100 * MiB)  # noqa: F841 - held: resident weights
    device.transient(700 * MiB)  # the build's own transient peak, before the reset
    state = _first_call_state(device, clock, variant(device, clock, [12 * MiB]))
    worker.eager_first_call(state)
    assert state.record.metrics[worker.EAGER_FIRST_CALL_MEMORY_KEY] == {
        "peak_bytes": 112 * MiB, "delta_bytes": 12 * MiB, "compiled_state_deferred": False, "held_output_bytes": 0}
    assert state.eager_first_s == pytest.approx(0.01)


def test_a_deferred_compiled_state_is_built_after_the_first_call_read_and_outside_its_timer(gpu, monkeypatch):
    """decode's compiled cache (Prepared.build_compiled_state): built after the eager first
    call's read, so a compiled case's read holds only what the eager case's process holds."""
    device, clock = gpu
    monkeypatch.setattr(worker, "_accuracy_output", lambda prepared, variant, out: out)
    weights = Buffer(device, 100 * MiB)  # noqa: F841 - held: resident weights
    held: list[Buffer] = []
    state = _first_call_state(device, clock, variant(device, clock, [12 * MiB]))
    state.prepared.compiled = lambda: None  # a compiled case

    def build_cache() -> None:
        held.append(Buffer(device, 72 * MiB))
        clock.advance(0.5)

    state.prepared.build_compiled_state = build_cache
    worker.eager_first_call(state)
    assert state.record.metrics[worker.EAGER_FIRST_CALL_MEMORY_KEY] == {
        "peak_bytes": 112 * MiB, "delta_bytes": 12 * MiB, "compiled_state_deferred": True, "held_output_bytes": 0}
    assert len(held) == 1 and device.in_use == 172 * MiB  # built, and alive for the compiled variant
    assert state.eager_first_s == pytest.approx(0.01)  # the build is not in the first call's time


def test_the_first_call_read_counts_the_output_kept_for_the_accuracy_check(gpu, monkeypatch):
    """What the worker keeps of the first call (the accuracy reference) is alive at every later
    read and was not at this one: its allocator bytes go with the read, on the case's device only."""
    import torch

    device, clock = gpu
    kept = {"logits": torch.zeros(1, 1000, dtype=torch.bfloat16), "tokens": torch.zeros(1, 4, dtype=torch.long)}
    monkeypatch.setattr(worker, "_accuracy_output", lambda prepared, variant, out: kept)
    monkeypatch.setattr(device, "type", "cpu")  # the kept tensors' device
    state = _first_call_state(device, clock, variant(device, clock, [12 * MiB]))
    worker.eager_first_call(state)
    assert state.record.metrics[worker.EAGER_FIRST_CALL_MEMORY_KEY]["held_output_bytes"] == 2048 + 512


def test_held_output_bytes_rounds_each_storage_once_to_the_allocators_block_and_skips_other_devices():
    import torch

    logits = torch.zeros(1, 128256, dtype=torch.bfloat16)  # llama-3.1-8b's [1, vocab] row: 256,512 B
    tokens = torch.zeros(1, 64, dtype=torch.long)  # 512 B
    nested = {"logits": logits, "views": [logits[:, :10], (tokens,)], "meta": torch.zeros(3, device="meta"),
              "n": 3, "none": None}
    assert worker.held_output_bytes(nested, "cpu") == 256512 + 512
    assert worker.held_output_bytes(torch.zeros(3), "cpu") == 512  # 12 B take a whole block
    assert worker.held_output_bytes(nested, "cuda") == 0
    assert worker.held_output_bytes(torch.zeros(1, 256000, dtype=torch.bfloat16), "cpu") == 512000  # gemma's row


def test_the_cpu_has_no_eager_first_call_read(monkeypatch):
    monkeypatch.setattr(worker, "_accuracy_output", lambda prepared, variant, out: out)
    device = CpuDevice()
    monkeypatch.setattr(device, "reset_peak_memory", lambda: pytest.fail("an RSS reset around the first call"))
    clock = FakeClock()
    state = _first_call_state(device, clock, lambda: clock.advance(0.01))
    worker.eager_first_call(state)
    assert worker.EAGER_FIRST_CALL_MEMORY_KEY not in state.record.metrics


@pytest.mark.parametrize(("warmup", "budget", "first_round_s", "floor", "rounds"), [
    (3, 0.0, 5.0, 2, 3),    # no budget: the policy's rounds, however long
    (3, 1.0, 0.3, 2, 3),    # short rounds: all of them fit
    (3, 1.0, 0.6, 2, 2),    # two fit (ceil): the third is dropped
    (3, 1.0, 3.4, 2, 2),    # a decode round: the fold's floor of 2 holds
    (3, 1.0, 3.4, 1, 1),    # no fold: one round is enough
    (5, 2.0, 0.5, 2, 4),
    (1, 1.0, 9.0, 2, 1),    # never more than asked: the floor is capped by `warmup`
    (0, 1.0, 9.0, 2, 0),
    (3, 0.5, 0.5, 1, 1),    # a round that reaches the budget is the last
    (3, 1.0, 0.5, 1, 2),
    (3, -1.0, 9.0, 1, 3),   # no finite positive budget: every round (a suite's POLICY is not parsed by the CLI)
    (3, None, 9.0, 1, 3),
    (3, float("nan"), 9.0, 1, 3),
    (3, float("inf"), 9.0, 1, 3),
])
def test_warmup_rounds_fit_the_budget_between_the_floor_and_the_policy(warmup, budget, first_round_s, floor, rounds):
    from harness.measure.timing import warmup_rounds

    assert warmup_rounds(StopPolicy(warmup=warmup, warmup_budget_s=budget), first_round_s, floor) == rounds


@pytest.mark.parametrize(("call_s", "rounds"), [(0.01, 3), (0.6, 2)])
def test_a_warm_up_budget_drops_long_rounds_and_the_read_stays_on_the_last(gpu, call_s, rounds):
    """With a budget, rounds of long calls stop at the fold's 2 and the peak is still read on
    the last one made (its rise: 9 MiB after 2 rounds, 8 after 3; never the first call's 30);
    short calls keep all 3. Each warm-up call's seconds are in the record."""
    device, clock = gpu
    rises = [30 * MiB, 9 * MiB, 8 * MiB, 5 * MiB]
    state = case_state(device, clock, {"eager": variant(device, clock, rises, call_s),
                                       "compiled": variant(device, clock, rises, call_s)}, warmup=3)
    state.policy = replace(state.policy, warmup_budget_s=1.0)
    worker.measure(state)
    block = state.record.metrics[worker.WARMUP_KEY]
    assert (block["rounds"], block["of"], block["budget_s"]) == (rounds, 3, 1.0)
    assert block["calls_s"]["eager"] == [pytest.approx(call_s)] * rounds
    assert state.round_peaks.reads == {"eager": 1, "compiled": 1}
    worker.memory(state)
    assert state.record.eager.memory_source == "rounds"
    assert state.record.eager.peak_memory_delta_bytes == rises[rounds - 1]


def test_a_warm_up_budget_keeps_a_third_round_after_a_round_that_compiled(gpu):
    """Round 0 recompiles (a train step's second call): cut to 2, the last two rounds would hold
    that compile and the read would be refused for a pass of 3 more long calls; the budget keeps
    a third round instead, and the read stays in the rounds, on the steady third call."""
    import torch._dynamo.utils as dutils

    device, clock = gpu
    calls = variant(device, clock, [20 * MiB, 9 * MiB, 7 * MiB, 5 * MiB], 0.6)
    seen = [0]

    def recompiling_once() -> None:
        seen[0] += 1
        if seen[0] == 1:
            dutils.counters["frames"]["total"] += 1
        calls()

    state = case_state(device, clock, {"eager": recompiling_once}, probe=False, warmup=3)
    state.compiled_first_s = None
    state.policy = replace(state.policy, warmup_budget_s=1.0)
    worker.measure(state)
    assert state.record.metrics[worker.WARMUP_KEY]["rounds"] == 3
    assert "refused" not in state.record.metrics["memory_rounds"], state.record.metrics["memory_rounds"]
    worker.memory(state)
    assert state.record.eager.memory_source == "rounds" and state.record.eager.peak_memory_delta_bytes == 7 * MiB


def test_a_warm_up_budget_without_the_fold_may_leave_one_round():
    clock = FakeClock()
    calls: list[str] = []
    state = case_state(CpuDevice(), clock, {"eager": lambda: (calls.append("eager"), clock.advance(2.0))},
                       probe=False, warmup=3)
    state.policy = replace(state.policy, warmup_budget_s=1.0)
    worker._warm_up(state, None)
    assert calls == ["eager"] and state.record.metrics[worker.WARMUP_KEY]["rounds"] == 1


def test_the_compiled_first_output_is_freed_once_accuracy_has_compared_it(gpu):
    """A compiled case's later peaks hold what an eager case's own process holds: the eager
    first call's output only, not the compiled one's copy as well (a derived eager peak was one
    compiled output high: 785 MiB for GPT-Neo bs32's logits on the H200)."""
    from types import SimpleNamespace

    device, clock = gpu
    state = case_state(device, clock, {"eager": variant(device, clock, [MiB])}, probe=False)
    state.out_eager, state.out_compiled = Buffer(device, 4 * MiB), Buffer(device, 4 * MiB)
    compiled = variant(device, clock, [MiB])
    state.prepared = SimpleNamespace(compare=lambda eager, out, dtype: {"status": "pass", "sizes": (eager.nbytes, out.nbytes)},
                                     compiled=compiled)
    assert device.in_use == 8 * MiB
    worker.accuracy(state)
    assert state.record.metrics["accuracy"] == {"status": "pass", "sizes": (4 * MiB, 4 * MiB)}  # compared first
    assert state.out_compiled is None and device.in_use == 4 * MiB  # then freed; the eager output stays
    assert state.variants["compiled"] is compiled
