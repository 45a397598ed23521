"""The whole SDXL text-to-image loop as one workload: both text encoders, a 30-step
denoise with classifier-free guidance and the VAE decode, timed end to end in seconds per
image. It reproduces the structure of the diffusers "fast diffusion" tutorial's ladder
(fp32 eager -> bf16 -> SDPA -> torch.compile -> max-autotune with fused QKV and
channels_last -> CUDA graphs); the `sdxl-ladder` suite runs each rung as a named case.

Every model is built from a config shipped in `suites/configs/diffusion/` with random
weights: the UNet and VAE of `suites.diffusion`, the CLIP ViT-L text tower
(`sdxl_text_encoder.json`) and the OpenCLIP ViT-bigG text tower with its projection
(`sdxl_text_encoder_2.json`). Nothing is downloaded, so there is no tokenizer (its vocab
files would have to be downloaded): the prompt is a fixed sequence of token ids
(BOS, 16 ids drawn from the case seed, EOS, EOS padding to 77 as the SDXL tokenizer pads),
encoded by both text encoders the way `StableDiffusionXLPipeline.encode_prompt` does, and
handed to the real `StableDiffusionXLPipeline` as `prompt_embeds` / `pooled_prompt_embeds`.
The negative prompt is the pipeline's default (no negative prompt: zero embeddings).

What is compiled is what the tutorial compiles: the UNet (in place, or its repeated blocks
under a regional config) and `vae.decode`; the text encoders and the pipeline's Python loop
stay eager. The eager baseline of a compiled case runs the same pipeline under
`torch.compiler.set_stance("force_eager")`.

Workload options: those of `suites.diffusion` (resolution, steps, channels_last, fused_qkv,
cfg is always on) plus `attention`: `sdpa` (diffusers' default processor) or `vanilla`
(`set_default_attn_processor()`: matmul + softmax, the tutorial's first two rungs).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from compiler import CompilerConfig
from harness import workload
from harness.model.scenarios import Prepared, scenario
from harness.model.workloads import Built, Workload, WorkloadContext
from suites.diffusion import (
    CONFIG_DIR,
    OPTIONS,
    DiffusionOptionError,
    DiffusionOptions,
    build_model,
    load_config,
    make_scheduler,
    parameter_count,
    parse_options,
)
from suites.llm import LazyMetrics, TokenClock

from . import DIFFUSERS_BUILD

PRELOAD_MODULES = DIFFUSERS_BUILD  # every build imports them (suites/__init__.py)

TEXT_ENCODER_CONFIGS = {
    "tiny": ("tiny_text_encoder.json", "tiny_text_encoder_2.json"),
    "full": ("sdxl_text_encoder.json", "sdxl_text_encoder_2.json"),
}
DEFAULT_RESOLUTION = {"tiny": 64, "full": 1024}
ATTENTION_CHOICES = ("sdpa", "vanilla")
GUIDANCE_SCALE = 5.0  # StableDiffusionXLPipeline's default
TEXT_TOKENS = 77
PROMPT_WORDS = 16  # token ids between BOS and EOS
BOS_ID, EOS_ID = 49406, 49407  # CLIP's <|startoftext|> / <|endoftext|>
# calls whose phase marks are discarded: the first (compile) and the CUDA-graph warm-up
WARMUP_CALLS = 2


@dataclass(frozen=True)
class PipelineOptions:
    diffusion: DiffusionOptions
    attention: str = "sdpa"


def parse_pipeline_options(options: dict[str, Any], size: str) -> PipelineOptions:
    """The diffusion options plus `attention`; a bad value raises with the fix."""
    options = dict(options)
    attention = str(options.pop("attention", "sdpa")).strip().lower()
    if attention not in ATTENTION_CHOICES:
        raise DiffusionOptionError(f"option attention={attention!r}; use one of {', '.join(ATTENTION_CHOICES)}")
    diffusion = parse_options(options, DEFAULT_RESOLUTION[size])
    if not diffusion.cfg:
        raise DiffusionOptionError("option cfg=false: the text-to-image pipeline always uses guidance")
    if attention == "vanilla" and diffusion.fused_qkv:
        raise DiffusionOptionError("attention=vanilla with fused_qkv=true: fused projections need the SDPA "
                                   "processor; drop one of the two")
    return PipelineOptions(diffusion=diffusion, attention=attention)


def build_text_encoder(filename: str, device: Any, dtype: Any) -> Any:
    """A CLIP text tower from a shipped transformers config, random weights, on `device`."""
    import torch
    import transformers

    cls = getattr(transformers, json.loads((CONFIG_DIR / filename).read_text())["_class_name"])
    data = load_config(filename)
    data.pop("model_type", None)
    with torch.device(device):
        model = cls(transformers.CLIPTextConfig(**data))
    return model.to(dtype=dtype).eval()


def prompt_ids(batch: int, device: Any) -> Any:
    """Fixed token ids standing in for a tokenized prompt: BOS, words, EOS, EOS padding.
    The pooled output is read at the first EOS (CLIP's argmax-of-ids rule), as for a real
    prompt; the ids come from the case seed, so eager and compiled encode the same prompt."""
    import torch

    gen = torch.Generator().manual_seed(torch.initial_seed())
    ids = torch.full((batch, TEXT_TOKENS), EOS_ID, dtype=torch.long)
    ids[:, 0] = BOS_ID
    ids[:, 1 : 1 + PROMPT_WORDS] = torch.randint(1000, 49000, (batch, PROMPT_WORDS), generator=gen)
    return ids.to(device)


def encode_prompt(text_encoder: Any, text_encoder_2: Any, ids: Any) -> tuple[Any, Any]:
    """(prompt_embeds, pooled_prompt_embeds) as `StableDiffusionXLPipeline.encode_prompt`
    computes them: the penultimate hidden states of both towers side by side (77 x 2048
    for SDXL) and the second tower's projected pooled output (1280)."""
    import torch

    hidden = []
    pooled = None
    for encoder in (text_encoder, text_encoder_2):
        out = encoder(ids, output_hidden_states=True)
        pooled = out[0]  # the last tower's text_embeds is what SDXL conditions on
        hidden.append(out.hidden_states[-2])
    return torch.cat(hidden, dim=-1), pooled


def set_attention(modules: list[Any], attention: str) -> None:
    if attention == "vanilla":
        for module in modules:
            module.set_default_attn_processor()


def build_pipeline(ctx: WorkloadContext, opts: PipelineOptions) -> Any:
    """`StableDiffusionXLPipeline` from shipped configs with random weights (no tokenizers)."""
    from diffusers import StableDiffusionXLPipeline

    # the options (channels_last, fused_qkv) apply to both, as the tutorial's pipe.fuse_qkv_projections()
    unet = build_model("sdxl-unet", ctx, opts.diffusion)
    vae = build_model("sdxl-vae", ctx, opts.diffusion)
    set_attention([unet, vae], opts.attention)
    first, second = TEXT_ENCODER_CONFIGS[ctx.size]
    pipe = StableDiffusionXLPipeline(
        vae=vae,
        text_encoder=build_text_encoder(first, ctx.device, ctx.dtype),
        text_encoder_2=build_text_encoder(second, ctx.device, ctx.dtype),
        tokenizer=None,
        tokenizer_2=None,
        unet=unet.eval(),
        scheduler=make_scheduler(),
        add_watermarker=False,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


@workload("sdxl-pipeline", unit="images", batch_size=1, scenarios=("text2image",), sizes=("tiny", "full"),
          description="SDXL base text-to-image: CLIP-L + OpenCLIP-bigG text encoders, 30-step Euler denoise "
                      "with CFG, VAE decode, 1024 px (tiny: 64 px, 2-level UNet)",
          options={**OPTIONS, "attention": "sdpa (default) or vanilla attention processor"})
def sdxl_pipeline(ctx: WorkloadContext) -> Built:
    import torch

    opts = parse_pipeline_options(ctx.options, ctx.size)
    pipe = build_pipeline(ctx, opts)
    res = opts.diffusion.resolution
    latent_side = res // pipe.vae_scale_factor
    gen = torch.Generator().manual_seed(torch.initial_seed())
    channels = pipe.unet.config.in_channels
    latents = torch.randn((ctx.batch_size, channels, latent_side, latent_side), generator=gen)
    return Built(
        model=pipe.unet,  # what regional compilation and the compiler-effects notes look at
        extras={"pipeline": pipe, "options": opts, "ids": prompt_ids(ctx.batch_size, ctx.device),
                "latents": latents.to(ctx.device, ctx.dtype)},
        units_per_call=float(ctx.batch_size),
    )


# ----- phase marks --------------------------------------------------------------------


def cumulative(intervals: list[float]) -> list[float]:
    """Seconds from a call's first mark to each mark, from the intervals between marks."""
    return list(itertools.accumulate([0.0, *intervals]))


def phase_summary(runs: list[list[float]], steps: int) -> dict[str, float]:
    """Median seconds per phase. Marks: 0 start, 1 encoded, 2..steps+1 steps, last decoded.
    A denoising step (UNet on the CFG batch + guidance + Euler step) is the interval
    between two step marks, so the first step, which also prepares latents and time ids,
    is left out of the step median."""
    import statistics

    complete = [r for r in runs if len(r) == steps + 3]
    if not complete:
        return {}
    step_intervals = [r[i + 1] - r[i] for r in complete for i in range(2, steps + 1)]
    summary = {
        "text_encode_s": statistics.median(r[1] - r[0] for r in complete),
        "denoise_s": statistics.median(r[steps + 1] - r[1] for r in complete),
        "vae_decode_s": statistics.median(r[-1] - r[steps + 1] for r in complete),
        "image_s": statistics.median(r[-1] for r in complete),
    }
    if step_intervals:
        summary["denoise_step_s"] = statistics.median(step_intervals)
    return summary


# ----- scenario -----------------------------------------------------------------------


def compile_pipeline(pipe: Any, compiler: CompilerConfig) -> None:
    """Compile what the tutorial compiles: the UNet in place (so the pipeline keeps its
    module, config and attributes), or its repeated blocks under a regional config, and
    `vae.decode` as a function (regional compilation has no blocks to pick in a VAE)."""
    unet_config = compiler if compiler.regional else replace(compiler, inplace=True)
    unet_config.compile(pipe.unet)
    decode_config = replace(compiler, inplace=False, regional=False)
    pipe.vae.decode = decode_config.compile(pipe.vae.decode)


def make_call(pipe: Any, built: Built, clock: TokenClock, eager: bool) -> Callable[[], dict[str, Any]]:
    """One image: encode the prompt ids, run the pipeline from fixed latents, decode."""
    import contextlib

    import torch

    opts: PipelineOptions = built.extras["options"]
    ids, latents = built.extras["ids"], built.extras["latents"]
    first_step: list[Any] = []

    def on_step_end(_pipe: Any, step: int, _t: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        clock.mark()
        if step == 0:
            first_step.append(kwargs["latents"].clone())
        return kwargs

    def call() -> dict[str, Any]:
        first_step.clear()
        stance = torch.compiler.set_stance("force_eager") if eager else contextlib.nullcontext()
        with stance, torch.no_grad():
            clock.start_call()
            clock.mark()
            embeds, pooled = encode_prompt(pipe.text_encoder, pipe.text_encoder_2, ids)
            clock.mark()
            image = pipe(
                prompt_embeds=embeds, pooled_prompt_embeds=pooled,
                height=opts.diffusion.resolution, width=opts.diffusion.resolution,
                num_inference_steps=opts.diffusion.steps, guidance_scale=GUIDANCE_SCALE,
                latents=latents, output_type="pt", callback_on_step_end=on_step_end,
            ).images
            clock.mark()
        return {"first_step_latents": first_step[0], "image": image}

    return call


def compare_first_step(reference: Any, result: Any, dtype_name: str) -> dict[str, Any]:
    """Accuracy is judged on the latents after the first denoising step (one UNet call, as
    in `unet_step`); the final image's cosine is reported beside it. With random weights, 30
    guided steps amplify half-precision rounding, so the image alone would fail runs whose
    every step agrees."""
    import torch

    from harness.model.accuracy import compare_outputs

    outcome = compare_outputs(reference["first_step_latents"], result["first_step_latents"], dtype_name)
    a = reference["image"].detach().double().flatten()
    b = result["image"].detach().to(a.device).double().flatten()
    outcome["judged_on"] = "latents after the first denoising step"
    outcome["image_cosine"] = float(torch.nn.functional.cosine_similarity(a, b, dim=0))
    outcome["image_max_abs_err"] = float((a - b).abs().max())
    if not bool(torch.isfinite(b).all()):
        outcome.update(status="fail", reason="non-finite values in the compiled image")
    return outcome


def compile_cache_state() -> dict[str, Any]:
    """Which Inductor cache this worker compiles against: the runner's empty per-case folder
    (a cold compile) or a folder shared across cases and calls
    (`COMPILEBENCH_COMPILE_CACHE_DIR`), with how many FX graphs and Triton kernels it already
    held when the case started: compile times mean different things in the two cases."""
    from harness.measure.environment import SHARED_CACHE_ENV

    shared = os.environ.get(SHARED_CACHE_ENV)
    if not shared:
        return {"compile_cache": "cold"}
    held = {sub: len(os.listdir(os.path.join(shared, sub))) if os.path.isdir(os.path.join(shared, sub)) else 0
            for sub in ("fxgraph", "triton")}
    return {"compile_cache": "warm" if any(held.values()) else "cold", "compile_cache_dir": shared,
            "compile_cache_entries_at_start": held}


def model_facts(pipe: Any, opts: PipelineOptions) -> dict[str, Any]:
    return {
        "params_unet": parameter_count(pipe.unet),
        "params_vae": parameter_count(pipe.vae),
        "params_text_encoder": parameter_count(pipe.text_encoder),
        "params_text_encoder_2": parameter_count(pipe.text_encoder_2),
        "resolution": opts.diffusion.resolution,
        "denoise_steps": opts.diffusion.steps,
        "guidance_scale": GUIDANCE_SCALE,
        "attention": opts.attention,
        "channels_last": opts.diffusion.channels_last,
        "fused_qkv": opts.diffusion.fused_qkv,
        "scheduler": type(pipe.scheduler).__name__,
        "prompt": f"{PROMPT_WORDS} fixed token ids (no tokenizer), negative prompt zeroed",
    }


@scenario("text2image")
def text2image(built: Built, wl: Workload, compiler: CompilerConfig, ctx: WorkloadContext) -> Prepared:
    """One image per call (per `batch_size` images): prompt encode, `steps` guided Euler
    steps, VAE decode. latency_s is seconds per image; phases come from in-call marks."""
    pipe = built.extras["pipeline"]
    opts: PipelineOptions = built.extras["options"]
    cache = compile_cache_state()
    if not compiler.is_eager:
        compile_pipeline(pipe, compiler)
    # marks: start, prompt encoded, each denoising step done, image decoded (device events
    # on a GPU, no sync in the loop); compile and CUDA-graph warm-up calls keep none
    clocks = {"eager": TokenClock(ctx.device, skip_calls=WARMUP_CALLS),
              "compiled": TokenClock(ctx.device, skip_calls=WARMUP_CALLS)}
    measured = "eager" if compiler.is_eager else "compiled"

    def phase_metrics() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for variant, clock in clocks.items():
            prefix = "" if variant == measured else "eager_"
            runs = [cumulative(intervals) for intervals in clock.intervals()]
            for name, value in phase_summary(runs, opts.diffusion.steps).items():
                out[f"{prefix}{name}"] = value
        if "denoise_step_s" in out and "eager_denoise_step_s" in out:
            out["denoise_step_speedup"] = out["eager_denoise_step_s"] / out["denoise_step_s"]
        return out

    static = {**model_facts(pipe, opts), **cache}
    return Prepared(
        eager=make_call(pipe, built, clocks["eager"], eager=True),
        compiled=None if compiler.is_eager else make_call(pipe, built, clocks["compiled"], eager=False),
        units_per_call=float(ctx.batch_size),
        unit="images",
        compare=compare_first_step,
        metrics=LazyMetrics(static, phase_metrics),  # type: ignore[arg-type]
        notes=[f"text-to-image: {opts.diffusion.steps} Euler steps with CFG {GUIDANCE_SCALE}, "
               f"{opts.diffusion.resolution} px, {opts.attention} attention; UNet and vae.decode compiled, "
               "text encoders eager; prompt = fixed token ids"],
    )


# ----- the tutorial's ladder ----------------------------------------------------------

# (rung, compiler, dtype, options): the diffusers tutorial's order, each rung adding one thing
LADDER: tuple[tuple[str, str, str, tuple[tuple[str, Any], ...]], ...] = (
    ("1 fp32 eager", "eager", "float32", (("attention", "vanilla"),)),
    ("2 bf16 eager", "eager", "bfloat16", (("attention", "vanilla"),)),
    ("3 bf16 + SDPA", "eager", "bfloat16", (("attention", "sdpa"),)),
    ("4 + torch.compile default", "inductor", "bfloat16", (("attention", "sdpa"),)),
    ("5 + max-autotune, fused QKV, channels_last", "sdxl-max-autotune", "bfloat16",
     (("attention", "sdpa"), ("channels_last", True), ("fused_qkv", True))),
    ("6 + CUDA graphs", "sdxl-max-autotune-cudagraphs", "bfloat16",
     (("attention", "sdpa"), ("channels_last", True), ("fused_qkv", True))),
)


def _register_suites() -> None:
    from suites import Suite, SuiteEntry, register_suite

    entries = tuple(
        SuiteEntry(workloads=("sdxl-pipeline",), scenarios=("text2image",), compilers=(compiler,),
                   devices=("cuda",), dtypes=(dtype,), sizes=("full",), options=options)
        for _rung, compiler, dtype, options in LADDER
    )
    register_suite(Suite(
        "sdxl-ladder",
        "the diffusers fast-diffusion tutorial's ladder on the whole SDXL pipeline (1024 px, 30 steps, CFG): "
        "fp32 eager, bf16, SDPA, compile, max-autotune + fused QKV + channels_last, CUDA graphs",
        entries=entries,
        policy=(("min_time_s", 0.0), ("min_samples", 3), ("warmup", 1), ("max_time_s", 60.0)),
        timeout_s=420.0,
    ))


_register_suites()
