"""Eager figures from a compiled twin (harness/run/twins.py).

Planning and derivation with fake plans and records: which eager cases are derived, the
fallback when the twin fails, stateful scenarios and the CPU kept, the switch-off, --gpus;
the runner's loop with a fake worker (order, fallback, resume); and one real CPU run of a
tiny MLP with the rule forced on through the test hook, loaded by compare and report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.measure.spec import WorkerSpec
from harness.model.schema import Case, Record, load_run
from harness.run import runner, twins
from harness.run.journal import Journal, journal_path

ROOT = Path(__file__).resolve().parent.parent
FAKE_ENV = {"host": "test-host", "python_executable": sys.executable, "torch_version": "x", "cpu_model": "cpu",
            "packages": {}, "devices": {}, "git_commit": "abc"}
STATEFUL = {"train", "decode"}


def case(scenario: str, compiler: str, device: str = "cuda", workload: str = "w", **kw) -> Case:
    return Case(workload, scenario, compiler, device, "bfloat16", kw.pop("bs", 1), "full", "gpu", kw.pop("options", ()))


def plan(cases, kind: str = "device_allocator", deferred: frozenset[str] = frozenset(), **kw) -> twins.TwinPlan:
    """The plan with fake registries; `deferred`: the stateful scenarios whose compiled state
    is built after the eager first call (none here unless a test says so; decode in the real
    registry)."""
    kw.setdefault("env", {})
    return twins.plan_twins(cases, memory_kind=lambda device: kind, is_eager=lambda c: c == "eager",
                            stateful=lambda s: s in STATEFUL, state_after_first_call=lambda s: s in deferred, **kw)


def gpu_plan() -> list[Case]:
    return [case(s, c) for s in ("forward", "train", "prefill", "decode")
            for c in ("eager", "inductor-reduce-overhead", "inductor")]


def eager_block(median: float, peak: int) -> dict:
    return {"samples_s": [median] * 5, "first_call_s": 0.5, "inner_loops": 1, "summary": {"n": 5, "median": median},
            "peak_memory_bytes": peak, "peak_memory_delta_bytes": 1024, "memory_kind": "device_allocator"}


def twin_record(c: Case, status: str = "ok", eager: dict | None = None) -> Record:
    metrics = {"latency_s": 0.001, "throughput": 512000.0, "throughput_unit": "tokens/s", "units_per_call": 512.0,
               "eager_throughput": 256000.0, "speedup": 2.0, "speedup_ci_low": 1.9, "speedup_ci_high": 2.1,
               "compression_ratio": 1.0, "compile_time_s": 30.0, "compile_breakdown_s": {"total": 29.0},
               "graph_breaks": 0, "graphs": 1, "recompiles": 0, "cache": {"fx_graph_miss": 1},
               "accuracy": {"status": "pass"}, "phase_s": {"compile": 30.0}, "machine_probe": {"version": "gpu-1"},
               "contention": {"contended": False}, "build_s": 4.0, "policy": {"warmup": 3},
               "param_count": 8, "prompt_len": 512, "ttft_s_median": 0.001, "eager_ttft_s_median": 0.002,
               "prefill_tokens_per_s": 512000.0, "eager_prefill_tokens_per_s": 256000.0,
               "decode_first_call_compiled_frames_by_step": [1]}
    block = eager if eager is not None else eager_block(0.002, 15_000 << 20)
    return Record(c, status, eager=block if status == "ok" or eager is not None else None,
                  compiled=eager_block(0.001, 15_001 << 20) if status == "ok" else None, metrics=metrics,
                  notes=["prefill: logits of the last position only", "CUDA graphs were skipped 1 time(s): x"],
                  worker={"pid": 42, "wall_s": 40.0})


# ---- planning ----

def test_gpu_plan_derives_stateless_eager_cases_from_inductor():
    p = plan(gpu_plan())
    assert p.off is None
    assert p.sources == {case("forward", "eager").case_id: case("forward", "inductor").case_id,
                         case("prefill", "eager").case_id: case("prefill", "inductor").case_id}


def test_without_inductor_any_compiled_config_is_the_twin():
    cases = [case("forward", "eager"), case("forward", "inductor-reduce-overhead"), case("forward", "aot_eager")]
    assert plan(cases).sources == {cases[0].case_id: cases[1].case_id}


def test_no_twin_no_derivation():
    eager = case("forward", "eager")
    cases = [eager, case("forward", "inductor", bs=2), case("forward", "inductor", device="cuda:1"),
             case("forward", "inductor", options=(("resolution", 512),)), case("forward", "inductor", workload="v"),
             Case("w", "forward", "inductor", "cuda", "float16", 1, "full", "gpu", ()),  # another dtype
             Case("w", "forward", "inductor", "cuda", "bfloat16", 1, "tiny", "gpu", ())]  # another size
    assert plan(cases).sources == {}
    assert plan([eager, Case("w", "forward", "inductor", "cuda", "bfloat16", 1, "full", "gpu", ())]).sources  # the same


def test_cpu_and_sampled_mps_keep_the_eager_case_unless_the_test_hook_says_so():
    cases = [case("forward", "eager", device="cpu"), case("forward", "inductor", device="cpu")]
    assert plan(cases, kind="process_rss").sources == {}
    assert plan(cases, kind="mps_allocated_sampled_lower_bound").sources == {}
    hooked = plan(cases, kind="process_rss", env={twins.TEST_ON_CPU_ENV: "1"})
    assert hooked.sources == {cases[0].case_id: cases[1].case_id}


def test_real_device_memory_kinds():
    assert twins.device_memory_kind("cuda") in twins.DERIVABLE_MEMORY_KINDS
    assert twins.device_memory_kind("xpu") in twins.DERIVABLE_MEMORY_KINDS
    assert twins.device_memory_kind("cpu") not in twins.DERIVABLE_MEMORY_KINDS
    assert twins.device_memory_kind("mps") not in twins.DERIVABLE_MEMORY_KINDS


def test_switch_off_turns_it_off():
    off = plan(gpu_plan(), enabled=False)
    assert off.sources == {} and off.off == "--no-eager-from-twin"
    assert off.config()["enabled"] is False


def test_unknown_scenario_counts_as_stateful():
    from harness.model.scenarios import compiled_holds_state

    cases = [case("my-user-scenario", "eager"), case("my-user-scenario", "inductor")]
    assert twins.plan_twins(cases, memory_kind=lambda d: "device_allocator", env={}).sources == {}
    assert compiled_holds_state("my-user-scenario") is True


def test_every_registered_scenario_declares_its_compiled_state():
    from harness.model.scenarios import SCENARIOS, compiled_holds_state, compiled_state_declared

    runner.load_registries([])
    from harness.model import training  # noqa: F401 - registers train_module_only

    assert set(SCENARIOS) >= {"forward", "train", "prefill", "decode", "generate", "unet_step", "vae_decode"}
    assert [s for s in SCENARIOS if not compiled_state_declared(s)] == []
    stateless = {s for s in SCENARIOS if not compiled_holds_state(s)}
    assert stateless == {"forward", "prefill", "unet_step", "vae_decode"}


def test_order_puts_each_derived_eager_case_right_after_its_twin():
    cases = gpu_plan()
    ids = [c.case_id for c in plan(cases).order(cases)]
    assert len(ids) == len(cases) and set(ids) == {c.case_id for c in cases}
    for scenario in ("forward", "prefill"):
        twin = ids.index(case(scenario, "inductor").case_id)
        assert ids[twin + 1] == case(scenario, "eager").case_id
    assert ids.index(case("train", "eager").case_id) < ids.index(case("train", "inductor").case_id)  # kept in place


# ---- derivation ----

def test_derived_record_is_the_twins_eager_block_under_the_eager_case():
    eager_case, twin_case = case("prefill", "eager"), case("prefill", "inductor")
    p = plan([eager_case, twin_case])
    twin = twin_record(twin_case)
    derived = p.take(eager_case, {twin_case.case_id: twin})
    assert derived is not None and derived.case == eager_case and derived.status == "ok"
    assert derived.eager.to_dict() == twin.eager.to_dict() and derived.compiled is None
    m = derived.metrics
    assert m["latency_s"] == 0.002 and m["throughput"] == pytest.approx(twin.metrics["eager_throughput"])
    assert m["eager_source"]["from_case"] == twin_case.case_id and twins.is_derived(derived)
    assert m["ttft_s_median"] == 0.002 and m["prefill_tokens_per_s"] == 256000.0  # the eager variant's, unprefixed
    assert m["machine_probe"] == {"version": "gpu-1"} and m["prompt_len"] == 512 and m["build_s"] == 4.0
    for key in ("speedup", "speedup_ci_low", "compression_ratio", "compile_time_s", "compile_breakdown_s", "graphs",
                "recompiles", "cache", "accuracy", "phase_s", "eager_throughput", "eager_ttft_s_median",
                "decode_first_call_compiled_frames_by_step"):
        assert key not in m, key
    assert derived.notes[0].startswith(f"eager figures from {twin_case.case_id}")
    assert "prefill: logits of the last position only" in derived.notes
    assert not any(n.startswith("CUDA graphs") for n in derived.notes)
    assert derived.worker["start"] == "derived" and derived.worker["wall_s"] < 1.0
    assert Record.from_dict(json.loads(json.dumps(derived.to_dict()))).metrics["eager_source"] == m["eager_source"]
    assert p.config([twin, derived]) == {"enabled": True, "off": None, "pairs": p.sources, "derived": 1,
                                         "ran_own_process": {}}


def test_what_a_twin_says_of_its_compile_stays_with_the_twin():
    """The runner's notes about the twin's trace and cache folder, its compile metrics and
    Inductor's CPU ISA probe describe the compiled variant: a derived record has none of them."""
    eager_case, twin_case = case("prefill", "eager"), case("prefill", "inductor")
    twin = twin_record(twin_case)
    twin.notes += ["mode=max-autotune: x", "trace: trace t.log truncated from 90.0 MB to 64.0 MB",
                   "warm_trace: tlparse not installed", "part of this case's Inductor cache went to the fork server's x"]
    twin.metrics.update({"isa_probe_s": 0.1, "cpu_vec_isa": "avx2", "isa_probe_cached": True, "compile_gc": {"seconds": 1},
                         "cache_layers": {}, "compile_cpu_s": 3.0, "trace": {"dir": "x"}, "warm_compile": {},
                         "quiet_wait_s": 35.7, "compile_overlap": {"share": 1.0}})
    twin.metrics["memory_rounds"] = {"scope": "last_warmup", "reads": {"eager": 1, "compiled": 1},
                                     "spent_s": {"eager": 0.1, "compiled": 0.2}}
    derived = plan([eager_case, twin_case]).take(eager_case, {twin_case.case_id: twin})
    assert derived.notes[1:] == ["prefill: logits of the last position only"], derived.notes
    for key in ("isa_probe_s", "cpu_vec_isa", "isa_probe_cached", "compile_gc", "cache_layers", "compile_cpu_s", "trace",
                "warm_compile", "quiet_wait_s", "compile_overlap"):
        assert key not in derived.metrics, key
    assert derived.metrics["memory_rounds"] == {"scope": "last_warmup", "reads": {"eager": 1}, "spent_s": {"eager": 0.1},
                                                "from_case": twin_case.case_id}


def test_compare_says_when_an_eager_figure_changed_source():
    """An own-process eager record against a derived one: compare flags the change of source
    (its peak held the twin's process, its latency that process's host speed)."""
    from harness.analysis.compare import compare_case
    from harness.analysis.thresholds import ThresholdConfig

    eager_case, twin_case = case("prefill", "eager"), case("prefill", "inductor")
    own = Record(eager_case, "ok", eager=eager_block(0.002, 15_000 << 20), metrics={"latency_s": 0.002})
    derived = plan([eager_case, twin_case]).take(eager_case, {twin_case.case_id: twin_record(twin_case)})
    thresholds = ThresholdConfig().for_case(eager_case.case_id, eager_case.workload, eager_case.suite)
    flagged = compare_case(eager_case.case_id, [own], [derived], thresholds)
    assert any(f.startswith("eager figures derived from a compiled twin's process in head") for f in flagged.flags)
    same = compare_case(eager_case.case_id, [derived], [derived], thresholds)
    assert not any("derived from a compiled twin" in f for f in same.flags)


def test_derived_record_keeps_only_the_twins_eager_warm_up_calls():
    """metrics.warmup of a derived record: the eager variant's calls and the rounds that process
    made (from both variants' first round), stamped with the case they came from."""
    eager_case, twin_case = case("prefill", "eager"), case("prefill", "inductor")
    twin = twin_record(twin_case)
    twin.metrics["warmup"] = {"rounds": 2, "of": 3, "budget_s": 1.0,
                              "calls_s": {"eager": [0.9, 0.8], "compiled": [0.4, 0.3]}}
    derived = plan([eager_case, twin_case]).take(eager_case, {twin_case.case_id: twin})
    assert derived.metrics["warmup"] == {"rounds": 2, "of": 3, "budget_s": 1.0, "calls_s": {"eager": [0.9, 0.8]},
                                         "from_case": twin_case.case_id}
    assert twin.metrics["warmup"]["calls_s"]["compiled"] == [0.4, 0.3]  # the twin's own record untouched


def _with_first_call(record: Record, peak: int, delta: int, held: int | None = 257_024) -> Record:
    read = {"peak_bytes": peak, "delta_bytes": delta, "compiled_state_deferred": True}
    if held is not None:
        read["held_output_bytes"] = held
    record.metrics["eager_first_call_memory"] = read
    return record


def test_a_stateful_scenario_with_its_compiled_state_deferred_derives_its_peak_from_the_first_call():
    """decode's compiled variant builds its static KV cache after the eager first call, so the
    twin's eager first call holds what the eager case's process holds and its later eager reads
    do not (that cache): the derived peak is the first call's; a twin without that read, or one
    whose read came after its compiled state was built, leaves the eager case to run."""
    eager_case, twin_case = case("decode", "eager"), case("decode", "inductor")
    p = plan([eager_case, twin_case], deferred=frozenset({"decode"}))
    assert p.sources == {eager_case.case_id: twin_case.case_id} and p.first_call_peak == {eager_case.case_id}
    twin = _with_first_call(twin_record(twin_case), 14_990 << 20, 600 << 20)
    derived = p.take(eager_case, {twin_case.case_id: twin})
    assert derived is not None and p.fell_back == {}
    # the first call's peak plus the output the worker kept from it; the rise as read
    assert derived.eager.peak_memory_bytes == (14_990 << 20) + 257_024
    assert derived.eager.peak_memory_delta_bytes == 600 << 20
    assert derived.eager.memory_source == "first_call" and derived.eager.samples_s == twin.eager.samples_s
    assert derived.metrics["eager_first_call_memory"] == twin.metrics["eager_first_call_memory"]
    assert "first_call_memory" not in derived.metrics
    assert "memory_rounds" not in derived.metrics  # the twin's rounds held its KV cache: not where this peak came from
    assert derived.notes[0].endswith("peak memory from that process's eager first call, before its compile, plus the output kept from that call (held at every later read)")
    again = Record.from_dict(json.loads(json.dumps(derived.to_dict())))
    assert again.eager.memory_source == "first_call" and again.eager.peak_memory_bytes == (14_990 << 20) + 257_024
    assert p.take(eager_case, {twin_case.case_id: twin_record(twin_case)}) is None  # no first-call read
    assert "has no eager first-call peak" in p.fell_back[eager_case.case_id]
    # a worker from before the kept output was counted: its read is one output low, not used
    no_held = _with_first_call(twin_record(twin_case), 14_990 << 20, 600 << 20, held=None)
    assert p.take(eager_case, {twin_case.case_id: no_held}) is None
    built_first = twin_record(twin_case)
    built_first.metrics["eager_first_call_memory"] = {"peak_bytes": 1, "delta_bytes": 1, "compiled_state_deferred": False}
    assert p.take(eager_case, {twin_case.case_id: built_first}) is None


def test_a_deferred_compiled_state_needs_an_allocator_and_train_keeps_its_eager_case():
    cases = [case("decode", "eager"), case("decode", "inductor"), case("train", "eager"), case("train", "inductor")]
    assert plan(cases, kind="process_rss", deferred=frozenset({"decode"}), env={twins.TEST_ON_CPU_ENV: "1"}).sources == {}
    gpu = plan(cases, deferred=frozenset({"decode"}))
    assert set(gpu.sources) == {cases[0].case_id}


def test_the_real_registry_defers_decode_unless_switched_off_and_never_train(monkeypatch):
    from harness.model.scenarios import COMPILED_STATE_AFTER_FIRST_CALL_ENV, compiled_state_after_first_call

    runner.load_registries([])
    off = {COMPILED_STATE_AFTER_FIRST_CALL_ENV: "0"}
    assert compiled_state_after_first_call("decode", {}) and not compiled_state_after_first_call("decode", off)
    assert compiled_state_after_first_call("decode", {COMPILED_STATE_AFTER_FIRST_CALL_ENV: "1"})
    assert not compiled_state_after_first_call("train", {}) and not compiled_state_after_first_call("forward", {})
    assert not compiled_state_after_first_call("my-user-scenario", {})
    decode = [case("decode", "eager"), case("decode", "inductor")]
    monkeypatch.setenv(COMPILED_STATE_AFTER_FIRST_CALL_ENV, "0")
    assert twins.plan_twins(decode, memory_kind=lambda d: "device_allocator", env={}).sources == {}
    monkeypatch.delenv(COMPILED_STATE_AFTER_FIRST_CALL_ENV, raising=False)
    real = twins.plan_twins(decode, memory_kind=lambda d: "device_allocator", env={})
    assert real.first_call_peak == {decode[0].case_id}


@pytest.mark.parametrize("status", ["fail_compile", "crashed", "timeout", "skipped", "fail_accuracy"])
def test_a_twin_that_failed_leaves_the_eager_case_to_run(status):
    eager_case, twin_case = case("forward", "eager"), case("forward", "inductor")
    p = plan([eager_case, twin_case])
    twin = twin_record(twin_case, status=status)
    assert p.take(eager_case, {twin_case.case_id: twin}) is None
    assert p.fallback_note(eager_case) == f"eager case run in its own process: twin {twin_case.case_id} ended {status}"


def test_a_twin_without_a_usable_eager_block_or_record_leaves_the_eager_case_to_run():
    eager_case, twin_case = case("forward", "eager"), case("forward", "inductor")
    p = plan([eager_case, twin_case])
    assert p.take(eager_case, {}) is None
    assert "has no record" in p.fell_back[eager_case.case_id]
    no_peak = twin_record(twin_case, eager={**eager_block(0.002, 0), "peak_memory_bytes": None})
    assert p.take(eager_case, {twin_case.case_id: no_peak}) is None
    assert "no eager peak memory" in p.fell_back[eager_case.case_id]
    no_samples = twin_record(twin_case, eager={**eager_block(0.002, 1), "samples_s": []})
    assert p.take(eager_case, {twin_case.case_id: no_samples}) is None
    assert "no eager block" in p.fell_back[eager_case.case_id]
    assert p.take(case("train", "eager"), {}) is None  # not planned: no fallback note
    assert p.fallback_note(case("train", "eager")) is None


# ---- the runner's loop (fake worker, CPU cases with the test hook) ----

class FakeWorker:
    def __init__(self, fail: set[str] = frozenset(), interrupt_at: int | None = None):
        self.calls: list[str] = []
        self.fail = set(fail)
        self.interrupt_at = interrupt_at

    def __call__(self, c: Case, spec: WorkerSpec, timeout_s: float, **kwargs) -> Record:
        if self.interrupt_at is not None and len(self.calls) + 1 == self.interrupt_at:
            raise KeyboardInterrupt
        self.calls.append(c.case_id)
        if c.case_id in self.fail:
            return Record.failure(c, "fail_compile", "X", "boom", phase="compile")
        return twin_record(c) if c.compiler != "eager" else Record(c, "ok", eager=eager_block(0.003, 1), metrics={})


def _opts(out: Path, **kw) -> runner.RunOptions:
    return runner.RunOptions(workloads=["mlp-classic"], compilers=["eager", "inductor"], devices=["cpu"],
                             scenarios=["forward", "train"], sizes=["tiny"], out_dir=str(out), ingest=False, **kw)


@pytest.fixture
def hooked(monkeypatch):
    monkeypatch.setenv(twins.TEST_ON_CPU_ENV, "1")


def _id(scenario: str, compiler: str) -> str:
    return f"mlp-classic/{scenario}/{compiler}/cpu/float32/bs16/tiny"


def test_runner_derives_without_a_worker_and_keeps_plan_order(tmp_path, monkeypatch, hooked):
    worker = FakeWorker()
    monkeypatch.setattr(runner, "run_worker", worker)
    run = runner.execute(_opts(tmp_path), environment=FAKE_ENV)
    assert worker.calls == [_id("forward", "inductor"), _id("train", "eager"), _id("train", "inductor")]
    assert [r.case_id for r in run.records] == [_id(s, c) for s in ("forward", "train") for c in ("eager", "inductor")]
    derived = run.record_map()[_id("forward", "eager")]
    assert derived.metrics["eager_source"]["from_case"] == _id("forward", "inductor")
    assert run.config["eager_from_twin"]["derived"] == 1
    saved = load_run(run.config["path"])
    assert saved.record_map()[_id("forward", "eager")].eager.to_dict() == \
        saved.record_map()[_id("forward", "inductor")].eager.to_dict()


def test_runner_runs_the_eager_case_when_its_twin_failed(tmp_path, monkeypatch, hooked):
    worker = FakeWorker(fail={_id("forward", "inductor")})
    monkeypatch.setattr(runner, "run_worker", worker)
    run = runner.execute(_opts(tmp_path), environment=FAKE_ENV)
    assert _id("forward", "eager") in worker.calls
    eager = run.record_map()[_id("forward", "eager")]
    assert eager.eager.median == 0.003 and not twins.is_derived(eager)
    assert f"eager case run in its own process: twin {_id('forward', 'inductor')} ended fail_compile" in eager.notes
    assert run.config["eager_from_twin"]["ran_own_process"] == {
        _id("forward", "eager"): f"twin {_id('forward', 'inductor')} ended fail_compile"}


def test_runner_switch_off_and_cpu_without_the_hook_run_every_case(tmp_path, monkeypatch):
    worker = FakeWorker()
    monkeypatch.setattr(runner, "run_worker", worker)
    run = runner.execute(_opts(tmp_path / "cpu"), environment=FAKE_ENV)
    assert len(worker.calls) == 4 and run.config["eager_from_twin"]["pairs"] == {}
    monkeypatch.setenv(twins.TEST_ON_CPU_ENV, "1")
    worker.calls.clear()
    run = runner.execute(_opts(tmp_path / "off", eager_from_twin=False), environment=FAKE_ENV)
    assert len(worker.calls) == 4 and run.config["eager_from_twin"]["off"] == "--no-eager-from-twin"


def test_resume_derives_from_the_journaled_twin(tmp_path, monkeypatch, hooked):
    out = tmp_path / "out"
    monkeypatch.setattr(runner, "run_worker", FakeWorker(interrupt_at=2))  # the twin done, Ctrl-C on the next worker
    with pytest.raises(KeyboardInterrupt):
        runner.execute(_opts(out), environment=FAKE_ENV)
    partial = next((out / "runs").glob("*.json"))
    run_id = partial.stem
    journaled = [r.case_id for r in load_run(partial).records]
    assert journaled == [_id("forward", "eager"), _id("forward", "inductor")]  # derived right after its twin
    assert journal_path(out, run_id).exists()
    rest = FakeWorker()
    monkeypatch.setattr(runner, "run_worker", rest)
    resumed = runner.resume(run_id, out, environment=FAKE_ENV)
    assert rest.calls == [_id("train", "eager"), _id("train", "inductor")]
    assert twins.is_derived(resumed.record_map()[_id("forward", "eager")])
    assert resumed.config["eager_from_twin"]["derived"] == 1


def test_resume_of_a_twin_journaled_but_not_its_eager_case(tmp_path, monkeypatch, hooked):
    """A journal whose twin record is in but whose derived eager case is not (killed in between)."""
    out = tmp_path / "out"
    monkeypatch.setattr(runner, "run_worker", FakeWorker())
    appended: list[str] = []
    original = Journal.append

    def append_then_stop(self, record):
        original(self, record)
        appended.append(record.case_id)
        if record.case_id == _id("forward", "inductor"):
            raise KeyboardInterrupt

    monkeypatch.setattr(Journal, "append", append_then_stop)
    with pytest.raises(KeyboardInterrupt):
        runner.execute(_opts(out), environment=FAKE_ENV)
    monkeypatch.setattr(Journal, "append", original)
    run_id = next((out / "runs").glob("*.json")).stem
    rest = FakeWorker()
    monkeypatch.setattr(runner, "run_worker", rest)
    resumed = runner.resume(run_id, out, environment=FAKE_ENV)
    assert _id("forward", "eager") not in rest.calls
    assert twins.is_derived(resumed.record_map()[_id("forward", "eager")])


def test_a_journal_from_before_twins_resumes_without_deriving(tmp_path, monkeypatch, hooked):
    out = tmp_path / "out"
    monkeypatch.setattr(runner, "run_worker", FakeWorker(interrupt_at=1))
    with pytest.raises(KeyboardInterrupt):
        runner.execute(_opts(out), environment=FAKE_ENV)
    run_id = next((out / "runs").glob("*.json")).stem
    path = journal_path(out, run_id)
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    del header["options"]["eager_from_twin"]
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    rest = FakeWorker()
    monkeypatch.setattr(runner, "run_worker", rest)
    resumed = runner.resume(run_id, out, environment=FAKE_ENV)
    assert len(rest.calls) == 4 and resumed.config["eager_from_twin"]["off"] == "--no-eager-from-twin"


# ---- --gpus: the pool holds a derived eager case until its twin is back ----

def _pool(cases, worker, p, known=None):
    from harness.run.multigpu import GpuPool

    pool = GpuPool(cases, lambda c, env: worker(c, None, 0.0), [0, 1], held=p.sources, derive=p.take, known=known)
    return {c.case_id: pool.result(c) for c in pool.as_completed(cases)}


def test_pool_derives_a_held_eager_case_from_its_twin(monkeypatch):
    monkeypatch.setenv("COMPILEBENCH_TEST_FAKE_GPUS", "2")
    cases = [case(s, c, device="cpu") for s in ("forward", "train") for c in ("eager", "inductor")]
    p = plan(cases)
    assert len(p.sources) == 1
    worker = FakeWorker()
    records = _pool(cases, worker, p)
    forward_eager, forward_inductor = cases[0].case_id, cases[1].case_id
    assert forward_eager not in worker.calls and len(worker.calls) == 3
    assert records[forward_eager].metrics["eager_source"]["from_case"] == forward_inductor
    assert "gpu_pool" not in records[forward_eager].worker and "gpu_pool" in records[forward_inductor].worker


def test_pool_runs_the_held_eager_case_when_its_twin_failed(monkeypatch):
    monkeypatch.setenv("COMPILEBENCH_TEST_FAKE_GPUS", "2")
    cases = [case("forward", "eager", device="cpu"), case("forward", "inductor", device="cpu")]
    p = plan(cases)
    worker = FakeWorker(fail={cases[1].case_id})
    records = _pool(cases, worker, p)
    assert worker.calls == [cases[1].case_id, cases[0].case_id]
    assert records[cases[0].case_id].eager.median == 0.003 and "gpu_pool" in records[cases[0].case_id].worker
    assert p.fallback_note(cases[0]).endswith("ended fail_compile")


def test_pool_settles_a_held_case_whose_twin_was_journaled(monkeypatch):
    monkeypatch.setenv("COMPILEBENCH_TEST_FAKE_GPUS", "2")
    eager, twin = case("forward", "eager", device="cpu"), case("forward", "inductor", device="cpu")
    p = plan([eager, twin])
    worker = FakeWorker()
    records = _pool([eager], worker, p, known={twin.case_id: twin_record(twin)})
    assert worker.calls == [] and twins.is_derived(records[eager.case_id])


def test_runner_with_gpus_derives_on_fake_gpus(tmp_path, monkeypatch, hooked):
    monkeypatch.setenv("COMPILEBENCH_TEST_FAKE_GPUS", "2")
    worker = FakeWorker()
    monkeypatch.setattr(runner, "run_worker", worker)
    run = runner.execute(_opts(tmp_path, gpus=[0, 1]), environment=FAKE_ENV)
    assert sorted(worker.calls) == sorted([_id("forward", "inductor"), _id("train", "eager"), _id("train", "inductor")])
    assert [r.case_id for r in run.records] == [_id(s, c) for s in ("forward", "train") for c in ("eager", "inductor")]
    assert twins.is_derived(run.record_map()[_id("forward", "eager")])
    assert run.config["eager_from_twin"]["derived"] == 1 and run.config["multi_gpu"]["cases"] == 3


def test_cli_flag_in_help_and_refused_with_resume():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    helped = subprocess.run([sys.executable, "-m", "harness", "run", "--help"], capture_output=True, text=True, cwd=ROOT,
                            env=env)
    assert "--no-eager-from-twin" in helped.stdout
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--resume", "x", "--no-eager-from-twin"],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and "--no-eager-from-twin" in proc.stderr


# ---- the real path on CPU ----

def test_real_cpu_run_derives_the_eager_case_and_compare_and_report_load_it(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", twins.TEST_ON_CPU_ENV: "1"}
    out = tmp_path / "out"
    # one process (the eager case is derived): spawned: for one case that costs less than starting a preloaded server (test_forkserver holds the two paths equal)
    cmd = [sys.executable, "-m", "harness", "run", "-w", "mlp-classic", "--size", "tiny", "-c", "eager,inductor",
           "--scenario", "forward", "--min-time", "0", "--min-samples", "5", "--out", str(out), "--no-preload"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"derived: eager figures from {_id('forward', 'inductor')}" in proc.stderr
    path = next((out / "runs").glob("*.json"))
    run = load_run(path)
    records = run.record_map()
    derived, twin = records[_id("forward", "eager")], records[_id("forward", "inductor")]
    assert twin.status == "ok" and derived.status == "ok" and twins.is_derived(derived)
    assert derived.eager.to_dict() == twin.eager.to_dict()
    assert derived.eager.samples_s and derived.eager.peak_memory_bytes > 0
    assert derived.metrics["latency_s"] == twin.eager.median
    assert derived.metrics["throughput"] == pytest.approx(twin.metrics["eager_throughput"])
    assert derived.metrics["machine_probe"] == twin.metrics["machine_probe"]
    assert derived.worker["wall_s"] < 1.0 and "pid" not in derived.worker
    for args in (["compare", str(path), str(path)], ["report", str(path), "-o", str(tmp_path / "r.html")],
                 ["show", str(path)]):
        result = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT,
                                env=env, timeout=120)
        assert result.returncode == 0, (args, result.stdout[-2000:], result.stderr[-2000:])
    assert _id("forward", "eager") in (tmp_path / "r.html").read_text()


def test_the_h200_evidence_supports_the_rule():
    """The committed H200 run (one process per case): the eager cases the rule derives have an
    eager peak within 1 MiB of their twins', the ones it keeps are 10 MiB or more apart."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import eager_twins

    runner.load_registries([])
    run = load_run(ROOT / "results/baselines/h200-2026-12-01/gpu-suite-newway-20of21.json")
    table = {row["case"]: row for row in eager_twins.rows(run.records)}
    assert {k for k, r in table.items() if r["rule"] == "derive"} == {
        "mlp-deep/forward", "llama-3.1-8b/prefill", "gemma-2b/prefill", "sdxl-unet/unet_step"}

    for name, row in table.items():
        diffs = [float(d) for d in row["peak_diff_mib"].split(" / ")]
        assert (max(diffs) < 1.0) if row["rule"] == "derive" else (min(diffs) > 10.0), (name, diffs)


def test_a_config_that_compiles_the_eager_module_itself_or_freezes_is_never_the_twin():
    """Regional and in-place configs compile the very module their eager variant calls, which
    then runs under force_eager through the compiled wrappers: not a plain eager figure (8
    compiled Linear blocks under force_eager took 2.1x the plain module's time on CPU)."""
    regional = [case("forward", "eager"), case("forward", "inductor-regional"), case("forward", "inductor-inplace"),
                case("forward", "inductor-max-autotune-freezing")]  # freezing: the frozen graph's own weights
    assert plan(regional).sources == {}
    with_ro = [*regional, case("forward", "inductor-reduce-overhead")]
    assert plan(with_ro).sources == {with_ro[0].case_id: with_ro[4].case_id}


def test_shards_keep_a_derived_eager_case_with_its_twin(tmp_path, monkeypatch, hooked):
    """Sorted ids dealt round-robin (or LPT, where a derived case costs microseconds) put an
    eager case and its twin in different shards nearly always; the shard plan keeps them
    together, so a sharded run derives as a whole one does, and the shards still cover the
    plan once."""
    calls: list[str] = []
    derived: list[str] = []
    for index in (1, 2):
        worker = FakeWorker()
        monkeypatch.setattr(runner, "run_worker", worker)
        run = runner.execute(_opts(tmp_path / str(index), shard=f"{index}/2", shard_costs="none"), environment=FAKE_ENV)
        calls += worker.calls
        derived += [r.case_id for r in run.records if twins.is_derived(r)]
        ids = {r.case_id for r in run.records}
        assert (_id("forward", "eager") in ids) == (_id("forward", "inductor") in ids)
    assert derived == [_id("forward", "eager")]
    assert sorted(calls) == sorted([_id("forward", "inductor"), _id("train", "eager"), _id("train", "inductor")])


def test_the_evidence_script_applies_the_runners_rule(monkeypatch):
    """benchmarks/eager_twins.py says `derive` exactly where plan_twins does: not beside a
    regional-only twin, not for a stateful scenario unless its compiled state is deferred
    (decode with the switch on), and then from the first call."""
    from harness.model.scenarios import COMPILED_STATE_AFTER_FIRST_CALL_ENV

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import eager_twins

    monkeypatch.setenv(COMPILED_STATE_AFTER_FIRST_CALL_ENV, "0")

    runner.load_registries([])
    records = [twin_record(c) for c in (case("forward", "eager"), case("forward", "inductor-regional"),
                                        case("prefill", "eager"), case("prefill", "inductor"),
                                        case("decode", "eager"), case("decode", "inductor"))]
    rules = {row["case"]: row["rule"] for row in eager_twins.rows(records)}
    assert rules == {"w/forward": "keep: no twin (none, or only regional / in-place / freezing)", "w/prefill": "derive",
                     "w/decode": "keep: stateful"}
    monkeypatch.delenv(COMPILED_STATE_AFTER_FIRST_CALL_ENV)  # the default: deferred
    assert {row["case"]: row["rule"] for row in eager_twins.rows(records)}["w/decode"] == "derive: first-call peak"
    train = [twin_record(c) for c in (case("train", "eager"), case("train", "inductor"))]
    assert [row["rule"] for row in eager_twins.rows(train)] == ["keep: stateful"]


def test_a_twin_whose_eager_median_is_zero_leaves_the_eager_case_to_run():
    # a zero median (a clock too coarse for the call) has no latency or throughput to give:
    # it must fall back like any unusable twin, not stop the run with an AssertionError
    eager_case, twin_case = case("forward", "eager"), case("forward", "inductor")
    p = plan([eager_case, twin_case])
    zero = twin_record(twin_case, eager=eager_block(0.0, 15_000 << 20))
    assert p.take(eager_case, {twin_case.case_id: zero}) is None
    assert "no eager block" in p.fell_back[eager_case.case_id]


def test_pool_runs_a_held_case_whose_derivation_raised(monkeypatch):
    # a slot must never die of a derivation: the held case then runs like one whose twin failed
    from harness.run.multigpu import GpuPool

    monkeypatch.setenv("COMPILEBENCH_TEST_FAKE_GPUS", "2")
    cases = [case("forward", "eager", device="cpu"), case("forward", "inductor", device="cpu")]
    p = plan(cases)
    worker = FakeWorker()

    def broken(c, finished):
        raise ValueError("bad twin metrics")

    pool = GpuPool(cases, lambda c, env: worker(c, None, 0.0), [0, 1], held=p.sources, derive=broken)
    records = {c.case_id: pool.result(c) for c in pool.as_completed(cases)}
    assert worker.calls == [cases[1].case_id, cases[0].case_id]
    assert records[cases[0].case_id].eager.median == 0.003
    assert records[cases[0].case_id].worker["gpu_pool"]["expected_from"].startswith("derivation failed: ValueError")


def test_a_twin_record_the_derivation_cannot_read_leaves_the_eager_case_to_run():
    eager_case, twin_case = case("forward", "eager"), case("forward", "inductor")
    p = plan([eager_case, twin_case])
    odd = twin_record(twin_case)
    odd.metrics["units_per_call"] = "many"  # e.g. a user scenario's odd figure
    assert p.take(eager_case, {twin_case.case_id: odd}) is None
    assert "could not be derived from (ValueError" in p.fallback_note(eager_case)


def test_shards_with_gpus_derive_in_the_pool_of_the_twins_shard(tmp_path, monkeypatch, hooked):
    monkeypatch.setenv("COMPILEBENCH_TEST_FAKE_GPUS", "2")
    calls: list[str] = []
    derived: list[str] = []
    for index in (1, 2):
        worker = FakeWorker()
        monkeypatch.setattr(runner, "run_worker", worker)
        run = runner.execute(_opts(tmp_path / str(index), shard=f"{index}/2", shard_costs="none", gpus=[0, 1]),
                             environment=FAKE_ENV)
        calls += worker.calls
        derived += [r.case_id for r in run.records if twins.is_derived(r)]
    assert derived == [_id("forward", "eager")] and len(calls) == 3 and _id("forward", "eager") not in calls
