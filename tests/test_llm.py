"""The LLM suite: shipped configs, options, the decode loop, accuracy rules, and the real
runner on tiny models (CPU, inductor)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import suites.llm as llm
from harness.model.workloads import WorkloadContext

# torch-version-sensitive: `pytest -m compat` / `tox -e compat` run these on the installed torch
pytestmark = pytest.mark.compat

# published parameter counts of the shipped full-size architectures
FULL_PARAMS = {
    "llama-3.1-8b": 8_030_261_248,
    "gemma-2b": 2_506_172_416,
    "qwen2.5-0.5b": 494_032_768,
    "gpt2": 124_439_808,
    "mistral-7b": 7_248_023_552,
}


def family(name: str) -> llm.Family:
    return next(f for f in llm.FAMILIES if f.name == name)


@pytest.mark.parametrize("name", sorted(FULL_PARAMS))
def test_full_size_configs_build_the_published_architecture(name):
    config = llm.build_config(llm.load_config_dict(llm.config_path(family(name), "full")))
    model = llm.build_model(config, "meta", torch.bfloat16)  # no memory, no init
    assert llm.count_parameters(model) == FULL_PARAMS[name]


@pytest.mark.parametrize("name", sorted(FULL_PARAMS))
def test_tiny_configs_keep_the_architecture_and_are_tiny(name):
    full = llm.load_config_dict(llm.config_path(family(name), "full"))
    tiny = llm.load_config_dict(llm.config_path(family(name), "tiny"))
    assert tiny["model_type"] == full["model_type"] and tiny["architectures"] == full["architectures"]
    assert tiny.get("tie_word_embeddings") == full.get("tie_word_embeddings")
    model = llm.build_model(llm.build_config(tiny), "meta", torch.float32)
    assert llm.count_parameters(model) < 500_000


def test_dropout_is_switched_off_so_train_steps_compare():
    config = llm.build_config(llm.load_config_dict(llm.config_path(family("gpt2"), "tiny")))
    assert config.attn_pdrop == config.resid_pdrop == config.embd_pdrop == 0.0


def ctx(size="tiny", **options):
    return WorkloadContext(device="cpu", dtype=torch.float32, batch_size=1, size=size, options=options)


def test_options_default_by_size_and_validate():
    assert llm.llm_options(ctx("full")) == {"prompt_len": 512, "new_tokens": 64}
    assert llm.llm_options(ctx(prompt_len="8"))["prompt_len"] == 8
    with pytest.raises(llm.LLMOptionError, match="unknown LLM option"):
        llm.llm_options(ctx(promptlen=8))
    with pytest.raises(llm.LLMOptionError, match="not an integer"):
        llm.llm_options(ctx(new_tokens="many"))
    with pytest.raises(llm.LLMOptionError, match="at least 1"):
        llm.llm_options(ctx(new_tokens=0))


def test_prompt_longer_than_the_model_is_a_clear_error():
    factory = llm.make_factory(family("gpt2"))
    with pytest.raises(llm.LLMOptionError, match="exceeds the model's 1024 positions"):
        factory(ctx(prompt_len=1000, new_tokens=100))


def test_weights_option_needs_a_local_model_dir(tmp_path):
    with pytest.raises(llm.LLMOptionError, match="no config.json"):
        llm.build_model(None, "cpu", torch.float32, weights=str(tmp_path))


def test_weights_option_loads_a_local_directory(tmp_path):
    torch.manual_seed(0)
    built = llm.make_factory(family("qwen2.5-0.5b"))(ctx())
    built.model.save_pretrained(tmp_path)
    loaded = llm.build_model(None, "cpu", torch.float32, weights=str(tmp_path))
    for a, b in zip(built.model.parameters(), loaded.parameters(), strict=True):
        assert torch.equal(a, b)


def test_bandwidth_table_matches_gpu_names():
    assert llm.bandwidth_for_name("NVIDIA H200") == 4.8e12
    assert llm.bandwidth_for_name("NVIDIA H100 80GB HBM3") == 3.35e12
    assert llm.bandwidth_for_name("NVIDIA H100 PCIe") == 2.0e12
    # torch sees one GCD of an MI250X: half the package's 3.2 TB/s (device_specs' figure)
    assert llm.bandwidth_for_name("AMD Instinct MI250X") == pytest.approx(1.6384e12)
    assert llm.bandwidth_for_name("Some Future GPU") is None
    assert llm.peak_bandwidth("cpu") == (None, "unknown for this device")


@pytest.mark.parametrize("name", ["NVIDIA H200", "NVIDIA A100-SXM4-80GB", "AMD Instinct MI250X", "NVIDIA L4"])
def test_decode_roofline_reads_the_one_device_specs_table(monkeypatch, name):
    """The decode roofline's peak is the device's peak_specs() figure (harness.measure.device_specs),
    not a second table in the suite: every part agrees with the record's device specs."""
    from harness.measure import devices
    from harness.measure.device_specs import match_peak_spec

    class FakeGpu(devices.Device):
        type = "cuda"

        def name(self) -> str:
            return name

    monkeypatch.setattr(devices, "parse_device", lambda spec: FakeGpu())
    bandwidth, source = llm.peak_bandwidth("cuda:0")
    assert bandwidth == FakeGpu().peak_specs()["memory_bandwidth_bytes_s"]
    assert bandwidth == match_peak_spec(name).memory_bandwidth_gb_s * 1e9 and "device_specs" in source

    class UnknownGpu(FakeGpu):
        def name(self) -> str:
            return "Some Future GPU"

    monkeypatch.setattr(devices, "parse_device", lambda spec: UnknownGpu())
    assert llm.peak_bandwidth("cuda:0") == (None, "unknown device 'Some Future GPU' (not in harness/measure/device_specs.py)")


def test_weight_bytes_skip_an_untied_input_embedding_only():
    for name, tied in (("llama-3.1-8b", False), ("gpt2", True)):
        model = llm.make_factory(family(name))(ctx()).model
        total = sum(p.numel() * p.element_size() for p in model.parameters())
        emb = model.get_input_embeddings().weight
        expected = total if tied else total - emb.numel() * emb.element_size()
        assert llm.weight_bytes_per_token(model) == expected


def test_compare_tokens_fails_fp32_mismatch_but_not_bf16():
    logits = torch.randn(1, 8)
    ref = {"tokens": torch.tensor([[1, 2, 3]]), "logits": logits}
    res = {"tokens": torch.tensor([[1, 2, 4]]), "logits": logits.clone()}
    fp32 = llm.compare_tokens_and_logits(ref, res, "float32")
    assert fp32["status"] == "fail" and "greedy tokens differ" in fp32["reason"] and not fp32["tokens_match"]
    assert "(0, 2)" in fp32["tokens_diverge_at"]
    bf16 = llm.compare_tokens_and_logits(ref, res, "bfloat16")
    assert bf16["status"] == "pass" and bf16["tokens_match"] is False
    same = llm.compare_tokens_and_logits(ref, {"tokens": ref["tokens"].clone(), "logits": logits}, "float32")
    assert same["status"] == "pass" and same["tokens_match"] and same["tokens_compared"] == 3


def test_lazy_metrics_compute_once_when_read_and_keep_errors_as_data():
    calls = []

    def compute():
        calls.append(1)
        return {"tpot_s_median": 0.5}

    metrics = llm.LazyMetrics({"param_count": 7}, compute)
    assert calls == []
    merged = {}
    merged.update(metrics)  # what the worker does
    assert merged == {"param_count": 7, "tpot_s_median": 0.5} and len(calls) == 1
    assert dict(metrics) == merged and len(calls) == 1
    broken = llm.LazyMetrics({"a": 1}, lambda: 1 / 0)
    assert dict(broken) == {"a": 1, "token_metrics_error": "ZeroDivisionError: division by zero"}


def test_token_clock_skips_warmup_calls_and_keeps_recent_ones():
    clock = llm.TokenClock("cpu", skip_calls=2, keep_calls=3)
    for n_marks in (5, 5, 3, 3, 4, 2):
        clock.start_call()
        for _ in range(n_marks):
            clock.mark()
    runs = clock.intervals()
    assert [len(r) for r in runs] == [2, 3, 1]  # calls 4..6 kept, calls 1-2 skipped
    assert all(s >= 0 for r in runs for s in r)


def tiny_decode_setup(name="llama-3.1-8b", new_tokens=6):
    torch.manual_seed(0)
    built = llm.make_factory(family(name))(ctx(prompt_len=8, new_tokens=new_tokens))
    model, prompt = built.model, built.extras["prompt"]
    cache, first, step = llm.static_decode_step(model, prompt, 8 + new_tokens)  # the decode scenario's own setup
    return model, prompt, cache, first, step


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gpt2"])
def test_decode_loop_reproduces_generate_greedy_tokens_every_call(name):
    model, prompt, cache, first, step = tiny_decode_setup(name)
    loop = llm.DecodeLoop(step, cache, first, 8, 6, llm.TokenClock("cpu", skip_calls=0))
    out1, out2 = loop(), loop()
    assert torch.equal(out1["tokens"], out2["tokens"])  # the rewind makes calls identical
    # generate's first new token comes from the prefill; the loop decodes the 6 after it
    expected = model.generate(prompt, max_new_tokens=7, min_new_tokens=7, do_sample=False, pad_token_id=0,
                              eos_token_id=None)[:, 8:]
    assert torch.equal(first, expected[:, :1]) and torch.equal(out1["tokens"], expected[:, 1:])
    assert [len(r) for r in loop.clock.intervals()] == [6, 6]


@pytest.fixture
def recompile_rule_restored():
    """The compiled decode loop's first call turns torch._dynamo.config.error_on_recompile on
    for the process (the decode scenario's rule from then on): put back after the test, or
    later compiles in the test process fail with RecompileError."""
    with torch._dynamo.config.patch(error_on_recompile=torch._dynamo.config.error_on_recompile):
        yield


def counted_decode_setup(monkeypatch, defer: bool):
    """A tiny Llama and its decode context, deferred (the default) or COMPILEBENCH_DEFER_COMPILED_STATE=0, and
    the list static_decode_step appends to each time a static cache is made."""
    from harness.model.scenarios import COMPILED_STATE_AFTER_FIRST_CALL_ENV

    if defer:
        monkeypatch.delenv(COMPILED_STATE_AFTER_FIRST_CALL_ENV, raising=False)  # the default
    else:
        monkeypatch.setenv(COMPILED_STATE_AFTER_FIRST_CALL_ENV, "0")
    made: list[int] = []
    real = llm.static_decode_step
    monkeypatch.setattr(llm, "static_decode_step", lambda *a: made.append(1) or real(*a))
    torch.manual_seed(0)
    c = ctx(prompt_len=8, new_tokens=4)
    return llm.make_factory(family("llama-3.1-8b"))(c), c, made


def fake_compiler():
    from compiler import get_compiler

    return replace(get_compiler("inductor"), name="fake", backend="eager")


def test_switched_off_decode_builds_both_caches_at_prepare(monkeypatch, recompile_rule_restored):
    """COMPILEBENCH_DEFER_COMPILED_STATE=0, the path before 2026-12-03: both static caches at
    prepare (an eager case drops the second), nothing deferred."""
    from compiler import get_compiler

    built, c, made = counted_decode_setup(monkeypatch, defer=False)
    eager_only = llm.decode(built, None, get_compiler("eager"), c)
    assert made == [1, 1] and eager_only.compiled is None and eager_only.build_compiled_state is None
    compiled = llm.decode(built, None, fake_compiler(), c)
    assert len(made) == 4 and isinstance(compiled.compiled, llm.DecodeLoop) and compiled.build_compiled_state is None
    assert torch.equal(compiled.compiled()["tokens"], compiled.eager()["tokens"])


def test_deferred_decode_builds_the_compiled_variants_cache_only_after_the_eager_first_call(monkeypatch,
                                                                                         recompile_rule_restored):
    """By default the compiled variant's static cache is made by
    Prepared.build_compiled_state (the worker calls it after the eager first call's memory
    read) or at its own first call, never at prepare, so a compiled case's process holds the
    eager case's bytes until then (harness/run/twins.py derives decode's eager case from that
    read)."""
    from compiler import get_compiler

    built, c, made = counted_decode_setup(monkeypatch, defer=True)
    eager_only = llm.decode(built, None, get_compiler("eager"), c)
    assert made == [1] and eager_only.compiled is None and eager_only.build_compiled_state is None
    compiled = llm.decode(built, None, fake_compiler(), c)
    assert len(made) == 2 and compiled.compiled.loop is None  # prepare made the eager variant's cache only
    eager_tokens = compiled.eager()["tokens"]
    compiled.build_compiled_state()
    assert len(made) == 3 and compiled.compiled.loop is not None
    compiled.build_compiled_state()  # once
    assert len(made) == 3
    assert torch.equal(compiled.compiled()["tokens"], eager_tokens) and torch.equal(eager_only.eager()["tokens"], eager_tokens)
    lazy = llm.decode(built, None, fake_compiler(), c)
    assert torch.equal(lazy.compiled()["tokens"], eager_tokens) and len(made) == 5  # built at its first call


def live_tensor_bytes() -> int:
    """Bytes of every distinct storage a live tensor holds (the allocator's view of a process,
    from the garbage collector's list of objects)."""
    import gc

    gc.collect()
    seen: dict[int, int] = {}
    for obj in gc.get_objects():
        # plain strided tensors and parameters only: fake, functional and opaque (mkldnn) tensors
        # that other tests left alive have no storage to count
        if type(obj) not in (torch.Tensor, torch.nn.Parameter) or obj.is_meta or obj.layout != torch.strided:
            continue
        try:
            storage = obj.untyped_storage()
        except (NotImplementedError, RuntimeError):
            continue
        seen[storage.data_ptr()] = max(seen.get(storage.data_ptr(), 0), storage.nbytes())
    return sum(seen.values())


@pytest.mark.parametrize("defer", [False, True])
def test_a_compiled_decode_case_holds_the_eager_cases_bytes_at_the_first_call_only_when_deferred(
        monkeypatch, recompile_rule_restored, defer):
    """The premise of deriving decode's eager case from the twin's eager first call: at that
    call the compiled case's process holds what the eager case's holds. Switched off it holds
    one static cache more (what the H200 showed: +83.4 MiB for Llama-3.1-8B); deferred, the
    same bytes, and the cache comes with build_compiled_state."""
    from compiler import get_compiler

    built, c, _ = counted_decode_setup(monkeypatch, defer=defer)
    base = live_tensor_bytes()
    eager_case = llm.decode(built, None, get_compiler("eager"), c)
    eager_bytes = live_tensor_bytes() - base
    cache_bytes = llm.kv_cache_bytes(eager_case.eager.cache)
    del eager_case
    compiled_case = llm.decode(built, None, fake_compiler(), c)
    compiled_bytes = live_tensor_bytes() - base
    assert cache_bytes > 0
    if defer:
        assert compiled_bytes == eager_bytes
        compiled_case.build_compiled_state()
        assert live_tensor_bytes() - base >= eager_bytes + cache_bytes
    else:
        assert compiled_bytes >= eager_bytes + cache_bytes


def test_recompile_watch_fails_a_step_that_recompiles_every_token(monkeypatch):
    model, prompt, cache, first, step = tiny_decode_setup(new_tokens=5)
    frames = iter(range(100))
    monkeypatch.setattr(llm, "compiled_frames", lambda: next(frames))
    watch = llm.RecompileWatch()
    loop = llm.DecodeLoop(step, cache, first, 8, 5, llm.TokenClock("cpu"), on_step=watch,
                          after_first_call=watch.check)
    with pytest.raises(llm.PerStepRecompileError, match=r"recompiled at step\(s\) \[2, 3, 4\]"):
        loop()


def test_recompile_watch_tolerates_compile_then_one_warmup_recompile(monkeypatch):
    counts = iter([0, 1, 2, 2, 2, 2])  # base, then after steps 0..4
    monkeypatch.setattr(llm, "compiled_frames", lambda: next(counts))
    watch = llm.RecompileWatch()
    for i in range(5):
        watch(i)
    watch.check()  # no raise


def test_reduce_overhead_compiler_is_available_and_suites_plan():
    from compiler import get_compiler
    from harness.run.runner import RunOptions, plan_cases

    assert get_compiler(llm.REDUCE_OVERHEAD).mode == "reduce-overhead"
    cases, _ = plan_cases(RunOptions(suite="llm"))
    ids = {c.case_id for c in cases}
    assert "llama-3.1-8b/decode/inductor-reduce-overhead/cuda/bfloat16/bs1/full" in ids
    assert "gpt2/llm-train/inductor/cuda/bfloat16/bs1/full" in ids
    assert not any("llama" in c.workload and c.scenario == "llm-train" for c in cases)
    smoke, _ = plan_cases(RunOptions(suite="smoke", workloads=list(llm.SMOKE_WORKLOADS)))
    assert {(c.workload, c.scenario, c.device, c.size) for c in smoke} == {
        ("llama-3.1-8b", "prefill", "cpu", "tiny"), ("llama-3.1-8b", "decode", "cpu", "tiny"),
        ("llama-3.1-8b", "generate", "cpu", "tiny")}


# ---- the real runner on tiny models ----------------------------------------------------------

POLICY = {"min_time_s": 0.2, "min_samples": 5, "warmup": 2}  # tests/background.py LLM_POLICY_ARGS


@pytest.fixture(scope="module")
def llm_smoke_runs():
    """The `llm` part of the smoke suite plus GPT-2's train step, through the real runner (the
    CLI: one process per case, one OpenMP thread), in the background while the other tests run
    (tests/background.py); the records by (workload, scenario)."""
    from harness.model.schema import load_run
    from tests.background import BACKGROUND

    procs = BACKGROUND["llm_smoke_runs"].wait()
    for proc in procs:
        assert proc.returncode in (0, 1), proc.stdout[-4000:] + proc.stderr[-4000:]  # a failed case is data
    runs = sorted((BACKGROUND["llm_smoke_runs"].out / "results" / "runs").glob("*.json"))
    assert len(runs) == 2, [proc.stdout[-2000:] for proc in procs]
    records = [r for path in runs for r in load_run(path).records]
    for r in records:  # the CLI flags gave the test's policy
        assert {k: r.metrics["policy"][k] for k in POLICY} == POLICY, (r.case_id, r.metrics.get("policy"))
    return {(r.case.workload, r.case.scenario): r for r in records}


def test_every_llm_scenario_gives_an_ok_record_with_its_metrics(llm_smoke_runs):
    assert len(llm_smoke_runs) == 4
    for key, record in llm_smoke_runs.items():
        assert record.status == "ok", (key, record.error)
        m = record.metrics
        assert m["param_count"] > 0 and m["throughput_unit"] == "tokens/s"
        assert m["accuracy"]["status"] == "pass"
    assert llm_smoke_runs[("llama-3.1-8b", "prefill")].metrics["ttft_s_median"] > 0
    gen = llm_smoke_runs[("llama-3.1-8b", "generate")].metrics
    assert gen["ttft_s_median"] > 0 and gen["tpot_s_p90"] >= gen["tpot_s_median"] > 0 and gen["e2e_tokens_per_s"] > 0
    assert gen["eager_generate_compiled_frames"] == 0  # the eager baseline really is eager
    assert gen["compiled_frames"] >= 1  # ...and the compiled one compiled through compile_config
    train = llm_smoke_runs[("gpt2", "llm-train")].metrics
    assert train["train_samples_per_s"] > 0 and train["train_tokens_per_s"] == pytest.approx(
        train["train_samples_per_s"] * train["tokens_per_sample"])


def test_decode_has_no_recompiles_and_greedy_tokens_match_eager(llm_smoke_runs):
    record = llm_smoke_runs[("llama-3.1-8b", "decode")]
    m = record.metrics
    assert m["recompiles"] == 0 and m["recompiles_steady_state"] == 0 and m["graph_breaks"] == 0
    assert m["decode_first_call_compiled_frames_by_step"][-1] == m["decode_first_call_compiled_frames_by_step"][0]
    assert m["accuracy"]["tokens_match"] is True and m["accuracy"]["tokens_compared"] == 8
    assert m["tpot_s_p90"] >= m["tpot_s_median"] > 0 and m["eager_tpot_s_median"] > 0
    assert m["decode_tokens_per_s"] == pytest.approx(1 / m["tpot_s_median"])
    assert m["kv_cache_bytes_per_step"] > 0 and m["peak_bandwidth_bytes_s"] is None  # CPU: no roofline claimed


def test_the_output_a_decode_case_keeps_from_its_first_call_is_one_logits_row_and_the_tokens(
        monkeypatch, recompile_rule_restored):
    """What the worker adds to a deferred twin's first-call peak (harness/run/twins.py): the
    accuracy reference kept from the eager first call, a [batch, vocab] logits row and the
    [batch, new_tokens] token ids, in allocator blocks (on the H200 exactly the 257,024 B by
    which llama-3.1-8b decode's own-process peak exceeded that first call's)."""
    from harness.measure.worker import _accuracy_output, held_output_bytes

    built, c, _ = counted_decode_setup(monkeypatch, defer=True)
    prepared = llm.decode(built, None, fake_compiler(), c)
    kept = _accuracy_output(prepared, "eager", prepared.eager())
    vocab = built.model.config.vocab_size
    block = lambda n: -(-n // 512) * 512  # noqa: E731
    assert held_output_bytes(kept, "cpu") == block(vocab * 4) + block(4 * 8)  # float32 logits, 4 int64 tokens
