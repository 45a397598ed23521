"""The transformers and diffusers zoos: the mapping read from the installed transformers,
how tiny configs are made, skips with their reasons, and real tiny builds + forwards
in-process (no compile). The whole zoo through the runner is benchmarks/zoo_cpu.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import suites.diffusers_zoo as dz
import suites.transformers_zoo as tz
from harness.measure.worker import classify_exception
from harness.model.workloads import WORKLOADS, WorkloadContext

ROOT = Path(__file__).resolve().parent.parent


def entry(workload: str) -> tz.ZooEntry:
    return tz.ENTRIES_BY_WORKLOAD[workload]


def ctx(size: str = "tiny", batch: int = 2, **options) -> WorkloadContext:
    return WorkloadContext(device="cpu", dtype=torch.float32, batch_size=batch, size=size, options=options)


# ---- the mapping -------------------------------------------------------------------------------

def test_mapping_literals_equal_the_imported_mappings():
    """The zoo reads modeling_auto.py's literals to stay import-free; they must be the mappings."""
    literal = tz.read_mapping_literals(tz.modeling_auto_path().read_text())
    assert literal == tz.imported_mappings()


def test_every_entry_is_a_registered_workload_of_this_module():
    names = [e.workload for e in tz.zoo_entries()]
    assert len(names) == len(set(names)) and len(names) >= 150
    assert all(WORKLOADS[n].source == "suites.transformers_zoo" for n in names)
    heads = {e.head for e in tz.zoo_entries()}
    assert heads == {"causal", "masked", "seq2seq"}
    # a class two mappings name is one workload, under seq2seq first
    assert "zoo-bart-seq2seq" in names and "zoo-bart-masked" not in names


def test_importing_the_zoo_imports_no_transformers():
    code = "import sys, suites.transformers_zoo as z; assert z.ZOO_WORKLOADS; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert out.stdout.strip() == "False"


def test_at_least_150_entries_build_a_tiny_config():
    built, skipped, failed = [], {}, {}
    for e in tz.zoo_entries():
        try:
            tz.zoo_config(e, "tiny")
            built.append(e.workload)
        except tz.ZooSkip as exc:
            skipped[e.workload] = exc.reason
        except Exception as exc:  # a shrink a config's validator rejects: that case fails when run
            failed[e.workload] = type(exc).__name__
    assert len(built) >= 150, f"{len(built)} built; skipped {skipped}; failed {failed}"
    assert len(failed) < 0.1 * len(built), failed
    assert set(skipped.values()) <= set(tz.SKIP_REASONS)


# ---- tiny configs --------------------------------------------------------------------------------

def test_tiny_overrides_shrink_every_width_and_keep_one_layer_of_each_type():
    data = {"num_hidden_layers": 6, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 11008, "vocab_size": 128256, "max_position_embeddings": 131072,
            "layer_types": ["sliding", "sliding", "full", "sliding", "sliding", "full"],
            "mlp_only_layers": [2, 5], "bos_token_id": 128000, "eos_token_id": [128001, 128009], "pad_token_id": 0,
            "num_experts_per_tok": None, "num_experts": None, "rotary_dim": 64,
            "text_config": {"model_type": "x", "hidden_size": 2048, "num_hidden_layers": 4}}
    out = tz.tiny_overrides(data)
    assert out["layer_types"] == ["sliding", "full"] and out["num_hidden_layers"] == 2
    assert out["mlp_only_layers"] == [1]  # layer 2 is kept as the second layer; 5 is gone
    assert (out["hidden_size"], out["num_attention_heads"], out["num_key_value_heads"]) == (64, 4, 2)
    assert (out["intermediate_size"], out["vocab_size"], out["max_position_embeddings"]) == (128, 1024, 512)
    assert out["rotary_dim"] == 16
    # special ids move into the vocabulary, to distinct free ids; those inside it stay
    assert out["bos_token_id"] < 1024 and all(i < 1024 for i in out["eos_token_id"])
    assert len({out["bos_token_id"], *out["eos_token_id"], 0}) == 4 and "pad_token_id" not in out
    assert (out["num_experts_per_tok"], out["num_experts"]) == (2, 4)  # None defaults filled
    assert out["text_config"]["hidden_size"] == 64 and out["text_config"]["num_hidden_layers"] == 2


def test_mla_head_dim_keeps_its_relation_to_the_rope_part():
    deepseek = {"head_dim": 64, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128}
    summed = {"head_dim": 192, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128}
    assert tz.tiny_overrides(deepseek)["head_dim"] == tz.MLA_KEYS["qk_rope_head_dim"]
    assert tz.tiny_overrides(summed)["head_dim"] == tz.MLA_KEYS["qk_rope_head_dim"] + tz.MLA_KEYS["qk_nope_head_dim"]


def test_both_sizes_switch_dropout_and_the_cache_off():
    full = tz.zoo_config(entry("zoo-gpt2-causal"), "full")
    assert full.n_layer == 12 and full.n_embd == 768  # the class defaults
    assert (full.resid_pdrop, full.attn_pdrop, full.use_cache) == (0.0, 0.0, False)
    tiny = tz.zoo_config(entry("zoo-gpt2-causal"), "tiny")
    assert (tiny.n_layer, tiny.n_embd, tiny.n_head, tiny.vocab_size) == (2, 64, 4, 1024)
    assert tz.zoo_config(entry("zoo-bert-causal"), "tiny").is_decoder  # BERT's LM-head class as a decoder


# ---- real tiny builds -------------------------------------------------------------------------------

@pytest.mark.parametrize("workload, keys", [
    ("zoo-llama-causal", {"input_ids", "attention_mask", "labels"}),
    ("zoo-bert-masked", {"input_ids", "attention_mask", "labels"}),
    ("zoo-t5-seq2seq", {"input_ids", "attention_mask", "decoder_input_ids", "labels"}),
])
def test_tiny_builds_and_runs_a_forward_with_the_heads_inputs(workload, keys):
    built = WORKLOADS[workload].build(ctx())
    assert set(built.kwargs) == keys
    ids = built.kwargs["input_ids"]
    assert ids.shape == (2, tz.DEFAULT_SEQ_LEN["tiny"]) and int(ids.max()) < 1024
    model = built.model.eval()
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    with torch.no_grad():
        out = model(**built.kwargs)
    target = built.kwargs.get("decoder_input_ids", ids)
    assert out.logits.shape[:2] == target.shape and torch.isfinite(out.loss)


def test_seq_len_option_and_its_errors():
    built = WORKLOADS["zoo-gpt2-causal"].build(ctx(seq_len=8))
    assert built.kwargs["input_ids"].shape == (2, 8)
    with pytest.raises(tz.ZooOptionError, match="seq_len"):
        WORKLOADS["zoo-gpt2-causal"].build(ctx(seq_len="many"))
    with pytest.raises(tz.ZooOptionError, match="known options: seq_len"):
        WORKLOADS["zoo-gpt2-causal"].build(ctx(prompt_len=8))


@pytest.mark.parametrize("workload, reason", [
    ("zoo-gemma4_assistant-causal", "config_defaults_fail"),  # 5.24: its validator rejects its own default
    ("zoo-git-causal", "non_text_inputs"),
])
def test_what_the_zoo_cannot_build_is_skipped_with_its_reason(workload, reason):
    if workload not in WORKLOADS:
        pytest.skip(f"transformers {tz.transformers_version()} maps no {workload}")
    with pytest.raises(tz.ZooSkip) as info:
        WORKLOADS[workload].build(ctx())
    assert info.value.reason == reason and str(info.value).startswith(f"{reason}: ")
    assert classify_exception(info.value, "build") == "skipped"  # the worker records it as skipped


def test_skip_reasons_are_a_closed_set():
    with pytest.raises(ValueError, match="unknown zoo skip reason"):
        tz.ZooSkip("something_else", "x")


def test_full_size_beyond_the_device_memory_is_skipped(monkeypatch):
    monkeypatch.setattr(tz, "device_memory_bytes", lambda device: 1 << 20)  # a 1 MiB machine
    with pytest.raises(tz.ZooSkip, match="exceeds_memory: GPT2LMHeadModel"):
        WORKLOADS["zoo-gpt2-causal"].build(ctx(size="full"))


# ---- diffusers zoo --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [m.name for m in dz.MODELS])
def test_diffusers_zoo_builds_at_tiny_with_the_right_output_shape(name):
    model = dz.MODELS_BY_NAME[name]
    built = WORKLOADS[name].build(ctx(batch=1))
    with torch.no_grad():
        out = built.model(*built.args, **built.kwargs)
    out = out[0] if isinstance(out, tuple) else out
    if model.kind == "vae-decode":
        assert out.shape == (1, 3, dz.TINY_RESOLUTION, dz.TINY_RESOLUTION)
    elif model.kind == "vae-encode":
        assert out.shape[:2] == (1, 4) and out.shape[2] < dz.TINY_RESOLUTION
    else:
        latents = built.kwargs["sample"] if "sample" in built.kwargs else built.kwargs["hidden_states"]
        out_channels = built.model.config.out_channels or latents.shape[1]
        assert out.shape == (latents.shape[0], out_channels, *latents.shape[2:]) if latents.dim() == 4 \
            else out.shape == latents.shape  # Flux: packed tokens in, packed tokens out
    assert torch.isfinite(out).all()


def test_flux_ids_and_guidance_follow_the_pipeline():
    built = WORKLOADS["diffusers-flux-dev"].build(ctx(batch=1))
    side = dz.TINY_RESOLUTION // dz.VAE_SCALE // 2
    assert built.kwargs["hidden_states"].shape == (1, side * side, 64)
    assert built.kwargs["img_ids"].shape == (side * side, 3) and built.kwargs["img_ids"][-1].tolist() == [0, side - 1,
                                                                                                           side - 1]
    assert built.kwargs["guidance"].tolist() == [3.5]


def test_diffusers_full_configs_are_the_published_architectures():
    import diffusers

    published = {"diffusers-sd15-unet": 859_520_964, "diffusers-sd3-medium": 2_028_328_000}
    for name, params in published.items():
        class_name, config = dz.load_config(dz.MODELS_BY_NAME[name].config_path("full"))
        with torch.device("meta"):
            module = getattr(diffusers, class_name).from_config(config)
        assert abs(sum(p.numel() for p in module.parameters()) - params) / params < 0.001


def test_diffusers_resolution_option_is_checked():
    with pytest.raises(dz.DiffusersZooOptionError, match="multiple of 32"):
        WORKLOADS["diffusers-sd15-unet"].build(ctx(batch=1, resolution=100))
    with pytest.raises(dz.DiffusersZooOptionError, match="known: resolution"):
        WORKLOADS["diffusers-sd15-unet"].build(ctx(batch=1, steps=3))


# ---- suites ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("cap, expected", [(None, 8.0), (2.0, 2.0)])
def test_the_tiny_suites_cap_case_memory_unless_the_command_line_does(monkeypatch, tmp_path, cap, expected):
    from harness.run import runner

    seen = []

    def fake_cases(run, cases, opts, open_journal, progress):
        seen.append((run, opts, cases))
        return run

    monkeypatch.setattr(runner, "_run_cases", fake_cases)
    runner.execute(runner.RunOptions(suite="transformers-zoo-tiny", workloads=["zoo-gpt2-causal"], compilers=["eager"],
                                     out_dir=str(tmp_path), max_memory_gb=cap), environment={})
    run, opts, cases = seen[0]
    assert opts.max_memory_gb == expected and run.config["max_memory_gb"] == expected
    assert run.config["timeout_s"] == 300.0 and {c.scenario for c in cases} == {"forward", "train"}
    assert runner.make_spec(cases[0], opts, {}, str(tmp_path)).max_memory_bytes == int(expected * 2**30)


def test_zoo_options_are_declared_for_the_runner_check():
    from harness.model.workloads import UnknownOptionError, check_options

    check_options(WORKLOADS["zoo-gpt2-causal"], {"seq_len": 8})
    check_options(WORKLOADS["diffusers-flux-dev"], {"resolution": 512})
    with pytest.raises(UnknownOptionError, match="its options: seq_len"):
        check_options(WORKLOADS["zoo-gpt2-causal"], {"resolution": 512})


def test_an_import_error_while_building_is_a_missing_dependency_skip(monkeypatch):
    class NeedsTimm:
        config_class = None

        def forward(self, input_ids=None):
            raise AssertionError("never built")

        @classmethod
        def _from_config(cls, config, dtype=None):
            raise ImportError("TimmWrapperModel requires the timm library")

    monkeypatch.setattr(tz, "model_class", lambda e: NeedsTimm)
    with pytest.raises(tz.ZooSkip, match="missing_dependency: LlamaForCausalLM: ImportError: TimmWrapperModel"):
        WORKLOADS["zoo-llama-causal"].build(ctx())


def test_diffusers_train_mode_draws_no_random_numbers():
    """DiT drops class labels at random in train mode (p=0.1): off, so train steps compare."""
    built = WORKLOADS["diffusers-dit-xl2"].build(ctx(batch=1))
    model = built.model.train()
    with torch.no_grad():
        first, *rest = [model(**built.kwargs)[0] for _ in range(4)]
    assert all(torch.equal(first, other) for other in rest)
