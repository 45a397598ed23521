"""The `hf` suite: PyTorch's HuggingFace dashboard list, its batch sizes, inputs and builders."""

from __future__ import annotations

import pytest

from suites import get_suite, hf

torch = pytest.importorskip("torch")


def by_name(name: str) -> hf.HFModel:
    return next(m for m in hf.HF_MODELS if m.name == name)


def test_the_list_has_the_39_models_of_the_2_11_cut():
    names = [m.name for m in hf.HF_MODELS]
    assert len(names) == 39 and len(set(names)) == 39
    hub = [n for n in names if "/" in n]
    assert len(hub) == 7
    assert "google/gemma-2-2b" in hub and "openai/whisper-tiny" in hub
    # pruned in October 2025 (#164815): gone from the 2.11 list
    assert not {"BertForQuestionAnswering", "CamemBert", "DistilBertForQuestionAnswering"} & set(names)
    assert len({m.workload for m in hf.HF_MODELS}) == 39


@pytest.mark.parametrize("name, list_batch, batch", [
    ("BertForMaskedLM", 32, 16),  # huggingface.yaml divisor 2
    ("DistilBertForMaskedLM", 256, 128),
    ("BlenderbotForCausalLM", 32, 4),  # divisor 8
    ("BlenderbotForConditionalGeneration", 16, 16),  # no divisor
    ("GPTJForCausalLM", 1, 1),
    ("meta-llama/Llama-3.2-1B", 8, 1),  # the hub LLMs: 8 / 8
])
def test_batch_sizes_are_the_list_over_the_yaml_divisor(name, list_batch, batch):
    model = by_name(name)
    assert (model.list_batch, model.batch) == (list_batch, batch)
    from harness.model.workloads import get_workload

    assert get_workload(model.workload).batch_size == batch


@pytest.mark.parametrize("name, seq", [
    ("BertForMaskedLM", 512), ("GPT2ForSequenceClassification", 1024), ("T5Small", 1024), ("OPTForCausalLM", 2048),
    ("BlenderbotForCausalLM", 128), ("TrOCRForCausalLM", 256), ("MobileBertForMaskedLM", 128),
    ("DistillGPT2", 512), ("MT5ForConditionalGeneration", 128), ("AllenaiLongformerBase", 1024),
])
def test_sequence_lengths_follow_the_runner(name, seq):
    assert hf.sequence_length(name) == seq
    assert hf.case_sequence_length(by_name(name), "tiny") == min(seq, hf.TINY_SEQ)


def test_workloads_say_which_list_they_come_from_and_what_hud_skips():
    from harness.model.workloads import get_workload

    wl = get_workload("hf-GPTNeoForCausalLM")
    assert "huggingface_models_list.txt @ 2.11" in wl.description and "HUD skips it" in wl.description
    assert get_workload("hf-gpt-oss-20b").scenarios == ("forward",)  # too big to train beside a copy
    assert get_workload("hf-BertForMaskedLM").scenarios == ("forward", "train")


def test_suites_hf_and_hf_tiny():
    full, tiny = get_suite("hf"), get_suite("hf-tiny")
    assert full.entries[0].devices == ("cuda",) and full.entries[0].sizes == ("full",)
    assert full.entries[0].compilers == ("eager", "inductor") and len(full.entries[0].workloads) == 39
    assert full.timeout_s >= 900
    assert tiny.entries[0].devices == ("cpu",) and tiny.entries[0].batch_sizes == (hf.TINY_BATCH,)
    assert tiny.max_memory_gb == hf.TINY_MEMORY_GB and full.max_memory_gb is None  # the cap is RLIMIT_AS: CPU only


def test_shrink_moves_special_tokens_into_the_small_vocabulary():
    data = {"vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": [128001, 128009], "pad_token_id": 0,
            "num_hidden_layers": 16, "hidden_size": 2048, "text_config": {"num_hidden_layers": 34, "vocab_size": 5}}
    tiny = hf.shrink(data)
    assert tiny["vocab_size"] == hf.TINY_VOCAB and tiny["num_hidden_layers"] == 2 and tiny["hidden_size"] == 64
    assert all(0 <= t < hf.TINY_VOCAB for t in [tiny["bos_token_id"], *tiny["eos_token_id"]])
    assert tiny["pad_token_id"] == 0 and tiny["text_config"]["num_hidden_layers"] == 2


def test_dropout_is_switched_off():
    assert hf.dropout_off({"hidden_dropout_prob": 0.1, "attention_dropout": 0.0, "resid_pdrop": 0.1,
                           "text_config": {"dropout": 0.1}, "hidden_size": 8}) == {
        "hidden_dropout_prob": 0.0, "attention_dropout": 0.0, "resid_pdrop": 0.0, "text_config": {"dropout": 0.0},
        "hidden_size": 8}


def test_layer_drop_and_drop_path_are_switched_off_too():
    """M2M100's 0.05 layer drop skipped whole layers at random in a train step (tiny on CPU: 10
    recompiles and a 0.04x speedup); drop path is stochastic depth. Ints and other keys stay."""
    from suites.transformers_zoo import common_overrides

    config = {"encoder_layerdrop": 0.05, "decoder_layerdrop": 0.05, "layerdrop": 0.1, "drop_path_rate": 0.1,
              "dropout_rate": 0.1, "num_layers": 12, "drop_ratio_int": 3, "layer_norm_eps": 1e-5}
    off = hf.dropout_off(config)
    assert off == {**config, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "layerdrop": 0.0,
                   "drop_path_rate": 0.0, "dropout_rate": 0.0}
    assert common_overrides(config) == {
        "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0, "layerdrop": 0.0, "drop_path_rate": 0.0, "dropout_rate": 0.0}


def test_the_m2m100_config_builds_without_layer_drop():
    model = next(m for m in hf.HF_MODELS if m.name == "M2M100ForConditionalGeneration")
    for size in ("tiny", "full"):
        _, config = hf.model_class_and_config(model, size)
        assert config.encoder_layerdrop == 0.0 and config.decoder_layerdrop == 0.0 and config.dropout == 0.0


@pytest.mark.parametrize("workload, keys", [
    ("hf-BertForMaskedLM", {"input_ids", "labels"}),
    ("hf-T5Small", {"input_ids", "decoder_input_ids", "labels"}),
    ("hf-GPTJForQuestionAnswering", {"input_ids", "start_positions", "end_positions"}),
    ("hf-whisper-tiny", {"input_features", "labels"}),
    ("hf-Qwen3-0.6B", {"input_ids", "labels"}),
])
def test_tiny_models_build_with_the_runners_inputs_and_a_loss(workload, keys):
    from harness import WorkloadContext
    from harness.model.workloads import get_workload

    built = get_workload(workload).build(WorkloadContext(device="cpu", dtype=torch.float32, batch_size=2, size="tiny"))
    assert set(built.kwargs) == keys
    model = built.model.eval()
    assert not getattr(model.config, "use_cache", False)  # the runner turns the KV cache off
    with torch.no_grad():
        out = model(**built.kwargs)
    assert out.loss is not None and torch.isfinite(out.loss)
    assert built.extras["param_count"] < 2_000_000  # tiny


def test_roberta_inputs_are_zeros_and_bart_ends_with_eos():
    from harness import WorkloadContext
    from harness.model.workloads import get_workload

    ctx = WorkloadContext(device="cpu", dtype=torch.float32, batch_size=2, size="tiny")
    roberta = get_workload("hf-RobertaForCausalLM").build(ctx)
    assert int(roberta.kwargs["input_ids"].max()) == 0
    assert roberta.model.config.pad_token_id == 0
    bart = get_workload("hf-BartForCausalLM").build(ctx)
    assert (bart.kwargs["input_ids"][:, -1] == bart.model.config.eos_token_id).all()


@pytest.mark.parametrize("name, millions", [
    ("BertForMaskedLM", 109.5),  # BERT-base: the config class defaults
    ("meta-llama/Llama-3.2-1B", 1235.8),
    ("openai/gpt-oss-20b", 20914.8),
])
def test_full_size_parameter_counts_on_meta(name, millions):
    model = hf.build_model(by_name(name), "full", "meta", torch.float32)
    assert sum(p.numel() for p in model.parameters()) / 1e6 == pytest.approx(millions, abs=0.1)


def test_a_class_the_installed_transformers_lacks_is_skipped(monkeypatch):
    import transformers

    from compiler import NotApplicableError

    model = hf.HFModel("NoSuchModelForMaskedLM", 8)
    monkeypatch.delattr(transformers, "NoSuchModelForMaskedLM", raising=False)
    with pytest.raises(NotApplicableError, match="has no NoSuchModelForMaskedLM"):
        hf.model_class_and_config(model, "tiny")
