"""LLM workloads (transformers causal LMs) and the scenarios LLM people measure.

Models are built from the JSON configs shipped in `suites/configs/llm/` with random
weights (`AutoModelForCausalLM.from_config`): nothing is downloaded, `trust_remote_code` is
never set. `size=full` is the real architecture (Llama-3.1-8B: 8.03 B parameters), `size=tiny`
the same architecture with 2 layers and small widths, compiling on a CPU in seconds. The
workload option `weights=/local/dir` loads real weights with `local_files_only=True`.

Scenarios (one worker "call" each):
- `prefill`: forward over batch x prompt_len, last-position logits and the first token.
- `decode`: `new_tokens` greedy steps against a static KV cache in the harness's own loop
  around the (compiled) model step, not `generate`, so the timed step holds nothing else.
  The cache is rewound to the prompt before every call, so every call decodes the same
  tokens from the same state; any recompile after the first call is a `fail_compile`.
- `generate`: `model.generate(cache_implementation="static")`, compiled through the
  generation config (`compile_config`); the eager baseline sets `disable_compile`.
- `llm-train`: the built-in train step (forward with labels, backward, AdamW) plus token
  metrics.

Token-level figures (TTFT, TPOT median/p90, tokens/s, bandwidth utilisation) come from the
scenario's own per-token marks (device events on accelerators) and are summarised when the
worker collects the record's metrics, after the timed rounds (`LazyMetrics`).
"""

from __future__ import annotations

import functools
import inspect
import json
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler import COMPILERS, CompilerConfig, register_compiler
from harness import Built, Prepared, WorkloadContext, scenario, workload
from harness.model.errors import UserError
from harness.model.scenarios import train as builtin_train

from . import Suite, SuiteEntry, extend_suite, register_suite

CONFIG_DIR = Path(__file__).resolve().parent / "configs" / "llm"
UNIT = "tokens"
INFERENCE_SCENARIOS = ("prefill", "decode", "generate")
TRAIN_SCENARIOS = INFERENCE_SCENARIOS + ("llm-train",)

# Defaults per size: what people benchmark on a GPU (1 x 512 prompt), tiny on a CPU.
DEFAULT_OPTIONS: dict[str, dict[str, int]] = {
    "tiny": {"prompt_len": 32, "new_tokens": 8},
    "full": {"prompt_len": 512, "new_tokens": 64},
}
KNOWN_OPTIONS = ("prompt_len", "new_tokens", "weights")

# Calls whose token marks are discarded: the first (compile) and CUDA-graph warm-up.
TOKEN_WARMUP_CALLS = 3
# Calls whose marks are kept (most recent): bounds memory on long runs.
TOKEN_KEEP_CALLS = 256

class LLMOptionError(UserError, ValueError):
    """A bad workload option (prompt length, weights path, ...); the message says the fix."""


# ---- models ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Family:
    name: str  # workload name
    config: str  # file stem under CONFIG_DIR; the tiny variant is "<stem>-tiny"
    description: str
    scenarios: tuple[str, ...] = INFERENCE_SCENARIOS


FAMILIES: tuple[Family, ...] = (
    Family("llama-3.1-8b", "llama-3.1-8b", "Llama-3.1-8B (8.03 B params, GQA, llama3 RoPE)"),
    Family("gemma-2b", "gemma-2b", "Gemma-2B (2.51 B params, multi-query attention)"),
    Family("qwen2.5-0.5b", "qwen2.5-0.5b", "Qwen2.5-0.5B (494 M params)", TRAIN_SCENARIOS),
    Family("gpt2", "gpt2", "GPT-2 (124 M params, learned positions)", TRAIN_SCENARIOS),
    Family("mistral-7b", "mistral-7b", "Mistral-7B-v0.3 (7.25 B params, GQA)"),
)


def config_path(family: Family, size: str) -> Path:
    return CONFIG_DIR / (f"{family.config}-tiny.json" if size == "tiny" else f"{family.config}.json")


def load_config_dict(path: Path) -> dict[str, Any]:
    """The shipped config without our own `_`-prefixed annotations."""
    data = json.loads(path.read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def build_config(data: Mapping[str, Any]) -> Any:
    """A transformers config from a config.json dict. Dropout is switched off: compiled and
    eager training steps must be comparable, and inference never uses it."""
    from transformers import AutoConfig

    data = dict(data)
    model_type = data.pop("model_type")
    for key, value in list(data.items()):
        if isinstance(value, float) and (key.endswith("dropout") or key.endswith("pdrop")):
            data[key] = 0.0
    return AutoConfig.for_model(model_type, **data)


def build_model(config: Any, device: str, dtype: Any, weights: str | None = None) -> Any:
    """Random weights from `config`, created directly on `device` (an 8 B model initialises
    in seconds on a GPU, minutes on a CPU); or real weights from a local directory."""
    import torch
    from transformers import AutoModelForCausalLM

    if weights:
        path = Path(weights)
        if not (path / "config.json").is_file():
            raise LLMOptionError(f"weights={weights}: no config.json there; pass a local model directory "
                                 "(as written by save_pretrained)")
        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, trust_remote_code=False,
                                                     dtype=dtype)
        return model.to(device).eval()
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def count_parameters(model: Any) -> int:
    """Unique parameters (tied embeddings count once)."""
    return int(sum(p.numel() for p in model.parameters()))


def llm_options(ctx: WorkloadContext) -> dict[str, Any]:
    """Workload options merged over the size's defaults, validated."""
    unknown = sorted(set(ctx.options) - set(KNOWN_OPTIONS))
    if unknown:
        raise LLMOptionError(f"unknown LLM option(s) {unknown}; known options: {', '.join(KNOWN_OPTIONS)}")
    opts: dict[str, Any] = {**DEFAULT_OPTIONS[ctx.size], **ctx.options}
    for key in ("prompt_len", "new_tokens"):
        try:
            opts[key] = int(opts[key])
        except (TypeError, ValueError):
            raise LLMOptionError(f"option {key}={opts[key]!r} is not an integer; pass e.g. {key}=512") from None
        if opts[key] < 1:
            raise LLMOptionError(f"option {key}={opts[key]} must be at least 1")
    return opts


def make_factory(family: Family) -> Callable[[WorkloadContext], Built]:
    def factory(ctx: WorkloadContext) -> Built:
        import torch

        opts = llm_options(ctx)
        config = build_config(load_config_dict(config_path(family, ctx.size)))
        limit = getattr(config, "max_position_embeddings", None)
        needed = opts["prompt_len"] + opts["new_tokens"]
        if limit is not None and needed > limit:
            raise LLMOptionError(f"{family.name}: prompt_len + new_tokens = {needed} exceeds the model's "
                                 f"{limit} positions; lower prompt_len or new_tokens")
        model = build_model(config, ctx.device, ctx.dtype, opts.get("weights"))
        # token ids avoid the special ids at the bottom of the vocabulary
        vocab = int(model.config.vocab_size)
        prompt = torch.randint(3, vocab, (ctx.batch_size, opts["prompt_len"]), device=ctx.device)
        return Built(
            model=model,
            kwargs={"input_ids": prompt, "labels": prompt},  # what the train step calls
            extras={"prompt": prompt, "options": opts, "family": family.name},
            units_per_call=float(prompt.numel()),
        )

    factory.__name__ = f"build_{family.name.replace('.', '_').replace('-', '_')}"
    factory.__doc__ = f"{family.description}, random weights from suites/configs/llm/{family.config}*.json"
    return factory


for _family in FAMILIES:
    workload(_family.name, unit=UNIT, batch_size=1, scenarios=_family.scenarios,
             description=_family.description)(make_factory(_family))


# ---- token clocks and lazily summarised metrics ----------------------------------------

class TokenClock:
    """Per-call lists of time marks (one per token). Device events on accelerators (the GPU's
    own clock, no sync in the loop), `perf_counter_ns` on the host. The first
    `skip_calls` calls are warm-up (compile, CUDA-graph recording) and keep no marks."""

    def __init__(self, device: str, *, host: bool = False, skip_calls: int = TOKEN_WARMUP_CALLS,
                 keep_calls: int = TOKEN_KEEP_CALLS):
        self.events = device.startswith("cuda") and not host
        self.skip_calls = skip_calls
        self.calls = 0
        self.runs: deque[list[Any]] = deque(maxlen=keep_calls)
        self._current: list[Any] | None = None

    def start_call(self) -> None:
        self.calls += 1
        self._current = [] if self.calls > self.skip_calls else None
        if self._current is not None:
            self.runs.append(self._current)

    def mark(self) -> None:
        if self._current is None:
            return
        if self.events:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._current.append(event)
        else:
            self._current.append(time.perf_counter_ns())

    def intervals(self) -> list[list[float]]:
        """Seconds between consecutive marks, per kept call."""
        out = []
        for marks in self.runs:
            if len(marks) < 2:
                continue
            if self.events:
                marks[-1].synchronize()
                out.append([a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:], strict=False)])
            else:
                out.append([(b - a) / 1e9 for a, b in zip(marks, marks[1:], strict=False)])
        return out


class LazyMetrics(Mapping):
    """Scenario metrics whose token-level part is computed when first read. The worker reads
    a scenario's metrics once, after the timed rounds and the memory pass, so summaries
    cover every timed call without any bookkeeping inside the timed loop."""

    def __init__(self, static: dict[str, Any], compute: Callable[[], dict[str, Any]]):
        self._static = static
        self._compute = compute
        self._values: dict[str, Any] | None = None

    def _resolved(self) -> dict[str, Any]:
        if self._values is None:
            try:
                computed = self._compute()
            except Exception as exc:  # a summary must never lose the record
                computed = {"token_metrics_error": f"{type(exc).__name__}: {exc}"}
            self._values = {**self._static, **computed}
        return self._values

    def __getitem__(self, key: str) -> Any:
        return self._resolved()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolved())

    def __len__(self) -> int:
        return len(self._resolved())


def percentiles(values: list[float]) -> dict[str, float | None]:
    import numpy as np

    if not values:
        return {"median": None, "p90": None, "n": 0}
    arr = np.asarray(values, dtype=float)
    return {"median": float(np.median(arr)), "p90": float(np.percentile(arr, 90)), "n": int(arr.size)}


# ---- shared scenario plumbing ---------------------------------------------------------

def cache_kwarg(model: Any) -> str:
    """transformers renamed `past_key_values` to `cache` (5.2x); pass whichever it takes."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def new_static_cache(model: Any, max_cache_len: int) -> Any:
    from harness.measure.capabilities import require

    require("static_cache")  # older transformers: a different constructor, the case is skipped
    from transformers import StaticCache

    return StaticCache(config=model.config, max_cache_len=max_cache_len)


def static_decode_step(model: Any, prompt: Any, max_cache_len: int) -> tuple[Any, Any, Callable[[Any, Any], tuple[Any, Any]]]:
    """The decode setup: (cache, first_token, step). A static KV cache of `max_cache_len`
    prefilled eagerly with `prompt`, the greedy token that prefill gives, and the step that
    decodes one position into that cache (model forward + argmax, returning (token, logits)).
    The decode scenario builds its variants with it, and so do benchmarks/llm_decode_overhead.py
    and benchmarks/gpu/decode_profile.py, so they measure the very step the harness measures."""
    import torch

    kw = cache_kwarg(model)
    cache = new_static_cache(model, max_cache_len)
    with torch.no_grad():
        first_token = model(input_ids=prompt, use_cache=True, **{kw: cache}).logits[:, -1, :].argmax(-1, keepdim=True)

    def step(token: Any, position: Any) -> tuple[Any, Any]:
        logits = model(input_ids=token, position_ids=position, use_cache=True, **{kw: cache}).logits[:, -1, :]
        return logits.argmax(-1, keepdim=True), logits

    return cache, first_token, step


def peak_bandwidth(device: str) -> tuple[float | None, str]:
    """(bytes/s, source) of the device's peak memory bandwidth, from the one table of vendor
    peaks (harness.measure.device_specs, through the device's `peak_specs()`); None for CPUs
    and for parts the table does not know (never guessed)."""
    from harness.measure.devices import parse_device

    dev = parse_device(device)
    specs = dev.peak_specs()
    bandwidth = (specs or {}).get("memory_bandwidth_bytes_s")
    if bandwidth:
        return float(bandwidth), f"harness.measure.device_specs ({specs['part']}: {specs['source']})"  # type: ignore[index]
    if dev.type == "cpu":
        return None, "unknown for this device"
    return None, f"unknown device {dev.name()!r} (not in harness/measure/device_specs.py)"


def bandwidth_for_name(gpu_name: str) -> float | None:
    """Peak bytes/s for a device name as torch reports it (device_specs' table), or None."""
    from harness.measure.device_specs import match_peak_spec

    spec = match_peak_spec(gpu_name)
    return spec.memory_bandwidth_gb_s * 1e9 if spec else None


def model_facts(model: Any, built: Built, ctx: WorkloadContext) -> dict[str, Any]:
    import transformers

    opts = built.extras["options"]
    return {
        "param_count": count_parameters(model),
        "model_class": type(model).__name__,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "prompt_len": opts["prompt_len"],
        "new_tokens": opts["new_tokens"],
        "weights": opts.get("weights") or "random",
        "transformers_version": transformers.__version__,
    }


def weight_bytes_per_token(model: Any) -> int:
    """Weight bytes one decode step reads: every parameter once, except an input embedding
    table that is not tied to the output head (only a few rows of it are read)."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    emb, head = model.get_input_embeddings(), model.get_output_embeddings()
    if emb is not None and (head is None or emb.weight.data_ptr() != head.weight.data_ptr()):
        total -= emb.weight.numel() * emb.weight.element_size()
    return int(total)


def kv_cache_bytes(cache: Any) -> int:
    """Bytes of the allocated static KV cache: SDPA over a static cache reads all of it."""
    total = 0
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if tensor is not None and hasattr(tensor, "numel"):
                total += tensor.numel() * tensor.element_size()
    return int(total)


def compiled_frames() -> int:
    import torch._dynamo.utils as dutils

    return len(dutils.get_compilation_metrics())


def compare_tokens_and_logits(reference: Any, result: Any, dtype_name: str) -> dict[str, Any]:
    """Greedy tokens must match exactly in fp32/fp64 (the issue's accuracy bar); in half
    precision a flipped near-tie is legitimate, so tokens are reported and logits decide."""
    from harness.model.accuracy import compare_outputs

    ref_tokens, res_tokens = reference["tokens"].cpu(), result["tokens"].cpu()
    outcome = compare_outputs(reference["logits"], result["logits"], dtype_name) if "logits" in reference else {
        "status": "pass", "reason": ""}
    same = ref_tokens.shape == res_tokens.shape and bool((ref_tokens == res_tokens).all())
    outcome["tokens_match"] = same
    outcome["tokens_compared"] = int(ref_tokens.numel())
    if not same:
        diff = (ref_tokens != res_tokens).nonzero() if ref_tokens.shape == res_tokens.shape else None
        where = f" first at (sequence, step) {tuple(diff[0].tolist())}" if diff is not None and len(diff) else ""
        outcome["tokens_diverge_at"] = where.strip()
        if dtype_name in ("float32", "float64") and outcome["status"] != "fail":
            outcome.update(status="fail", reason=f"greedy tokens differ from eager{where}")
    return outcome


def wants_step_marks(compiler: CompilerConfig) -> bool:
    return not compiler.is_eager


# ---- prefill ----------------------------------------------------------------------------

@scenario("prefill")
def prefill(built: Built, wl: Any, compiler: CompilerConfig, ctx: WorkloadContext) -> Prepared:
    """Forward over the whole prompt, last-position logits and the first greedy token: one
    call is time to first token. The KV cache is not written (`use_cache=False`)."""
    import torch

    model, prompt = built.model, built.extras["prompt"]

    def step(ids: Any) -> tuple[Any, Any]:
        logits = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[:, -1, :]
        return logits.argmax(-1), logits

    compiled_step = None if compiler.is_eager else compiler.compile(step)
    clocks = {"eager": TokenClock(ctx.device), "compiled": TokenClock(ctx.device)}

    def make_call(fn: Callable, clock: TokenClock, mark_step: bool) -> Callable[[], dict[str, Any]]:
        def call() -> dict[str, Any]:
            with torch.no_grad():
                if mark_step:
                    torch.compiler.cudagraph_mark_step_begin()
                clock.start_call()
                clock.mark()
                token, logits = fn(prompt)
                clock.mark()
            return {"tokens": token, "logits": logits}

        return call

    def token_metrics() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for variant, clock in clocks.items():
            ttft = percentiles([sum(run) for run in clock.intervals()])
            if ttft["n"]:
                prefix = "" if variant == _measured(compiler) else "eager_"
                out[f"{prefix}ttft_s_median"] = ttft["median"]
                out[f"{prefix}ttft_s_p90"] = ttft["p90"]
                out[f"{prefix}prefill_tokens_per_s"] = prompt.numel() / ttft["median"]
        return out

    static = {**model_facts(model, built, ctx), "scenario_kind": "prefill", "tokens_per_call": int(prompt.numel())}
    return Prepared(
        eager=make_call(step, clocks["eager"], False),
        compiled=make_call(compiled_step, clocks["compiled"], True) if compiled_step else None,
        units_per_call=float(prompt.numel()),
        unit=UNIT,
        compare=compare_tokens_and_logits,
        metrics=LazyMetrics(static, token_metrics),  # type: ignore[arg-type]
        notes=["prefill: logits of the last position only, KV cache not written (use_cache=False)"],
    )


def _measured(compiler: CompilerConfig) -> str:
    """Which variant the record's headline metrics describe (the worker's convention)."""
    return "eager" if compiler.is_eager else "compiled"


# ---- decode -------------------------------------------------------------------------------

class PerStepRecompileError(RuntimeError):
    """The compiled decode step kept recompiling as tokens advanced."""


@dataclass
class DecodeLoop:
    """The harness's decode loop: `new_tokens` greedy steps of `step(token, position)` from
    the prefilled state. Each call rewinds the static cache to the prompt, so calls are
    identical and the cache never overflows. `on_step` watches the first call only."""

    step: Callable[[Any, Any], tuple[Any, Any]]
    cache: Any
    first_token: Any  # [batch, 1], from the prefill
    prompt_len: int
    new_tokens: int
    clock: TokenClock
    mark_cudagraph_step: bool = False
    on_step: Callable[[int], None] | None = None
    after_first_call: Callable[[], None] | None = None
    calls: int = 0
    token: Any = field(init=False)
    position: Any = field(init=False)
    out: Any = field(init=False)

    def __post_init__(self) -> None:
        import torch

        batch = self.first_token.shape[0]
        self.token = self.first_token.clone()
        self.position = torch.full((batch, 1), self.prompt_len, dtype=torch.long, device=self.first_token.device)
        self.out = torch.zeros((batch, self.new_tokens), dtype=torch.long, device=self.first_token.device)
        # fixed addresses: CUDA graphs read these in place instead of copying them each step
        torch._dynamo.mark_static_address(self.token)
        torch._dynamo.mark_static_address(self.position)

    def rewind(self) -> None:
        for layer in getattr(self.cache, "layers", []):
            length = getattr(layer, "cumulative_length", None)
            if hasattr(length, "fill_"):
                length.fill_(self.prompt_len)
        self.position.fill_(self.prompt_len)
        self.token.copy_(self.first_token)

    def __call__(self) -> dict[str, Any]:
        import torch

        watch = self.on_step if self.calls == 0 else None
        with torch.no_grad():
            self.rewind()
            self.clock.start_call()
            self.clock.mark()
            first_logits = None
            for i in range(self.new_tokens):
                if self.mark_cudagraph_step:
                    torch.compiler.cudagraph_mark_step_begin()
                nxt, logits = self.step(self.token, self.position)
                if i == 0:
                    first_logits = logits.clone()  # CUDA graphs overwrite outputs next step
                self.token.copy_(nxt)
                self.out[:, i : i + 1].copy_(nxt)
                self.position.add_(1)
                self.clock.mark()
                if watch is not None:
                    watch(i)
        self.calls += 1
        if self.calls == 1 and self.after_first_call is not None:
            self.after_first_call()
        return {"tokens": self.out.clone(), "logits": first_logits}


class RecompileWatch:
    """Counts compiled frames per step of the compiled variant's first call. A compile at
    step 0 is the cold compile, one at step 1 is tolerated as warm-up; anything later means
    the step recompiles as tokens advance, which `check` turns into a failure."""

    def __init__(self) -> None:
        self.base = compiled_frames()
        self.by_step: list[int] = []

    def __call__(self, step: int) -> None:
        self.by_step.append(compiled_frames())

    def check(self) -> None:
        late = [i for i in range(2, len(self.by_step)) if self.by_step[i] > self.by_step[i - 1]]
        if late:
            raise PerStepRecompileError(
                f"the compiled decode step recompiled at step(s) {late[:10]} of the first call "
                f"({self.by_step[-1] - self.base} compiled frames in {len(self.by_step)} steps): a per-token "
                "recompile; see the record's recompile_reasons")


@scenario("decode")
def decode(built: Built, wl: Any, compiler: CompilerConfig, ctx: WorkloadContext) -> Prepared:
    """Greedy decode of `new_tokens` tokens per call against a static KV cache, one compiled
    step per token (model forward + argmax), in the harness's own loop."""
    import torch

    model, prompt, opts = built.model, built.extras["prompt"], built.extras["options"]
    max_len = opts["prompt_len"] + opts["new_tokens"]
    # one cache per variant, both prefilled eagerly from the same prompt: identical starting states
    eager_cache, first_token, eager_step = static_decode_step(model, prompt, max_len)
    compiled_cache, _, compiled_step = static_decode_step(model, prompt, max_len)

    clocks = {"eager": TokenClock(ctx.device), "compiled": TokenClock(ctx.device)}
    eager_loop = DecodeLoop(eager_step, eager_cache, first_token, opts["prompt_len"],
                            opts["new_tokens"], clocks["eager"])
    compiled_loop = None
    watch = None
    if not compiler.is_eager:
        watch = RecompileWatch()

        def first_call_done() -> None:
            watch.check()
            # from here on any recompile raises (torch._dynamo RecompileError -> fail_compile)
            torch._dynamo.config.error_on_recompile = True

        compiled_loop = DecodeLoop(compiler.compile(compiled_step), compiled_cache, first_token,
                                   opts["prompt_len"], opts["new_tokens"], clocks["compiled"],
                                   mark_cudagraph_step=True, on_step=watch, after_first_call=first_call_done)

    bandwidth, bandwidth_source = peak_bandwidth(ctx.device)
    weight_bytes = weight_bytes_per_token(model)
    kv_bytes = kv_cache_bytes(eager_cache)
    batch = int(prompt.shape[0])

    def token_metrics() -> dict[str, Any]:
        out: dict[str, Any] = {}
        if watch is not None:
            out["decode_first_call_compiled_frames_by_step"] = [n - watch.base for n in watch.by_step]
        for variant, clock in clocks.items():
            tpot = percentiles([s for run in clock.intervals() for s in run])
            if not tpot["n"]:
                continue
            prefix = "" if variant == _measured(compiler) else "eager_"
            out[f"{prefix}tpot_s_median"] = tpot["median"]
            out[f"{prefix}tpot_s_p90"] = tpot["p90"]
            out[f"{prefix}tpot_samples"] = tpot["n"]
            out[f"{prefix}decode_tokens_per_s"] = batch / tpot["median"]
            achieved = (weight_bytes + kv_bytes) / tpot["median"]
            out[f"{prefix}achieved_bandwidth_bytes_s"] = achieved
            if bandwidth:
                out[f"{prefix}bandwidth_utilisation"] = achieved / bandwidth
        return out

    static = {
        **model_facts(model, built, ctx),
        "scenario_kind": "decode",
        "tokens_per_call": batch * opts["new_tokens"],
        "weight_bytes_per_step": weight_bytes,
        "kv_cache_bytes_per_step": kv_bytes,
        "peak_bandwidth_bytes_s": bandwidth,
        "peak_bandwidth_source": bandwidth_source,
    }
    notes = [f"decode: {opts['new_tokens']} greedy steps per call from a {opts['prompt_len']}-token prompt, "
             "static KV cache rewound every call"]
    return Prepared(
        eager=eager_loop,
        compiled=compiled_loop,
        units_per_call=float(batch * opts["new_tokens"]),
        unit=UNIT,
        compare=compare_tokens_and_logits,
        metrics=LazyMetrics(static, token_metrics),  # type: ignore[arg-type]
        notes=notes,
    )


# ---- generate -----------------------------------------------------------------------------

class StreamTimes:
    """A `generate` streamer that marks the host clock at every new token. `generate` hands
    the streamer CPU copies, so each put() follows a device sync: host time is device time."""

    def __init__(self, clock: TokenClock):
        self.clock = clock
        self.prompt_seen = False

    def begin(self) -> None:
        self.prompt_seen = False
        self.clock.start_call()
        self.clock.mark()

    def put(self, value: Any) -> None:
        if self.prompt_seen:
            self.clock.mark()
        self.prompt_seen = True  # the first put is the prompt

    def end(self) -> None:
        return None


def generation_config(model: Any, new_tokens: int, compiler: CompilerConfig | None, device: str) -> Any:
    """Greedy, exactly `new_tokens` tokens, static cache. `compiler=None` is the eager
    baseline: `disable_compile`, because generate auto-compiles static-cache forwards on
    CUDA otherwise. Otherwise the forward is compiled through `compile_config`."""
    from harness.measure.capabilities import require

    require("generation_compile_config")
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import CompileConfig

    cfg = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                           cache_implementation="static", pad_token_id=0, eos_token_id=None,
                           bos_token_id=model.config.bos_token_id)
    if compiler is None:
        cfg.disable_compile = True
        return cfg
    compile_config = CompileConfig(fullgraph=compiler.fullgraph, dynamic=compiler.dynamic, backend=compiler.backend,
                                   mode=compiler.mode or "default", options=compiler.options_dict() or None)
    if not device.startswith("cuda"):
        compile_config._compile_all_devices = True  # generate only auto-compiles on accelerators otherwise
    cfg.compile_config = compile_config
    return cfg


@scenario("generate")
def generate(built: Built, wl: Any, compiler: CompilerConfig, ctx: WorkloadContext) -> Prepared:
    """End-to-end `model.generate` of `new_tokens` greedy tokens with a static cache."""
    import torch

    model, prompt, opts = built.model, built.extras["prompt"], built.extras["options"]
    attention_mask = torch.ones_like(prompt)
    clocks = {"eager": TokenClock(ctx.device, host=True), "compiled": TokenClock(ctx.device, host=True)}
    eager_frames: list[int] = []

    def make_call(cfg: Any, clock: TokenClock, variant: str) -> Callable[[], dict[str, Any]]:
        streamer = StreamTimes(clock)

        def call() -> dict[str, Any]:
            before = compiled_frames()
            streamer.begin()
            with torch.no_grad():
                out = model.generate(input_ids=prompt, attention_mask=attention_mask, generation_config=cfg,
                                     streamer=streamer)
            if variant == "eager" and not eager_frames:
                eager_frames.append(compiled_frames() - before)
                if eager_frames[0]:
                    raise RuntimeError(f"the eager generate baseline compiled {eager_frames[0]} frame(s): "
                                       "disable_compile did not hold, the baseline is not eager")
            return {"tokens": out[:, prompt.shape[1]:]}

        return call

    eager_cfg = generation_config(model, opts["new_tokens"], None, ctx.device)
    compiled_call = None
    if not compiler.is_eager:
        compiled_call = make_call(generation_config(model, opts["new_tokens"], compiler, ctx.device),
                                  clocks["compiled"], "compiled")
    batch = int(prompt.shape[0])

    def token_metrics() -> dict[str, Any]:
        out: dict[str, Any] = {"eager_generate_compiled_frames": eager_frames[0] if eager_frames else None}
        for variant, clock in clocks.items():
            runs = clock.intervals()
            if not runs:
                continue
            prefix = "" if variant == _measured(compiler) else "eager_"
            ttft = percentiles([run[0] for run in runs])
            tpot = percentiles([s for run in runs for s in run[1:]])
            e2e = percentiles([sum(run) for run in runs])
            out[f"{prefix}ttft_s_median"] = ttft["median"]
            out[f"{prefix}ttft_s_p90"] = ttft["p90"]
            out[f"{prefix}tpot_s_median"] = tpot["median"]
            out[f"{prefix}tpot_s_p90"] = tpot["p90"]
            if e2e["median"]:
                out[f"{prefix}e2e_tokens_per_s"] = batch * opts["new_tokens"] / e2e["median"]
        return out

    static = {**model_facts(model, built, ctx), "scenario_kind": "generate",
              "tokens_per_call": batch * opts["new_tokens"]}
    return Prepared(
        eager=make_call(eager_cfg, clocks["eager"], "eager"),
        compiled=compiled_call,
        units_per_call=float(batch * opts["new_tokens"]),
        unit=UNIT,
        compare=compare_tokens_and_logits,
        metrics=LazyMetrics(static, token_metrics),  # type: ignore[arg-type]
        notes=["generate: greedy, static cache, compiled via generation_config.compile_config; "
               "eager baseline with disable_compile=True"],
    )


# ---- train ------------------------------------------------------------------------------

@scenario("llm-train")
def llm_train(built: Built, wl: Any, compiler: CompilerConfig, ctx: WorkloadContext) -> Prepared:
    """The built-in train step (forward with labels, loss, backward, AdamW) on the prompt,
    plus the model facts and samples/s and tokens/s of each variant."""
    prepared = builtin_train(built, wl, compiler, ctx)
    prompt = built.extras["prompt"]
    clocks = {"eager": TokenClock(ctx.device), "compiled": TokenClock(ctx.device)}

    def timed(fn: Callable[[], Any] | None, clock: TokenClock) -> Callable[[], Any] | None:
        if fn is None:
            return None

        @functools.wraps(fn)
        def call() -> Any:
            clock.start_call()
            clock.mark()
            out = fn()
            clock.mark()
            return out

        return call

    def token_metrics() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for variant, clock in clocks.items():
            step = percentiles([sum(run) for run in clock.intervals()])
            if step["n"]:
                prefix = "" if variant == _measured(compiler) else "eager_"
                out[f"{prefix}train_samples_per_s"] = prompt.shape[0] / step["median"]
                out[f"{prefix}train_tokens_per_s"] = prompt.numel() / step["median"]
        return out

    prepared.eager = timed(prepared.eager, clocks["eager"])  # type: ignore[assignment]
    prepared.compiled = timed(prepared.compiled, clocks["compiled"])
    prepared.units_per_call = float(prompt.numel())
    prepared.unit = UNIT
    static = {**model_facts(built.model, built, ctx), "scenario_kind": "train", "tokens_per_sample": int(prompt.shape[1])}
    prepared.metrics = LazyMetrics({**prepared.metrics, **static}, token_metrics)  # type: ignore[assignment]
    return prepared


# ---- compilers and suites -----------------------------------------------------------------

REDUCE_OVERHEAD = "inductor-reduce-overhead"
if REDUCE_OVERHEAD not in COMPILERS:  # the compiler matrix may already define it
    register_compiler(CompilerConfig(REDUCE_OVERHEAD, mode="reduce-overhead",
                                     description="torch.compile mode='reduce-overhead' (CUDA graphs)"), replace=False)

SMOKE_WORKLOADS = ("llama-3.1-8b",)
# prefill, decode and generate of one tiny model; llm-train (a forward+backward+AdamW compile,
# the slowest on a CPU) stays out of smoke to keep its LLM part within 3 minutes
extend_suite("smoke", SuiteEntry(workloads=SMOKE_WORKLOADS, scenarios=INFERENCE_SCENARIOS, compilers=("inductor",)))

register_suite(
    Suite(
        "llm",
        "full-size LLMs on one GPU in bf16: prefill (1x512), decode (bs 1, 64 tokens), generate, "
        "train for GPT-2/Qwen2.5-0.5B; eager vs inductor vs reduce-overhead",
        entries=(
            SuiteEntry(workloads=tuple(f.name for f in FAMILIES), scenarios=INFERENCE_SCENARIOS,
                       compilers=("eager", "inductor", REDUCE_OVERHEAD), devices=("cuda",), dtypes=("bfloat16",),
                       sizes=("full",)),
            SuiteEntry(workloads=("gpt2", "qwen2.5-0.5b"), scenarios=("llm-train",), compilers=("eager", "inductor"),
                       devices=("cuda",), dtypes=("bfloat16",), sizes=("full",)),
        ),
        policy=(("min_time_s", 2.0), ("min_samples", 10), ("max_time_s", 60.0), ("warmup", 3)),
        timeout_s=900.0,
    )
)
