"""The transformers zoo: every causal-LM, masked-LM and seq2seq-LM architecture that the
installed transformers maps in its auto classes, one workload per (architecture, head),
random weights, nothing downloaded.

The list is read at run time from the installed transformers' `modeling_auto.py`
(`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, `MODEL_FOR_MASKED_LM_MAPPING_NAMES`,
`MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES`), so the zoo follows the installed version
(280 entries on 5.24; another version has another list). The mappings are read from that
file's literals without importing transformers: registering the zoo costs `compilebench
list` and every worker milliseconds, not the second an `import transformers` takes
(tests/test_zoo.py checks the literals equal the imported mappings). Model classes are
imported only when a case builds.

Workload `zoo-<model_type>-<head>` (head: causal, masked, seq2seq; a class that two mappings
name, such as BartForConditionalGeneration, is one workload under the first of seq2seq,
causal, masked). `size=full` is the config class's defaults; `size=tiny` shrinks it
(`tiny_overrides`: 2 layers, width 64, 4 heads, FFN 128, vocab 1024, 4 experts, ...).
Dropout is off in both (eager and compiled train steps must compare). Inputs: `input_ids`
and `attention_mask` (batch x seq_len), `decoder_input_ids` for seq2seq, and `labels`
(so the output carries the model's own loss: what `train` back-propagates, and what HF
runners pass in inference too).

What the zoo cannot build ends `skipped` with one of SKIP_REASONS as the message prefix
("<reason>: detail"); anything else that raises is a failure like any other case.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler import NotApplicableError
from harness import Built, WorkloadContext, workload
from harness.model.errors import UserError

from . import TRANSFORMERS_BUILD, Suite, SuiteEntry, is_drop_probability, register_suite

PRELOAD_MODULES = TRANSFORMERS_BUILD  # every build imports them (suites/__init__.py)

# head -> the auto mapping it comes from; the order decides which head owns a shared class
HEAD_MAPPINGS: dict[str, str] = {
    "seq2seq": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "causal": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
}
PREFIX = "zoo-"
BATCH_SIZE = 2
DEFAULT_SEQ_LEN = {"tiny": 32, "full": 512}
# the workload options (@workload(options=...): checked before any worker starts)
OPTIONS = {"seq_len": "tokens per sequence (default 32 tiny / 512 full; capped at the model's positions)"}
OPTION_NAMES = tuple(OPTIONS)

# the closed set of reasons a zoo case is skipped; the record's message starts "<reason>: "
SKIP_REASONS: dict[str, str] = {
    "no_config_class": "the model type has no config class in this transformers",
    "config_defaults_fail": "the config class raises on its own defaults (a required sub-config or argument, "
                            "as encoder-decoder's; or a default its own validator rejects)",
    "missing_dependency": "importing the config or model class needs a package that is absent or does not import",
    "remote_code": "the mapping names a class this transformers does not define (trust_remote_code territory)",
    "non_text_inputs": "the head's forward takes no input_ids (audio/vision inputs the zoo does not build)",
    "required_inputs": "the head's forward requires inputs besides input_ids (pixel values, audio features, ...)",
    "exceeds_memory": "size full: the parameters alone exceed the device's memory",
}

# ---- tiny: how a default config shrinks -----------------------------------------------------
TINY_LAYERS = 2
TINY_WIDTH = 64
TINY_HEADS = 4
TINY_HEAD_DIM = TINY_WIDTH // TINY_HEADS
TINY_FFN = 128
TINY_EXPERT_FFN = 32
TINY_VOCAB = 1024
TINY_POSITIONS = 512
TINY_EXPERTS = 4
TINY_EXPERTS_PER_TOKEN = 2
TINY_LORA_RANK = 32
TINY_WINDOW = 16

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers", "decoder_layers",
              "num_decoder_layers", "num_encoder_layers", "depth")
WIDTH_KEYS = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "emb_dim", "model_dim", "word_embed_proj_dim")
HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads",
             "decoder_attention_heads")
KV_HEAD_KEYS = ("num_key_value_heads", "n_head_kv", "num_kv_heads", "n_kv_heads", "multi_query_group_num")
HEAD_DIM_KEYS = ("head_dim", "d_kv", "kv_channels", "attention_head_size")
FFN_KEYS = ("intermediate_size", "ffn_dim", "d_ff", "n_inner", "encoder_ffn_dim", "decoder_ffn_dim",
            "ffn_hidden_size", "hidden_dim", "dim_feedforward", "inner_hidden_size")
EXPERT_FFN_KEYS = ("moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size",
                   "moe_ffn_hidden_size", "expert_ffn_hidden_size")
EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts", "zero_expert_num")
EXPERTS_PER_TOKEN_KEYS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "moe_k", "num_selected_experts")
SHARED_EXPERT_KEYS = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts")
# linear-attention (gated delta net) blocks: value heads a multiple of key heads
LINEAR_HEAD_KEYS = {"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": TINY_HEAD_DIM,
                    "linear_value_head_dim": TINY_HEAD_DIM}
POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length")
# width-like keys that may not exceed the new width (ALBERT's factorised embeddings)
CAPPED_WIDTH_KEYS = ("embedding_size", "hidden_size_per_layer_input")
ONE_KEYS = ("n_group", "topk_group", "n_groups", "mamba_n_groups", "first_k_dense_replace", "num_expert_group")
MLA_KEYS = {"q_lora_rank": TINY_LORA_RANK, "kv_lora_rank": TINY_LORA_RANK, "qk_rope_head_dim": 8,
            "qk_nope_head_dim": TINY_HEAD_DIM, "v_head_dim": TINY_HEAD_DIM, "qk_head_dim": 8 + TINY_HEAD_DIM}
# per-layer type lists: one layer of each distinct type is kept
LAYER_TYPE_KEYS = ("layer_types", "layers_block_type", "block_types", "hybrid_override_pattern")
TOKEN_ID_SUFFIXES = ("_token_id", "_token_index", "_token_ids")


class ZooSkip(NotApplicableError):
    """A zoo case that cannot run here: skipped, its message led by one of SKIP_REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in SKIP_REASONS:
            raise ValueError(f"unknown zoo skip reason {reason!r}; known: {', '.join(SKIP_REASONS)}")
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


class ZooOptionError(UserError, ValueError):
    """A bad zoo workload option; the message says the fix."""


@dataclass(frozen=True)
class ZooEntry:
    model_type: str
    head: str
    class_name: str

    @property
    def workload(self) -> str:
        return f"{PREFIX}{self.model_type}-{self.head}"


# ---- the mapping, read from the installed transformers ------------------------------------

def modeling_auto_path() -> Path | None:
    """The installed transformers' modeling_auto.py, found without importing transformers."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "models" / "auto" / "modeling_auto.py"


def read_mapping_literals(source: str) -> dict[str, list[tuple[str, str]]]:
    """`NAME = OrderedDict([(model_type, class_name), ...])` assignments of `source`, by name,
    for the mappings in HEAD_MAPPINGS; a mapping not written as such a literal is absent."""
    wanted = set(HEAD_MAPPINGS.values())
    found: dict[str, list[tuple[str, str]]] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if name not in wanted or not (isinstance(node.value, ast.Call) and len(node.value.args) == 1):
            continue
        try:
            pairs = ast.literal_eval(node.value.args[0])
        except ValueError:
            continue
        found[name] = [(str(k), str(v)) for k, v in pairs if isinstance(v, str)]
    return found


def imported_mappings() -> dict[str, list[tuple[str, str]]]:
    """The same mappings from the imported module (the slow way, and the reference)."""
    from transformers.models.auto import modeling_auto

    return {name: [(k, v) for k, v in getattr(modeling_auto, name).items() if isinstance(v, str)]
            for name in HEAD_MAPPINGS.values()}


@functools.cache
def zoo_entries() -> tuple[ZooEntry, ...]:
    """Every (model type, head) of the installed transformers, in mapping order; empty when
    transformers is not installed."""
    path = modeling_auto_path()
    if path is None:
        return ()
    mappings = read_mapping_literals(path.read_text()) if path.is_file() else {}
    if set(mappings) != set(HEAD_MAPPINGS.values()):  # written some other way in this version
        mappings = imported_mappings()
    entries: list[ZooEntry] = []
    seen: set[tuple[str, str]] = set()
    for head, mapping_name in HEAD_MAPPINGS.items():
        for model_type, class_name in mappings[mapping_name]:
            if (model_type, class_name) in seen:
                continue
            seen.add((model_type, class_name))
            entries.append(ZooEntry(model_type, head, class_name))
    return tuple(entries)


def transformers_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers")
    except PackageNotFoundError:
        return None


# ---- configs --------------------------------------------------------------------------------

def default_config(model_type: str) -> Any:
    """The config class's defaults, or ZooSkip saying why there are none."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        raise ZooSkip("no_config_class", f"{model_type!r} is not in CONFIG_MAPPING_NAMES")
    from transformers import AutoConfig

    try:
        return AutoConfig.for_model(model_type)
    except ImportError as exc:
        raise ZooSkip("missing_dependency", f"{model_type} config: {root_message(exc)}") from exc
    except Exception as exc:  # noqa: BLE001 (any error of the defaults: strict-dataclass validators raise their own)
        raise ZooSkip("config_defaults_fail", f"{model_type}: {type(exc).__name__}: {str(exc)[:300]}") from exc


def root_message(exc: BaseException) -> str:
    """The innermost cause: transformers' lazy imports wrap the real import error."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def is_vocab_key(key: str) -> bool:
    """vocab_size, decoder_vocab_size, tgt_vocab_size, vocab_size_per_layer_input, XLM's n_words."""
    return (key.endswith("vocab_size") and key != "type_vocab_size") or key.startswith("vocab_size_") \
        or key == "n_words"


def is_subconfig(value: Any) -> bool:
    return isinstance(value, dict) and "model_type" in value


def common_overrides(data: Mapping[str, Any]) -> dict[str, Any]:
    """Both sizes: dropout off and no KV cache (outputs compare; a cache object is no tensor)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if is_drop_probability(key, value):
            out[key] = 0.0
        elif key == "use_cache" and value:
            out[key] = False
        elif is_subconfig(value):
            nested = common_overrides(value)
            if nested:
                out[key] = {**value, **nested}
    return out


def kept_layers(data: Mapping[str, Any], n_layers: int) -> list[int]:
    """Which of `n_layers` layers a tiny config keeps: one of each distinct layer type (a
    hybrid's attention and its SSM layer, a sliding and a full one), at least TINY_LAYERS."""
    keep: list[int] = []
    for key in LAYER_TYPE_KEYS:
        types = data.get(key)
        if isinstance(types, (list, str)) and len(types) == n_layers:
            firsts: dict[Any, int] = {}
            for i, kind in enumerate(types):
                firsts.setdefault(kind, i)
            keep = sorted(firsts.values())
            break
    for i in range(n_layers):
        if len(keep) >= TINY_LAYERS:
            break
        if i not in keep:
            keep.append(i)
    return sorted(keep)


def shrink_layer_lists(data: Mapping[str, Any], n_layers: int, keep: list[int]) -> dict[str, Any]:
    """Per-layer lists (length n_layers) keep the kept layers' entries; lists of layer indices
    keep the kept ones, renumbered."""
    out: dict[str, Any] = {}
    position = {old: new for new, old in enumerate(keep)}
    for key, value in data.items():
        if isinstance(value, (list, str)) and len(value) == n_layers and n_layers > len(keep) and (
                isinstance(value, list) or key in LAYER_TYPE_KEYS):
            picked = [value[i] for i in keep]
            out[key] = "".join(picked) if isinstance(value, str) else picked
        elif (isinstance(value, list) and "layer" in key and value
              and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n_layers for v in value)):
            out[key] = [position[v] for v in value if v in position]
        elif isinstance(value, dict) and "layer" in key and value and all(str(k).isdigit() for k in value):
            # {layer index: per-layer settings}
            out[key] = {type(k)(position[int(k)]): v for k, v in value.items() if int(k) in position}
    return out


def set_if_int(out: dict[str, Any], data: Mapping[str, Any], keys: tuple[str, ...], new: Callable[[int], int],
               fill: int | None = None) -> None:
    """`out[key] = new(value)` for the int-valued `keys` of `data` (per-layer int lists
    element-wise, from `out` when a layer cut already shortened them); `fill` stands in for
    a None the model would need (some defaults leave expert counts or head_dim unset)."""
    for key in keys:
        if key not in data:
            continue
        value = out.get(key, data[key])
        if isinstance(value, int) and not isinstance(value, bool):
            out[key] = new(value)
        elif value is None and fill is not None:
            out[key] = fill
        elif isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value) \
                and key in FFN_KEYS:
            out[key] = [new(v) for v in value]


def token_id_overrides(data: Mapping[str, Any], vocab: int) -> dict[str, Any]:
    """Special token ids that a shrunk vocabulary would not hold move to the bottom of it."""
    out: dict[str, Any] = {}
    fixed = {v for k, v in data.items() if k.endswith(TOKEN_ID_SUFFIXES) and isinstance(v, int) and 0 <= v < vocab}
    moved: dict[int, int] = {}

    def remap(v: int) -> int:
        if v < vocab:
            return v
        if v not in moved:
            free = next(i for i in range(vocab) if i not in fixed and i not in moved.values())
            moved[v] = free
        return moved[v]

    for key, value in data.items():
        if not key.endswith(TOKEN_ID_SUFFIXES):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= vocab:
            out[key] = remap(value)
        elif isinstance(value, list) and any(isinstance(v, int) and v >= vocab for v in value):
            out[key] = [remap(v) if isinstance(v, int) else v for v in value]
    return out


def tiny_overrides(data: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of a config dict (`config.to_dict()`) that `size=tiny` changes, sub-configs
    (text_config, encoder, vision_config, ...) included as whole shrunk dicts."""
    out: dict[str, Any] = {}
    main_layers = next((data[k] for k in LAYER_KEYS if isinstance(data.get(k), int) and data[k] > 0), None)
    if main_layers:
        keep = kept_layers(data, main_layers)
        out.update(shrink_layer_lists(data, main_layers, keep))
        set_if_int(out, data, LAYER_KEYS, lambda n: min(n, len(keep)) if n == main_layers else min(n, TINY_LAYERS))
    set_if_int(out, data, WIDTH_KEYS, lambda n: min(n, TINY_WIDTH))
    set_if_int(out, data, CAPPED_WIDTH_KEYS, lambda n: min(n, TINY_WIDTH))
    heads = next((data[k] for k in HEAD_KEYS if isinstance(data.get(k), int)), None)
    tiny_heads = min(heads or TINY_HEADS, TINY_HEADS)
    set_if_int(out, data, HEAD_KEYS, lambda n: min(n, TINY_HEADS))
    set_if_int(out, data, KV_HEAD_KEYS, lambda n: min(n, TINY_HEADS) if n == heads else min(n, 1 if n == 1 else 2),
               fill=tiny_heads)
    set_if_int(out, data, HEAD_DIM_KEYS, lambda n: mla_head_dim(data, n), fill=TINY_HEAD_DIM)
    set_if_int(out, data, ("rotary_dim",), lambda n: min(n, TINY_HEAD_DIM))
    set_if_int(out, data, FFN_KEYS, lambda n: min(n, TINY_FFN))
    set_if_int(out, data, EXPERT_FFN_KEYS, lambda n: min(n, TINY_EXPERT_FFN))
    set_if_int(out, data, EXPERT_KEYS, lambda n: min(n, TINY_EXPERTS), fill=TINY_EXPERTS)
    set_if_int(out, data, EXPERTS_PER_TOKEN_KEYS, lambda n: min(n, TINY_EXPERTS_PER_TOKEN), fill=TINY_EXPERTS_PER_TOKEN)
    set_if_int(out, data, SHARED_EXPERT_KEYS, lambda n: min(n, 1), fill=1)
    set_if_int(out, data, ONE_KEYS, lambda n: min(n, 1), fill=1)
    set_if_int(out, data, POSITION_KEYS, lambda n: min(n, TINY_POSITIONS))
    set_if_int(out, data, ("sliding_window",), lambda n: min(n, TINY_WINDOW))
    for key, value in {**MLA_KEYS, **LINEAR_HEAD_KEYS}.items():
        set_if_int(out, data, (key,), lambda n, value=value: min(n, value))
    out.update(ssm_overrides(data))
    vocab_keys = tuple(k for k in data if is_vocab_key(k))
    set_if_int(out, data, vocab_keys, lambda n: min(n, TINY_VOCAB), fill=TINY_VOCAB)
    vocabs = [out.get(k, data[k]) for k in vocab_keys]
    out.update(token_id_overrides(data, min((v for v in vocabs if isinstance(v, int)), default=1 << 62)))
    if isinstance(data.get("axial_pos_embds_dim"), list) and len(data["axial_pos_embds_dim"]) == 2:
        # Reformer: the axial position embedding halves sum to the width, the shape's product is seq_len
        width = out.get("hidden_size", TINY_WIDTH)
        out["axial_pos_embds_dim"] = [width // 2, width - width // 2]
        out["axial_pos_shape"] = [4, DEFAULT_SEQ_LEN["tiny"] // 4]
    for key, value in data.items():
        if is_subconfig(value):
            out[key] = {**value, **tiny_overrides(value)}
    return out


def mla_head_dim(data: Mapping[str, Any], head_dim: int) -> int:
    """A tiny head_dim that keeps the default's relation to the MLA parts (DeepSeek's head_dim
    is the rope part, dots3's the nope + rope sum); TINY_HEAD_DIM without MLA."""
    rope, nope = data.get("qk_rope_head_dim"), data.get("qk_nope_head_dim")
    if not isinstance(rope, int):
        return TINY_HEAD_DIM
    tiny_rope, tiny_nope = MLA_KEYS["qk_rope_head_dim"], MLA_KEYS["qk_nope_head_dim"]
    if isinstance(nope, int) and head_dim == rope + nope:
        return tiny_rope + tiny_nope
    return tiny_rope if head_dim == rope else TINY_HEAD_DIM


def ssm_overrides(data: Mapping[str, Any]) -> dict[str, Any]:
    """Mamba-style blocks: heads x head_dim must equal expand x width."""
    out: dict[str, Any] = {}
    width = min(next((data[k] for k in WIDTH_KEYS if isinstance(data.get(k), int)), TINY_WIDTH), TINY_WIDTH)
    for heads_key, dim_key, expand_key in (("mamba_n_heads", "mamba_d_head", "mamba_expand"),
                                           ("num_heads", "head_dim", "expand")):
        expand = data.get(expand_key)
        if isinstance(data.get(heads_key), int) and isinstance(data.get(dim_key), int) and isinstance(expand, int):
            out[dim_key] = TINY_HEAD_DIM
            out[heads_key] = max(1, expand * width // TINY_HEAD_DIM)
    for key in ("time_step_rank", "mamba_dt_rank"):
        if isinstance(data.get(key), int):
            out[key] = 8
    for key in ("state_size", "ssm_state_size", "mamba_d_state"):
        if isinstance(data.get(key), int):
            out[key] = min(data[key], 16)
    return out


def zoo_config(entry: ZooEntry, size: str) -> Any:
    """The config a case builds: defaults (full) or shrunk (tiny), dropout and cache off."""
    from transformers import AutoConfig

    data = default_config(entry.model_type).to_dict()
    overrides = common_overrides(data)
    if entry.head == "causal" and data.get("is_decoder") is False:
        overrides["is_decoder"] = True  # encoder families (BERT, Reformer) as decoders: their LM-head class asks for it
    if size == "tiny":
        for key, value in tiny_overrides(data).items():
            overrides[key] = {**overrides[key], **value} if is_subconfig(value) and key in overrides else value
    return AutoConfig.for_model(entry.model_type, **overrides)


# ---- models and inputs ----------------------------------------------------------------------

def model_class(entry: ZooEntry) -> Any:
    import transformers

    try:
        return getattr(transformers, entry.class_name)
    except AttributeError as exc:
        if isinstance(exc.__cause__, ImportError) or "requires" in str(exc):
            raise ZooSkip("missing_dependency", f"{entry.class_name}: {root_message(exc)}") from exc
        raise ZooSkip("remote_code", f"transformers {transformers_version()} defines no {entry.class_name}") from exc
    except ImportError as exc:
        raise ZooSkip("missing_dependency", f"{entry.class_name}: {root_message(exc)}") from exc


def check_inputs(cls: Any, entry: ZooEntry) -> None:
    """The zoo feeds token ids (and a decoder's); a forward that needs more is skipped."""
    params = inspect.signature(cls.forward).parameters
    if "input_ids" not in params:
        raise ZooSkip("non_text_inputs", f"{entry.class_name}.forward takes {', '.join(list(params)[1:6])}, "
                                         "no input_ids")
    required = [n for n, p in params.items() if n not in ("self", "input_ids") and p.default is inspect.Parameter.empty
                and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if required:
        raise ZooSkip("required_inputs", f"{entry.class_name}.forward requires {', '.join(required)}")


def parameter_bytes(cls: Any, config: Any, dtype: Any) -> int:
    """Parameter bytes at `dtype`, from a build on the meta device (allocates nothing)."""
    import torch

    with torch.device("meta"):
        model = cls(config)
    return sum(p.numel() for p in model.parameters()) * torch.empty((), dtype=dtype).element_size()


def device_memory_bytes(device: str) -> int | None:
    import os

    import torch

    if device.startswith("cuda"):
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(cls: Any, config: Any, ctx: WorkloadContext, entry: ZooEntry) -> None:
    """Full-size defaults include 100 B+ MoEs: skip those whose weights cannot fit at all."""
    total = device_memory_bytes(ctx.device)
    if total is None:
        return
    need = parameter_bytes(cls, config, ctx.dtype)
    if need > 0.9 * total:
        raise ZooSkip("exceeds_memory", f"{entry.class_name} at its default config has {need / 2**30:.1f} GiB of "
                                        f"parameters; {ctx.device} has {total / 2**30:.1f} GiB")


def text_config(config: Any) -> Any:
    getter = getattr(config, "get_text_config", None)
    return getter(decoder=True) if getter else config


def vocab_limit(config: Any) -> int:
    """The smallest vocabulary among the config's (source, target, decoder, text) ones."""
    sizes = []
    for cfg in (config, text_config(config)):
        for key, value in cfg.to_dict().items():
            if is_vocab_key(key) and isinstance(value, int) and value > 0:
                sizes.append(value)
    if not sizes:
        raise ValueError(f"{type(config).__name__} names no vocab_size: the zoo cannot draw token ids for it")
    return min(sizes)


def special_ids(config: Any) -> set[int]:
    ids: set[int] = set()
    for cfg in (config, text_config(config)):
        for key, value in cfg.to_dict().items():
            if key.endswith(TOKEN_ID_SUFFIXES):
                for v in value if isinstance(value, list) else [value]:
                    if isinstance(v, int) and not isinstance(v, bool):
                        ids.add(v)
    return ids


def position_limit(config: Any) -> int | None:
    for cfg in (text_config(config), config):
        for key in POSITION_KEYS:
            value = getattr(cfg, key, None)
            if isinstance(value, int) and value > 0:
                return value
    return None


def token_ids(shape: tuple[int, int], config: Any, generator: Any) -> Any:
    """Random ids that are no special token (an image token id would ask for pixels)."""
    import torch

    vocab = vocab_limit(config)
    specials = special_ids(config)
    low = next((i for i in range(vocab) if i not in specials and i > 0), 0)
    ids = torch.randint(low, vocab, shape, generator=generator)
    for special in specials:
        if low < special < vocab:
            ids[ids == special] = low
    return ids


def make_inputs(entry: ZooEntry, config: Any, ctx: WorkloadContext, seq_len: int) -> dict[str, Any]:
    import torch

    gen = torch.Generator().manual_seed(torch.initial_seed())
    shape = (ctx.batch_size, seq_len)
    input_ids = token_ids(shape, config, gen)
    inputs = {"input_ids": input_ids, "attention_mask": torch.ones(shape, dtype=torch.long)}
    if entry.head == "seq2seq":
        decoder_ids = token_ids(shape, config, gen)
        inputs["decoder_input_ids"] = decoder_ids
        inputs["labels"] = decoder_ids.clone()
    else:
        inputs["labels"] = input_ids.clone()
    return {k: v.to(ctx.device) for k, v in inputs.items()}


def zoo_seq_len(ctx: WorkloadContext, config: Any) -> int:
    unknown = sorted(set(ctx.options) - set(OPTION_NAMES))
    if unknown:
        raise ZooOptionError(f"unknown zoo option(s) {unknown}; known options: {', '.join(OPTION_NAMES)}")
    raw = ctx.options.get("seq_len", DEFAULT_SEQ_LEN[ctx.size])
    try:
        seq_len = int(raw)
    except (TypeError, ValueError):
        raise ZooOptionError(f"option seq_len={raw!r} is not an integer; pass e.g. seq_len=128") from None
    if seq_len < 1:
        raise ZooOptionError(f"option seq_len={seq_len} must be at least 1")
    limit = position_limit(config)
    return min(seq_len, limit) if limit else seq_len


# model types whose LM head still wants what the zoo does not build (their forward signature
# does not say so: the inputs are optional there and the forward fails without them)
NON_TEXT_MODEL_TYPES: dict[str, str] = {
    "git": "pixel_values (GIT generates text from an image)",
    "musicgen": "audio codebook ids (batch x codebooks rows)",
    "musicgen_melody": "audio codebook ids (batch x codebooks rows)",
    "voxtral_realtime": "input_features (audio)",
    "nemo_speechlm": "audio features",
}
# one-line fixes a model needs before its first forward
POST_BUILD: dict[str, Callable[[Any], None]] = {
    "xmod": lambda model: model.set_default_language(model.config.languages[0]),  # adapters are per language
}


def config_for_class(cls: Any, config: Any) -> Any:
    """The config the head class takes: a composite (vision + text) config's text part when
    the mapping names a text-only class (Qwen3_5ForCausalLM under model type qwen3_5)."""
    wanted = getattr(cls, "config_class", None)
    if wanted is None or isinstance(config, wanted):
        return config
    text = text_config(config)
    return text if isinstance(text, wanted) else config


def build_entry(entry: ZooEntry, ctx: WorkloadContext) -> Built:
    """The case: the model at `ctx.size` on `ctx.device` and its token inputs."""
    import torch

    if entry.model_type in NON_TEXT_MODEL_TYPES:
        raise ZooSkip("non_text_inputs", f"{entry.class_name} needs {NON_TEXT_MODEL_TYPES[entry.model_type]}")
    cls = model_class(entry)
    config = config_for_class(cls, zoo_config(entry, ctx.size))
    check_inputs(cls, entry)
    if ctx.size == "full":
        check_fits(cls, config, ctx, entry)
    seq_len = zoo_seq_len(ctx, config)
    try:
        with torch.device(ctx.device):
            model = cls._from_config(config, dtype=ctx.dtype)
    except ImportError as exc:  # a sub-module's backend (gemma3n's vision tower needs timm)
        raise ZooSkip("missing_dependency", f"{entry.class_name}: {root_message(exc)}") from exc
    if entry.model_type in POST_BUILD:
        POST_BUILD[entry.model_type](model)
    inputs = make_inputs(entry, config, ctx, seq_len)
    return Built(model=model, kwargs=inputs, units_per_call=float(ctx.batch_size),
                 extras={"seq_len": seq_len, "class": entry.class_name, "model_type": entry.model_type})


def make_factory(entry: ZooEntry) -> Callable[[WorkloadContext], Built]:
    def factory(ctx: WorkloadContext) -> Built:
        return build_entry(entry, ctx)

    factory.__doc__ = f"transformers {entry.class_name} ({entry.head} LM head), random weights"
    return factory


def register_zoo() -> list[str]:
    """One workload per zoo entry (cheap: no model class is imported here)."""
    names = []
    for entry in zoo_entries():
        workload(entry.workload, unit="samples", batch_size=BATCH_SIZE, scenarios=("forward", "train"),
                 description=f"transformers {entry.class_name} ({entry.head} LM), zoo", options=OPTIONS)(
            make_factory(entry))
        names.append(entry.workload)
    return names


ZOO_WORKLOADS = tuple(register_zoo())
ENTRIES_BY_WORKLOAD = {e.workload: e for e in zoo_entries()}

# per case: a tiny model compiles in well under a minute on a CPU; a full-size default
# config (7 B+) builds and compiles in minutes on a GPU
TINY_POLICY = (("min_time_s", 0.2), ("min_samples", 5), ("max_samples", 200), ("warmup", 2), ("max_time_s", 3.0))
# a tiny case peaks well under 1 GiB of RSS; the cap (virtual memory, with Inductor's compile
# workers) stops a shrink that failed to shrink before it takes the box down
TINY_MEMORY_GB = 8.0
FULL_POLICY = (("min_time_s", 1.0), ("min_samples", 10), ("max_samples", 200), ("warmup", 3), ("max_time_s", 15.0))

if ZOO_WORKLOADS:
    register_suite(Suite(
        "transformers-zoo-tiny",
        f"every causal/masked/seq2seq LM architecture of the installed transformers ({len(ZOO_WORKLOADS)} here), "
        "tiny configs on CPU, forward and train step, eager vs inductor",
        entries=(SuiteEntry(workloads=ZOO_WORKLOADS, scenarios=("forward", "train"), compilers=("eager", "inductor"),
                            devices=("cpu",), dtypes=("float32",), sizes=("tiny",)),),
        policy=TINY_POLICY,
        timeout_s=300.0,
        max_memory_gb=TINY_MEMORY_GB,
    ))
    register_suite(Suite(
        "transformers-zoo",
        f"every causal/masked/seq2seq LM architecture of the installed transformers ({len(ZOO_WORKLOADS)} here) at "
        "its config defaults on one GPU in bf16, forward and train step, eager vs inductor",
        entries=(SuiteEntry(workloads=ZOO_WORKLOADS, scenarios=("forward", "train"), compilers=("eager", "inductor"),
                            devices=("cuda",), dtypes=("bfloat16",), sizes=("full",)),),
        policy=FULL_POLICY,
        timeout_s=900.0,
    ))
