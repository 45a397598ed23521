"""The `hf` suite: PyTorch's HuggingFace dashboard models, built offline with random weights.

The model list and batch sizes are those of PyTorch's
`benchmarks/dynamo/huggingface_models_list.txt` at the torch 2.11 branch cut (39 names: 32
after the October 2025 pruning, pytorch/pytorch#164815, plus 7 hub-named LLMs), with the batch
divisors of `benchmarks/dynamo/huggingface.yaml`; docs/SUITES.md says where each fact comes
from. Each model is one workload `hf-<name>` (the hub organisation dropped), built as the
dashboard's runner builds it:

- a transformers class name (`BertForMaskedLM`, ...): `ModelClass(ModelClass.config_class())`,
  the config class defaults, `pad_token_id=0` for GPT-2/GPT-Neo/GPT-J sequence classification
  and RoBERTa;
- the runner's extra models (`AllenaiLongformerBase`, `T5Small`, `DistillGPT2`, `GoogleFnet`,
  `YituTechConvBert`) and the hub-named ones (`meta-llama/Llama-3.2-1B`, ...): the
  architecture from a config JSON shipped under `suites/configs/hf/` (nothing is downloaded).

Inputs follow the runner: random `input_ids` of the model's sequence length, the loss
arguments its head takes (`labels`, `start_positions`/`end_positions`), `decoder_input_ids`
for T5/MT5/M2M100/Blenderbot seq2seq, `input_features` for Whisper; `use_cache=False`, eval
mode for `forward`. Dropout is off (compiled and eager training steps must compare). `--size
tiny` is the same class with a shrunken config (2 layers, width 64, vocabulary <= 1024,
sequence <= 32); the `hf-tiny` suite runs it at batch 2 on CPU.

A class the installed transformers lacks, or a config it cannot build, ends the case
`skipped` with the reason (the H200 box has an older transformers than CI).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler import NotApplicableError
from harness import Built, WorkloadContext, workload
from harness.model.accuracy import DYNAMO_RULE, AccuracyRule, declare_accuracy

from . import TRANSFORMERS_BUILD, Suite, SuiteEntry, is_drop_probability, register_suite

PRELOAD_MODULES = TRANSFORMERS_BUILD  # every build imports them (suites/__init__.py)

CONFIG_DIR = Path(__file__).resolve().parent / "configs" / "hf"
LIST_SOURCE = ("pytorch/pytorch benchmarks/dynamo/huggingface_models_list.txt at the torch 2.11 branch cut "
               "(after #164815, 2025-10-08), batch divisors from benchmarks/dynamo/huggingface.yaml")
UNIT = "samples"
TINY_BATCH = 2
# virtual-memory cap of a tiny CPU case (RLIMIT_AS): a tiny model needs under 2 GB; a runaway case ends oom
TINY_MEMORY_GB = 8.0
TINY_SEQ = 32
TINY_VOCAB = 1024
LLM_INPUT_LENGTH = 1000  # the runner's TextGenerationBenchmark.INPUT_LENGTH
WHISPER_DECODER_LENGTH = 64  # the runner times generate(); a forward needs a decoder prefix: ours


class HFModelUnavailable(NotApplicableError):
    """The installed transformers cannot build this model (missing class, config it rejects):
    the case is skipped with the reason, never failed."""


@dataclass(frozen=True)
class HFModel:
    """One line of the list: the dashboard's name, the list's batch size, the yaml's divisor.
    `config` names a shipped JSON (extra and hub-named models); otherwise `name` is a
    transformers class built from its config class defaults. `hud_skip` says why the
    dashboard's yaml skips the model ("" when it runs it); compilebench still runs it."""

    name: str
    list_batch: int
    divisor: int = 1
    config: str = ""
    kind: str = "text"  # text | llm | whisper
    train: bool = True
    hud_skip: str = ""

    @property
    def workload(self) -> str:
        return "hf-" + self.name.split("/")[-1]

    @property
    def batch(self) -> int:
        """The batch the runner uses: the list's batch over the yaml's divisor (at least 1)."""
        return max(self.list_batch // self.divisor, 1)


_DEEPCOPY = "fails deepcopy (huggingface.yaml skip: all)"
_BS1 = "fails with even batch size = 1 (huggingface.yaml skip: all)"
_BIG = "model too big (huggingface.yaml skip: all)"

HF_MODELS: tuple[HFModel, ...] = (
    HFModel("AlbertForMaskedLM", 8, 2),
    HFModel("AllenaiLongformerBase", 8, 2, config="longformer-base-4096"),
    HFModel("BartForCausalLM", 8, 2),
    HFModel("BertForMaskedLM", 32, 2),
    HFModel("BlenderbotForCausalLM", 32, 8),
    HFModel("BlenderbotForConditionalGeneration", 16, hud_skip=_DEEPCOPY),
    HFModel("DebertaV2ForMaskedLM", 8, 4),
    HFModel("DistilBertForMaskedLM", 256, 2),
    HFModel("DistillGPT2", 32, 2, config="distilgpt2"),
    HFModel("ElectraForCausalLM", 64, 2),
    HFModel("GPT2ForSequenceClassification", 8, 2),
    HFModel("GPTJForCausalLM", 1, train=False, hud_skip=_BS1),
    HFModel("GPTJForQuestionAnswering", 1, train=False, hud_skip=_BS1),
    HFModel("GPTNeoForCausalLM", 32, hud_skip=_DEEPCOPY),
    HFModel("GPTNeoForSequenceClassification", 32, hud_skip=_DEEPCOPY),
    HFModel("GoogleFnet", 32, 2, config="fnet-base"),
    HFModel("LayoutLMForMaskedLM", 32, 2),
    HFModel("M2M100ForConditionalGeneration", 64, 4),
    HFModel("MBartForCausalLM", 8, 2),
    HFModel("MT5ForConditionalGeneration", 32, 2),
    HFModel("MegatronBertForCausalLM", 16, 4),
    HFModel("MobileBertForMaskedLM", 256, 2),
    HFModel("OPTForCausalLM", 4, 2),
    HFModel("PLBartForCausalLM", 16, 2),
    HFModel("PegasusForCausalLM", 128, 4),
    HFModel("RobertaForCausalLM", 32, 2),
    HFModel("T5ForConditionalGeneration", 8, 2),
    HFModel("T5Small", 8, 2, config="t5-small"),
    HFModel("TrOCRForCausalLM", 64, 2),
    HFModel("XGLMForCausalLM", 32, 4),
    HFModel("XLNetLMHeadModel", 16, 2),
    HFModel("YituTechConvBert", 32, 2, config="conv-bert-base"),
    HFModel("meta-llama/Llama-3.2-1B", 8, 8, config="llama-3.2-1b", kind="llm"),
    HFModel("google/gemma-2-2b", 8, 8, config="gemma-2-2b", kind="llm"),
    HFModel("google/gemma-3-4b-it", 8, 8, config="gemma-3-4b-it", kind="llm", train=False, hud_skip=_BIG),
    HFModel("openai/whisper-tiny", 8, 8, config="whisper-tiny", kind="whisper"),
    HFModel("Qwen/Qwen3-0.6B", 8, 8, config="qwen3-0.6b", kind="llm"),
    HFModel("mistralai/Mistral-7B-Instruct-v0.3", 8, 8, config="mistral-7b-instruct-v0.3", kind="llm", train=False,
            hud_skip=_BIG),
    HFModel("openai/gpt-oss-20b", 8, 8, config="gpt-oss-20b", kind="llm", train=False, hud_skip=_BIG),
)
# the runner's EXTRA_MODELS: the auto class each shipped config is built with
EXTRA_AUTO_CLASS = {
    "AllenaiLongformerBase": "AutoModelForMaskedLM",
    "T5Small": "AutoModelForSeq2SeqLM",
    "DistillGPT2": "AutoModelForCausalLM",
    "GoogleFnet": "AutoModelForMaskedLM",
    "YituTechConvBert": "AutoModelForMaskedLM",
}
# the runner sets pad_token_id=0 so that batches > 1 work for these
PAD_ZERO_PREFIXES = ("GPT2ForSequenceClassification", "GPTNeoForSequenceClassification",
                     "GPTJForSequenceClassification", "Roberta", "Marian")
# the runner feeds decoder_input_ids (= input_ids) to these seq2seq models
DECODER_INPUT_PREFIXES = ("T5", "M2M100", "MT5", "BlenderbotForConditionalGeneration")

BY_WORKLOAD = {m.workload: m for m in HF_MODELS}


def sequence_length(name: str) -> int:
    """The runner's sequence length per model name (get_sequence_length)."""
    if name.startswith("Blenderbot"):
        return 128
    if name.startswith(("GPT2", "Bart", "T5", "PLBart", "MBart")) or name == "AllenaiLongformerBase":
        return 1024
    if name.startswith("OPT"):
        return 2048
    if name.startswith(("Albert", "Deberta", "Layout", "Electra", "XLNet", "MegatronBert", "Bert", "Roberta")) or \
            name in ("DistillGPT2", "GoogleFnet", "YituTechConvBert"):
        return 512
    if name == "TrOCRForCausalLM":
        return 256
    return 128  # MobileBert and everything else: the runner's default


# ---- configs -------------------------------------------------------------------------

def load_config_dict(stem: str) -> dict[str, Any]:
    """A shipped config without our own `_`-prefixed annotations."""
    data = json.loads((CONFIG_DIR / f"{stem}.json").read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


# shrink rules: config keys -> tiny value (only keys the config has are touched)
TINY_VALUES: dict[str, int] = {
    **dict.fromkeys(("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
                     "num_decoder_layers"), 2),
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "dim"), 64),
    **dict.fromkeys(("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
                     "decoder_attention_heads", "attention_heads"), 2),
    "num_key_value_heads": 1,
    **dict.fromkeys(("intermediate_size", "d_ff", "encoder_ffn_dim", "decoder_ffn_dim", "ffn_dim", "d_inner",
                     "hidden_dim"), 128),
    **dict.fromkeys(("head_dim", "d_kv", "d_head"), 32),
    **dict.fromkeys(("embedding_size", "intra_bottleneck_size"), 32),
    "rotary_dim": 16,
    "num_feedforward_networks": 1,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "max_source_positions": 16,  # Whisper: 32 input frames
    "max_target_positions": 64,
    "image_size": 56,  # Gemma 3's vision tower: 4x4 patches of 14
    "mm_tokens_per_image": 4,
}
# per-model tiny overrides where a config ties a list to the layer count
TINY_EXTRA: dict[str, dict[str, Any]] = {
    "AllenaiLongformerBase": {"attention_window": [8, 8]},
    "GPTNeoForCausalLM": {"attention_types": [[["global", "local"], 1]]},
    "GPTNeoForSequenceClassification": {"attention_types": [[["global", "local"], 1]]},
    "openai/gpt-oss-20b": {"layer_types": ["sliding_attention", "full_attention"]},
}


def shrink(data: Mapping[str, Any]) -> dict[str, Any]:
    """The tiny variant of a config dict: fewer layers, small widths, a vocabulary of at
    most TINY_VOCAB with the special token ids moved inside it; nested sub-configs too."""
    out = dict(data)
    for key, value in data.items():
        if key in TINY_VALUES and isinstance(value, int) and not isinstance(value, bool):
            out[key] = min(value, TINY_VALUES[key])
        elif isinstance(value, dict) and key.endswith("_config"):
            out[key] = shrink(value)
    vocab = data.get("vocab_size")
    if isinstance(vocab, int) and vocab > TINY_VOCAB:
        out["vocab_size"] = TINY_VOCAB
    limit = out.get("vocab_size", TINY_VOCAB)
    for key, value in data.items():
        if key.endswith(("_token_id", "_token_index")):
            out[key] = remap_token_id(value, limit)
    return out


def remap_token_id(value: Any, vocab: int) -> Any:
    """A special token id outside a shrunken vocabulary, moved to its top rows."""
    if isinstance(value, list):
        return [remap_token_id(v, vocab) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and value >= vocab:
        return vocab - 1 - (value % 8)
    return value


def dropout_off(data: Mapping[str, Any]) -> dict[str, Any]:
    """Every float drop probability (suites.is_drop_probability: dropout, layer drop, drop
    path) set to 0, nested sub-configs too."""
    out = dict(data)
    for key, value in data.items():
        if is_drop_probability(key, value):
            out[key] = 0.0
        elif isinstance(value, dict) and key.endswith("_config"):
            out[key] = dropout_off(value)
    return out


def transformers_attr(name: str) -> Any:
    import transformers

    try:
        return getattr(transformers, name)
    except (AttributeError, ImportError) as exc:
        raise HFModelUnavailable(f"transformers {transformers.__version__} has no {name} "
                                 f"({type(exc).__name__}); the model needs a newer transformers") from None


def model_class_and_config(model: HFModel, size: str) -> tuple[Any, Any]:
    """(class to instantiate, config) as the runner picks them, shrunk for `tiny`."""
    if model.config:
        data = load_config_dict(model.config)
        arch = EXTRA_AUTO_CLASS.get(model.name) or data["architectures"][0]
        cls = transformers_attr(arch)
        data = dropout_off(shrink(data) if size == "tiny" else data)
        data.update(TINY_EXTRA.get(model.name, {}) if size == "tiny" else {})
        data.pop("architectures", None)
        model_type = data.pop("model_type")
        auto_config = transformers_attr("AutoConfig")
        try:
            config = auto_config.for_model(model_type, **data)
        except (ValueError, KeyError) as exc:
            raise HFModelUnavailable(f"the installed transformers cannot build a {model_type!r} config: {exc}") from None
        return cls, config
    cls = transformers_attr(model.name)
    defaults = cls.config_class().to_dict()
    overrides: dict[str, Any] = {}
    if size == "tiny":
        overrides = {k: v for k, v in shrink(defaults).items() if v != defaults.get(k)}
        overrides.update(TINY_EXTRA.get(model.name, {}))
    overrides.update({k: v for k, v in dropout_off(defaults).items() if v != defaults.get(k)})
    if model.name.startswith(PAD_ZERO_PREFIXES):
        overrides["pad_token_id"] = 0
    config = cls.config_class(**overrides)
    return cls, config


def build_model(model: HFModel, size: str, device: str, dtype: Any) -> Any:
    """The model with random weights, created on `device`, cache off (as the runner)."""
    import torch

    cls, config = model_class_and_config(model, size)
    if hasattr(config, "use_cache"):
        config.use_cache = False
    # Concrete classes are built in float32 and cast, as HUD's runner builds them: building
    # them in `dtype` (transformers' _from_config) changes buffers computed in __init__
    # (GPT-J's sinusoidal embed_positions come out computed in bfloat16, not cast to it).
    with torch.device(device):
        built = cls.from_config(config, dtype=dtype) if "auto" in cls.__module__ else cls(config)
    built = built.to(device=device, dtype=dtype)
    if getattr(getattr(built, "config", None), "use_cache", None):
        built.config.use_cache = False
    return built


# ---- inputs ---------------------------------------------------------------------------

def text_inputs(model: HFModel, net: Any, batch: int, seq: int, device: str) -> dict[str, Any]:
    """The runner's generate_inputs_for_model with its loss arguments (include_loss_args)."""
    import torch

    name = model.name
    vocab = int(net.config.vocab_size)

    def ints(high: int, shape: tuple[int, ...]) -> Any:
        return torch.randint(0, max(high, 1), shape, device=device, dtype=torch.int64)

    input_ids = ints(1 if name.startswith("Roberta") else vocab, (batch, seq))
    if "Bart" in name and net.config.eos_token_id is not None:
        input_ids[:, -1] = net.config.eos_token_id
    inputs: dict[str, Any] = {"input_ids": input_ids}
    if name.startswith(DECODER_INPUT_PREFIXES):
        inputs["decoder_input_ids"] = input_ids
    if name.endswith("QuestionAnswering"):
        inputs["start_positions"] = ints(seq, (batch,))
        inputs["end_positions"] = ints(seq, (batch,))
    elif name.endswith("SequenceClassification"):
        inputs["labels"] = ints(int(net.config.num_labels) - 1, (batch,))
    elif name.endswith("ForConditionalGeneration"):
        inputs["labels"] = ints(vocab - 1, (batch, seq))
    else:  # MaskedLM, CausalLM, LMHeadModel and the runner's extra models
        inputs["labels"] = ints(vocab, (batch, seq))
    return inputs


def llm_inputs(net: Any, batch: int, seq: int, device: str) -> dict[str, Any]:
    """A prompt of random ids (the runner's INPUT_LENGTH tokens) and labels for the loss."""
    import torch

    ids = torch.randint(0, int(text_config(net.config).vocab_size), (batch, seq), device=device)
    return {"input_ids": ids, "labels": ids}


def whisper_inputs(net: Any, batch: int, size: str, device: str, dtype: Any) -> dict[str, Any]:
    """Log-mel features of the model's full window (30 s = 3000 frames at full size) and a
    decoder prefix as labels (decoder_input_ids are the labels shifted right)."""
    import torch

    cfg = net.config
    frames = 2 * int(cfg.max_source_positions)
    features = torch.randn(batch, int(cfg.num_mel_bins), frames, device=device, dtype=dtype) * 0.1
    length = min(WHISPER_DECODER_LENGTH, int(cfg.max_target_positions)) if size == "full" else 16
    labels = torch.randint(0, int(cfg.vocab_size), (batch, length), device=device)
    return {"input_features": features, "labels": labels}


def text_config(config: Any) -> Any:
    """The language model's config (multimodal configs nest it)."""
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def case_sequence_length(model: HFModel, size: str) -> int:
    full = LLM_INPUT_LENGTH if model.kind == "llm" else sequence_length(model.name)
    return min(full, TINY_SEQ) if size == "tiny" else full


def make_factory(model: HFModel) -> Callable[[WorkloadContext], Built]:
    def factory(ctx: WorkloadContext) -> Built:
        net = build_model(model, ctx.size, ctx.device, ctx.dtype)
        seq = case_sequence_length(model, ctx.size)
        if model.kind == "whisper":
            kwargs = whisper_inputs(net, ctx.batch_size, ctx.size, ctx.device, ctx.dtype)
        elif model.kind == "llm":
            kwargs = llm_inputs(net, ctx.batch_size, seq, ctx.device)
        else:
            kwargs = text_inputs(model, net, ctx.batch_size, seq, ctx.device)
        extras = {"hf_name": model.name, "model_class": type(net).__name__, "sequence_length": seq,
                  "list": LIST_SOURCE, "param_count": int(sum(p.numel() for p in net.parameters()))}
        return Built(model=net, kwargs=kwargs, extras=extras)

    factory.__name__ = "build_" + "".join(c if c.isalnum() else "_" for c in model.workload)
    return factory


def describe(model: HFModel) -> str:
    source = f"config suites/configs/hf/{model.config}.json" if model.config else "config class defaults"
    skip = f"; HUD skips it: {model.hud_skip}" if model.hud_skip else ""
    return (f"HF dashboard {model.name} (huggingface_models_list.txt @ 2.11: batch {model.list_batch}"
            f"/{model.divisor} = {model.batch}, {source}){skip}")


def scenarios_for(model: HFModel) -> tuple[str, ...]:
    return ("forward", "train") if model.train else ("forward",)


for _model in HF_MODELS:
    workload(_model.workload, unit=UNIT, batch_size=_model.batch, scenarios=scenarios_for(_model),
             description=describe(_model))(make_factory(_model))
    # judged as HUD's huggingface runner judges it (float64 reference, RMSE test, its
    # tolerances), in every suite that runs it (docs/SUITES.md "Accuracy as HUD judges it")
    declare_accuracy(_model.workload, AccuracyRule(DYNAMO_RULE, runner="huggingface", model=_model.name))


def workload_names() -> tuple[str, ...]:
    return tuple(m.workload for m in HF_MODELS)


# ---- suites ---------------------------------------------------------------------------

# one timed second of interleaved samples is enough at this breadth: the information is in
# pass/fail, compile time and a speedup, not in a 1% latency change
HF_POLICY = (("min_time_s", 1.0), ("min_samples", 5), ("max_samples", 200), ("warmup", 2), ("max_time_s", 10.0))
HF_TINY_POLICY = (("min_time_s", 0.2), ("min_samples", 5), ("max_samples", 100), ("warmup", 1), ("max_time_s", 3.0))

register_suite(Suite(
    "hf",
    "PyTorch's HuggingFace dashboard list at the 2.11 cut (39 models, its batch sizes and inputs), full size on "
    "CUDA in float32, forward and train step, eager vs inductor",
    entries=(SuiteEntry(workloads=workload_names(), compilers=("eager", "inductor"), devices=("cuda",),
                        sizes=("full",)),),
    policy=HF_POLICY,
    timeout_s=900.0,  # gpt-oss-20b and Mistral-7B build and compile for minutes
))
register_suite(Suite(
    "hf-tiny",
    "the hf list at tiny size (same classes, 2 layers, width 64, sequence 32, batch 2) on CPU: forward and "
    "train step, eager vs inductor",
    entries=(SuiteEntry(workloads=workload_names(), compilers=("eager", "inductor"), devices=("cpu",),
                        sizes=("tiny",), batch_sizes=(TINY_BATCH,)),),
    policy=HF_TINY_POLICY,
    timeout_s=600.0,  # an inductor train compile of a tiny model took 128-220 s here under load
    max_memory_gb=TINY_MEMORY_GB,
))
