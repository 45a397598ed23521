"""Diffusion workloads: the SDXL base UNet, the SD 1.5 UNet and the SDXL VAE decoder, built
from diffusers configs shipped in `suites/configs/diffusion/` with random weights.

Inputs are what the SDXL / SD 1.5 pipelines feed the UNet: classifier-free guidance (CFG)
doubles the batch (2 UNet rows per image), latents 4 x res/8 x res/8, text embeddings
77 x cross_attention_dim, and for SDXL the pooled text embedding plus 6 `time_ids`.
`--batch-size` counts images; the UNet sees 2 x that many rows with CFG on.

Workload options (`ctx.options`, from a SuiteEntry or the command line):
  resolution   image side in pixels, a multiple of 64 (512 / 768 / 1024 are the usual ones)
  steps        denoising steps (default 30): the `denoise` loop length, and the steps that
               `unet_step` quotes images/s at
  cfg          classifier-free guidance on (default) or off (the train suite turns it off)
  channels_last, fused_qkv    memory format and fused attention projections (default off)
  weights      a local folder with real weights (`save_pretrained` layout); never required
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import workload
from harness.model.construction import build_on
from harness.model.errors import UserError
from harness.model.scenarios import Prepared, scenario
from harness.model.workloads import Built, Workload, WorkloadContext

from . import DIFFUSERS_BUILD

PRELOAD_MODULES = DIFFUSERS_BUILD  # every build imports them (suites/__init__.py)

CONFIG_DIR = Path(__file__).resolve().parent / "configs" / "diffusion"

# workload -> size -> shipped config file
MODEL_CONFIGS: dict[str, dict[str, str]] = {
    "sdxl-unet": {"tiny": "tiny_sdxl_unet.json", "full": "sdxl_base_unet.json"},
    "sd15-unet": {"full": "sd15_unet.json"},
    "sdxl-vae": {"tiny": "tiny_vae.json", "full": "sdxl_vae.json"},
}
SCHEDULER_CONFIG = "sdxl_scheduler.json"
TEXT_TOKENS = 77  # CLIP's context length: every SD/SDXL prompt embedding is 77 tokens
DEFAULT_RESOLUTION = {"sdxl-unet": {"tiny": 128, "full": 1024}, "sd15-unet": {"full": 512},
                      "sdxl-vae": {"tiny": 128, "full": 1024}}
GUIDANCE_SCALE = {"sdxl-unet": 5.0, "sd15-unet": 7.5}  # the pipelines' defaults
# the workload options (@workload(options=...): checked before any worker starts)
OPTIONS: dict[str, str] = {"resolution": "image side in pixels, a multiple of 64",
                           "steps": "denoising steps (default 30)",
                           "cfg": "classifier-free guidance, true (default) or false",
                           "channels_last": "channels_last memory format, true or false (default)",
                           "fused_qkv": "fused attention projections, true or false (default)",
                           "weights": "a local folder with real weights (save_pretrained layout)"}
OPTION_NAMES = tuple(OPTIONS)
VAE_SCALE = 8  # pixels per latent along each side


class DiffusionOptionError(UserError, ValueError):
    """A workload option with a bad value; the message names the option and the fix."""


@dataclass(frozen=True)
class DiffusionOptions:
    resolution: int
    steps: int = 30
    cfg: bool = True
    channels_last: bool = False
    fused_qkv: bool = False
    weights: str | None = None


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise DiffusionOptionError(f"option {name}={value!r} is not a boolean; use true or false")


def _as_positive_int(name: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number <= 0 or str(value).strip() != str(number):
        raise DiffusionOptionError(f"option {name}={value!r} is not a positive integer")
    return number


def parse_options(options: dict[str, Any], default_resolution: int) -> DiffusionOptions:
    """Validate the workload options; unknown names and bad values raise with the fix."""
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise DiffusionOptionError(f"unknown diffusion option(s) {unknown}; known options: {', '.join(OPTION_NAMES)}")
    resolution = _as_positive_int("resolution", options.get("resolution", default_resolution))
    if resolution % 64:
        raise DiffusionOptionError(f"option resolution={resolution} is not a multiple of 64; use 512, 768 or 1024")
    weights = options.get("weights")
    if weights is not None and not Path(str(weights)).is_dir():
        raise DiffusionOptionError(f"option weights={weights!r} is not a folder; pass a local save_pretrained folder")
    return DiffusionOptions(
        resolution=resolution,
        steps=_as_positive_int("steps", options.get("steps", 30)),
        cfg=_as_bool("cfg", options.get("cfg", True)),
        channels_last=_as_bool("channels_last", options.get("channels_last", False)),
        fused_qkv=_as_bool("fused_qkv", options.get("fused_qkv", False)),
        weights=str(weights) if weights is not None else None,
    )


def load_config(filename: str) -> dict[str, Any]:
    """A shipped diffusers config, without the `_`-prefixed bookkeeping keys."""
    data = json.loads((CONFIG_DIR / filename).read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def model_class(config_file: str) -> Any:
    import diffusers

    name = json.loads((CONFIG_DIR / config_file).read_text())["_class_name"]
    return getattr(diffusers, name)


def build_from_config(workload_name: str, size: str, device: Any = "cpu", dtype: Any = None) -> Any:
    """The model with random weights, created directly on `device` (pass "meta" to count
    parameters without allocating: the full SDXL UNet is 2.57 B) and, given `dtype`, in that
    dtype: diffusers' `from_config` takes no dtype, and building in float32 first then casting
    allocated the SDXL UNet three times over (10.3 GB float32 + 5.1 GB float16) on the GPU.
    The same init functions draw in `dtype` directly: the same distributions (these models
    have no buffers computed in `__init__`, which a default dtype could change)."""
    config_file = MODEL_CONFIGS[workload_name][size]
    with build_on(device, dtype):
        return model_class(config_file).from_config(load_config(config_file))


def _load_weights(workload_name: str, size: str, folder: str) -> Any:
    """Real weights from a local folder: a model folder or a pipeline root (unet/ or vae/)."""
    config_file = MODEL_CONFIGS[workload_name][size]
    cls = model_class(config_file)
    sub = "vae" if workload_name.endswith("vae") else "unet"
    subfolder = sub if (Path(folder) / sub).is_dir() else None
    return cls.from_pretrained(folder, subfolder=subfolder, local_files_only=True)


def build_model(workload_name: str, ctx: WorkloadContext, opts: DiffusionOptions) -> Any:
    import torch

    if opts.weights:
        model = _load_weights(workload_name, ctx.size, opts.weights).to(ctx.device)
    else:
        model = build_from_config(workload_name, ctx.size, ctx.device, ctx.dtype)
    # a no-op after a build in ctx.dtype (Module.to keeps a tensor already in it); it casts
    # real weights and anything a model creates in an explicit float32.
    # nn.Module.to: diffusers' own .to() warns about fp32-kept modules these models lack
    model = torch.nn.Module.to(model, dtype=ctx.dtype)
    if opts.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if opts.fused_qkv:
        model.fuse_qkv_projections()
    return model


def repeated_blocks(model: Any) -> list[Any]:
    """The blocks that repeat (the UNet's `BasicTransformerBlock`s, as diffusers declares in
    `_repeated_blocks`): what regional compilation compiles instead of the whole model."""
    names = set(getattr(model, "_repeated_blocks", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


def parameter_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


@dataclass
class UNetInputs:
    """One denoising step's UNet inputs (CFG rows included) and the initial noise."""

    noise: Any  # images x 4 x h x w: the starting latents of `denoise`
    latents: Any  # unet_batch x 4 x h x w
    timestep: Any  # 0-dim, as the pipelines pass scheduler.timesteps[i]
    text: Any  # unet_batch x 77 x cross_attention_dim
    added: dict[str, Any]  # SDXL: text_embeds (pooled) and time_ids; empty for SD 1.5

    @property
    def unet_batch(self) -> int:
        return int(self.latents.shape[0])


def random_tensor(shape: tuple[int, ...], generator: Any, ctx: WorkloadContext) -> Any:
    """Drawn on the CPU from the inputs' own generator: the same inputs on every device,
    whatever random numbers the model build consumed (fused QKV draws some)."""
    import torch

    return torch.randn(shape, generator=generator).to(ctx.device, ctx.dtype)


def input_generator() -> Any:
    import torch

    return torch.Generator().manual_seed(torch.initial_seed())


def make_unet_inputs(config: dict[str, Any], ctx: WorkloadContext, opts: DiffusionOptions) -> UNetInputs:
    import torch

    side = opts.resolution // VAE_SCALE
    rows = ctx.batch_size * (2 if opts.cfg else 1)
    gen = input_generator()
    kw = {"device": ctx.device, "dtype": ctx.dtype}
    noise = random_tensor((ctx.batch_size, config["in_channels"], side, side), gen, ctx)
    latents = torch.cat([noise] * 2) if opts.cfg else noise.clone()
    text = random_tensor((rows, TEXT_TOKENS, config["cross_attention_dim"]), gen, ctx)
    added: dict[str, Any] = {}
    if config.get("addition_embed_type") == "text_time":
        # projection input = pooled text embedding + 6 time_ids x addition_time_embed_dim
        pooled_dim = config["projection_class_embeddings_input_dim"] - 6 * config["addition_time_embed_dim"]
        res = float(opts.resolution)
        added = {
            "text_embeds": random_tensor((rows, pooled_dim), gen, ctx),
            # (original h, w, crop top, left, target h, w), as the SDXL pipeline builds them
            "time_ids": torch.tensor([[res, res, 0.0, 0.0, res, res]] * rows, **kw),
        }
    timestep = torch.tensor(500.0, device=ctx.device)
    return UNetInputs(noise, latents, timestep, text, added)


def _unet_factory(workload_name: str, ctx: WorkloadContext) -> Built:
    opts = parse_options(ctx.options, DEFAULT_RESOLUTION[workload_name][ctx.size])
    model = build_model(workload_name, ctx, opts)
    inputs = make_unet_inputs(dict(model.config), ctx, opts)
    kwargs: dict[str, Any] = {"return_dict": False}
    if inputs.added:
        kwargs["added_cond_kwargs"] = inputs.added
    return Built(
        model=model,
        args=(inputs.latents, inputs.timestep, inputs.text),
        kwargs=kwargs,
        extras={"inputs": inputs, "options": opts, "guidance_scale": GUIDANCE_SCALE[workload_name]},
        units_per_call=float(ctx.batch_size),
    )


@workload("sdxl-unet", unit="images", batch_size=1, scenarios=("unet_step", "denoise", "train"),
          sizes=("tiny", "full"),
          description="SDXL base 1.0 UNet (2.57 B; tiny: SDXL-shaped 1.4 M), CFG batch 2 per image", options=OPTIONS)
def sdxl_unet(ctx: WorkloadContext) -> Built:
    return _unet_factory("sdxl-unet", ctx)


@workload("sd15-unet", unit="images", batch_size=1, scenarios=("unet_step", "denoise", "train"), sizes=("full",),
          description="Stable Diffusion 1.5 UNet (860 M), CFG batch 2 per image, 512 px", options=OPTIONS)
def sd15_unet(ctx: WorkloadContext) -> Built:
    return _unet_factory("sd15-unet", ctx)


def _vae_decoder_module(vae: Any) -> Any:
    """`vae.decode` as a module of its own, so every compiler config (whole-model,
    in-place, regional) can take it, as pipelines compile `vae.decode`."""
    import torch

    class VAEDecode(torch.nn.Module):
        def __init__(self, vae: Any) -> None:
            super().__init__()
            self.vae = vae
            self.scale = float(vae.config.scaling_factor)

        def forward(self, latents: Any) -> Any:
            return self.vae.decode(latents / self.scale, return_dict=False)[0]

    return VAEDecode(vae)


@workload("sdxl-vae", unit="images", batch_size=1, scenarios=("vae_decode",), sizes=("tiny", "full"),
          description="SDXL VAE decoder: 4 x 128 x 128 latents to a 1024 px image (tiny: same blocks, narrow)",
          options=OPTIONS)
def sdxl_vae(ctx: WorkloadContext) -> Built:
    opts = parse_options(ctx.options, DEFAULT_RESOLUTION["sdxl-vae"][ctx.size])
    vae = build_model("sdxl-vae", ctx, opts)
    # each up block after the first doubles the side: 8x for SDXL's VAE, less for the tiny one
    side = opts.resolution // 2 ** (len(vae.config.block_out_channels) - 1)
    latents = random_tensor((ctx.batch_size, vae.config.latent_channels, side, side), input_generator(), ctx)
    return Built(model=_vae_decoder_module(vae), args=(latents,), extras={"options": opts},
                 units_per_call=float(ctx.batch_size))


# ----- scenarios -----------------------------------------------------------------------


def _eager(fn: Any) -> Any:
    """Run `fn` with Dynamo off: regional / in-place configs compile the very module the
    eager variant calls, and the eager baseline must stay eager."""
    import torch

    from harness.measure.capabilities import require

    require("set_stance")

    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.compiler.set_stance("force_eager"):
            return fn(*args, **kwargs)

    return run


def _compile(compiler: Any, model: Any) -> Any:
    return None if compiler.is_eager else compiler.compile(model)


def _model_metrics(built: Built) -> dict[str, Any]:
    model = built.model
    opts: DiffusionOptions = built.extras["options"]
    metrics: dict[str, Any] = {
        "params": parameter_count(model),
        "resolution": opts.resolution,
        "channels_last": opts.channels_last,
        "fused_qkv": opts.fused_qkv,
        "repeated_blocks": len(repeated_blocks(model)),
    }
    if "inputs" in built.extras:
        metrics["unet_batch"] = built.extras["inputs"].unet_batch
        metrics["cfg"] = opts.cfg
    return metrics


def _no_grad_call(fn: Any, args: tuple, kwargs: dict[str, Any], cudagraph_step: bool = False) -> Any:
    import torch

    def run() -> Any:
        if cudagraph_step:
            # reduce-overhead: each call is a new step, so the last output may be reused
            torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            return fn(*args, **kwargs)

    return run


@scenario("unet_step")
def unet_step(built: Built, wl: Workload, compiler: Any, ctx: WorkloadContext) -> Prepared:
    """One UNet forward: one denoising step for `batch_size` images (CFG rows included).
    Throughput is images/s at `steps` steps per image (steps/s is 1 / latency_s)."""
    model = built.model.eval()
    opts: DiffusionOptions = built.extras["options"]
    compiled_model = _compile(compiler, model)
    on_cuda = str(ctx.device).startswith("cuda")
    compiled = None if compiled_model is None else _no_grad_call(compiled_model, built.args, built.kwargs, on_cuda)
    metrics = {**_model_metrics(built), "denoise_steps": opts.steps, "images_per_call": ctx.batch_size}
    return Prepared(
        eager=_no_grad_call(_eager(model), built.args, built.kwargs),
        compiled=compiled,
        units_per_call=ctx.batch_size / opts.steps,
        unit="images",
        metrics=metrics,
        notes=[f"one UNet step; images/s assumes {opts.steps} steps per image; steps/s = 1/latency_s"],
    )


def make_scheduler() -> Any:
    from diffusers import EulerDiscreteScheduler

    return EulerDiscreteScheduler.from_config(load_config(SCHEDULER_CONFIG))


def denoise_loop(unet: Any, inputs: UNetInputs, steps: int, guidance: float, cfg: bool,
                 cudagraph_step: bool = False) -> Any:
    """The SDXL pipeline's denoising loop (Euler), UNet only: returns the final latents.
    A scheduler of its own per loop, so eager and compiled runs never share its state."""
    import torch

    scheduler = make_scheduler()

    def run() -> Any:
        with torch.no_grad():
            scheduler.set_timesteps(steps, device=inputs.noise.device)
            latents = inputs.noise * scheduler.init_noise_sigma
            kwargs = {"added_cond_kwargs": inputs.added} if inputs.added else {}
            for t in scheduler.timesteps:
                model_in = torch.cat([latents] * 2) if cfg else latents
                model_in = scheduler.scale_model_input(model_in, t)
                if cudagraph_step:
                    torch.compiler.cudagraph_mark_step_begin()
                noise = unet(model_in, t, inputs.text, return_dict=False, **kwargs)[0]
                if cfg:
                    uncond, cond = noise.chunk(2)
                    noise = uncond + guidance * (cond - uncond)
                latents = scheduler.step(noise, t, latents, return_dict=False)[0]
            return latents

    return run


@scenario("denoise")
def denoise(built: Built, wl: Workload, compiler: Any, ctx: WorkloadContext) -> Prepared:
    """`steps` denoising steps with diffusers' Euler scheduler, only the UNet compiled (as
    users do): end-to-end latency and images/s of the loop."""
    model = built.model.eval()
    opts: DiffusionOptions = built.extras["options"]
    inputs: UNetInputs = built.extras["inputs"]
    guidance = built.extras["guidance_scale"]
    compiled_model = _compile(compiler, model)
    on_cuda = str(ctx.device).startswith("cuda")
    compiled = None
    if compiled_model is not None:
        compiled = denoise_loop(compiled_model, inputs, opts.steps, guidance, opts.cfg, on_cuda)
    return Prepared(
        eager=_eager(denoise_loop(model, inputs, opts.steps, guidance, opts.cfg)),
        compiled=compiled,
        units_per_call=float(ctx.batch_size),
        unit="images",
        metrics={**_model_metrics(built), "denoise_steps": opts.steps, "scheduler": "EulerDiscreteScheduler"},
        notes=[f"{opts.steps} Euler steps, guidance {guidance if opts.cfg else 'off'}; only the UNet is compiled"],
    )


@scenario("vae_decode")
def vae_decode(built: Built, wl: Workload, compiler: Any, ctx: WorkloadContext) -> Prepared:
    """Latents to pixels: `vae.decode` for `batch_size` images."""
    model = built.model.eval()
    compiled_model = _compile(compiler, model)
    on_cuda = str(ctx.device).startswith("cuda")
    compiled = None if compiled_model is None else _no_grad_call(compiled_model, built.args, built.kwargs, on_cuda)
    return Prepared(
        eager=_no_grad_call(_eager(model), built.args, built.kwargs),
        compiled=compiled,
        units_per_call=float(ctx.batch_size),
        unit="images",
        metrics=_model_metrics(built),
    )


# ----- suites --------------------------------------------------------------------------


def _available(*names: str) -> tuple[str, ...]:
    """The compilers among `names` that are registered (the matrix grows in compiler/)."""
    from compiler import COMPILERS

    return tuple(n for n in names if n in COMPILERS)


def _register_suites() -> None:
    from suites import Suite, SuiteEntry, extend_suite, register_suite

    extend_suite("smoke", SuiteEntry(workloads=("sdxl-unet",), scenarios=("unet_step",), compilers=("inductor",)))
    gpu = ("cuda",)
    step_compilers = _available("inductor", "inductor-reduce-overhead", "inductor-max-autotune-no-cudagraphs",
                                "inductor-regional")
    register_suite(Suite(
        "diffusion",
        "SDXL / SD 1.5 UNets and the SDXL VAE at full size on CUDA, fp16: step, 30-step denoise, "
        "decode, and bf16 fine-tuning steps of the tiny and SD 1.5 UNets",
        entries=(
            SuiteEntry(workloads=("sdxl-unet",), scenarios=("unet_step",), compilers=step_compilers, devices=gpu,
                       dtypes=("float16",), sizes=("full",), options=(("resolution", 1024),)),
            SuiteEntry(workloads=("sdxl-unet",), scenarios=("denoise",), compilers=_available("inductor"),
                       devices=gpu, dtypes=("float16",), sizes=("full",), options=(("resolution", 1024),)),
            SuiteEntry(workloads=("sd15-unet",), scenarios=("unet_step",), compilers=step_compilers, devices=gpu,
                       dtypes=("float16",), sizes=("full",), options=(("resolution", 512),)),
            SuiteEntry(workloads=("sdxl-vae",), scenarios=("vae_decode",), compilers=_available("inductor"),
                       devices=gpu, dtypes=("float16",), sizes=("full",), options=(("resolution", 1024),)),
            SuiteEntry(workloads=("sdxl-unet",), scenarios=("train",), compilers=_available("inductor"),
                       devices=gpu, dtypes=("bfloat16",), sizes=("tiny",), options=(("cfg", False),)),
            SuiteEntry(workloads=("sd15-unet",), scenarios=("train",), compilers=_available("inductor"),
                       devices=gpu, dtypes=("bfloat16",), sizes=("full",), options=(("cfg", False),)),
        ),
        timeout_s=900.0,
    ))


_register_suites()
