"""The diffusers zoo: the denoisers and autoencoders beyond suites/diffusion.py's SDXL UNet,
each built from a shipped config (suites/configs/zoo/diffusers/, the real model's
config.json for `full`, a same-shaped narrow one for `tiny`) with random weights.

  diffusers-sd15-unet      UNet2DConditionModel, SD 1.x (conv projections, 77 x 768 text)
  diffusers-sd21-unet      UNet2DConditionModel, SD 2.x (linear projections, 77 x 1024 text)
  diffusers-dit-xl2        DiTTransformer2DModel, DiT-XL/2 (class-conditional, adaLN-zero)
  diffusers-pixart-alpha   PixArtTransformer2DModel (T5 captions, adaLN-single, resolution conditions)
  diffusers-sd3-medium     SD3Transformer2DModel (MMDiT: joint text/image attention, pooled text)
  diffusers-flux-dev       FluxTransformer2DModel (double + single stream, 3-axis RoPE, guidance)
  diffusers-sd-vae-decode / -encode, diffusers-flux-vae-decode   AutoencoderKL halves

One call is one denoiser step (scenarios `forward`, and `train` on the mean-square of the
prediction) or one VAE pass (`forward`), for `batch_size` images, inputs shaped as the
pipelines feed them (latents, timesteps, text embeddings, pooled projections, Flux's packed
latents with img_ids/txt_ids). Option `resolution` (pixels, a multiple of 64 for full runs):
the default is the model's own (512 / 768 / 256 / 1024) for full, 64 px for tiny.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import Built, WorkloadContext, workload
from harness.model.errors import UserError

from . import DIFFUSERS_BUILD, Suite, SuiteEntry, register_suite

PRELOAD_MODULES = DIFFUSERS_BUILD  # every build imports them (suites/__init__.py)

CONFIG_DIR = Path(__file__).resolve().parent / "configs" / "zoo" / "diffusers"
SD15_UNET = Path(__file__).resolve().parent / "configs" / "diffusion" / "sd15_unet.json"  # suites/diffusion.py's
VAE_SCALE = 8  # pixels per latent side: every model here sits behind an 8x VAE
# the workload options (@workload(options=...): checked before any worker starts)
OPTIONS = {"resolution": "image side in pixels, a multiple of 32 (default: the model's own for full, 64 for tiny)"}
OPTION_NAMES = tuple(OPTIONS)
TINY_RESOLUTION = 64
TINY_TEXT_TOKENS = 8


class DiffusersZooOptionError(UserError, ValueError):
    """A bad diffusers-zoo option; the message names it and the fix."""


@dataclass(frozen=True)
class ZooModel:
    name: str
    config: str  # file stem under CONFIG_DIR: "<config>-tiny.json", "<config>-full.json"
    kind: str  # which inputs: unet, dit, pixart, sd3, flux, vae-decode, vae-encode
    resolution: int  # full-size default, pixels
    text_tokens: int = 0  # full-size text length (CLIP 77, PixArt's T5 120, SD3 77 + 256, Flux 512)
    description: str = ""

    def config_path(self, size: str) -> Path:
        if size == "full" and self.config == "sd15-unet":
            return SD15_UNET
        return CONFIG_DIR / f"{self.config}-{size}.json"


MODELS: tuple[ZooModel, ...] = (
    ZooModel("diffusers-sd15-unet", "sd15-unet", "unet", 512, 77, "Stable Diffusion 1.5 UNet (860 M)"),
    ZooModel("diffusers-sd21-unet", "sd21-unet", "unet", 768, 77, "Stable Diffusion 2.1 UNet (866 M, linear projections)"),
    ZooModel("diffusers-dit-xl2", "dit-xl-2", "dit", 256, 0, "DiT-XL/2 256 px, class-conditional (750 M as diffusers builds it)"),
    ZooModel("diffusers-pixart-alpha", "pixart-alpha", "pixart", 1024, 120, "PixArt-alpha XL-2 1024 px (611 M)"),
    ZooModel("diffusers-sd3-medium", "sd3-medium", "sd3", 1024, 333, "SD3-medium MMDiT (2.03 B)"),
    ZooModel("diffusers-flux-dev", "flux-dev", "flux", 1024, 512, "FLUX.1-dev transformer (11.9 B)"),
    ZooModel("diffusers-sd-vae-decode", "sd-vae", "vae-decode", 512, 0, "SD 1.x VAE decoder (latents to pixels)"),
    ZooModel("diffusers-sd-vae-encode", "sd-vae", "vae-encode", 512, 0, "SD 1.x VAE encoder (pixels to latent mean)"),
    ZooModel("diffusers-flux-vae-decode", "flux-vae", "vae-decode", 1024, 0, "FLUX VAE decoder (16 latent channels)"),
)
MODELS_BY_NAME = {m.name: m for m in MODELS}
DENOISER_KINDS = ("unet", "dit", "pixart", "sd3", "flux")


def load_config(path: Path) -> tuple[str, dict[str, Any]]:
    """(class name, config) from a shipped JSON, without its `_`-prefixed bookkeeping."""
    data = json.loads(path.read_text())
    return data["_class_name"], {k: v for k, v in data.items() if not k.startswith("_")}


def resolution(model: ZooModel, ctx: WorkloadContext) -> int:
    unknown = sorted(set(ctx.options) - set(OPTION_NAMES))
    if unknown:
        raise DiffusersZooOptionError(f"unknown diffusers-zoo option(s) {unknown}; known: {', '.join(OPTION_NAMES)}")
    raw = ctx.options.get("resolution", model.resolution if ctx.size == "full" else TINY_RESOLUTION)
    try:
        pixels = int(raw)
    except (TypeError, ValueError):
        pixels = 0
    if pixels <= 0 or pixels % 32:
        raise DiffusersZooOptionError(f"option resolution={raw!r} is not a positive multiple of 32; use e.g. 512 or 1024")
    return pixels


def build_module(model: ZooModel, ctx: WorkloadContext) -> Any:
    import diffusers
    import torch

    class_name, config = load_config(model.config_path(ctx.size))
    with torch.device(ctx.device):
        module = getattr(diffusers, class_name).from_config(config)
    no_random_training(module)
    # nn.Module.to: diffusers' own .to() warns about fp32-kept modules these models lack
    return torch.nn.Module.to(module, dtype=ctx.dtype).eval()


def no_random_training(module: Any) -> None:
    """Switch off what draws random numbers in train mode: eager and compiled train steps
    must compare, and their RNG draws differ. DiT's class-label embedding drops labels with
    probability 0.1 (training for classifier-free guidance); dropout layers likewise."""
    import torch

    for sub in module.modules():
        if isinstance(sub, torch.nn.Dropout):
            sub.p = 0.0
        elif isinstance(getattr(sub, "dropout_prob", None), float):
            sub.dropout_prob = 0.0


class Inputs:
    """Random tensors drawn on the CPU from a generator of their own, then moved: the same
    inputs on every device, whatever the model build consumed."""

    def __init__(self, ctx: WorkloadContext) -> None:
        import torch

        self.ctx = ctx
        self.gen = torch.Generator().manual_seed(torch.initial_seed())

    def randn(self, *shape: int) -> Any:
        import torch

        return torch.randn(shape, generator=self.gen).to(self.ctx.device, self.ctx.dtype)

    def timesteps(self, scale: float = 1000.0) -> Any:
        import torch

        return (torch.rand((self.ctx.batch_size,), generator=self.gen) * scale).to(self.ctx.device)


def text_tokens(model: ZooModel, size: str) -> int:
    return model.text_tokens if size == "full" else TINY_TEXT_TOKENS


def unet_inputs(module: Any, model: ZooModel, ctx: WorkloadContext, side: int) -> dict[str, Any]:
    cfg, x, b = module.config, Inputs(ctx), ctx.batch_size
    return {"sample": x.randn(b, cfg.in_channels, side, side), "timestep": x.timesteps(),
            "encoder_hidden_states": x.randn(b, text_tokens(model, ctx.size), cfg.cross_attention_dim),
            "return_dict": False}


def dit_inputs(module: Any, model: ZooModel, ctx: WorkloadContext, side: int) -> dict[str, Any]:
    import torch

    cfg, x, b = module.config, Inputs(ctx), ctx.batch_size
    labels = torch.randint(0, cfg.num_embeds_ada_norm, (b,), generator=x.gen).to(ctx.device)
    return {"hidden_states": x.randn(b, cfg.in_channels, side, side), "timestep": x.timesteps().long(),
            "class_labels": labels, "return_dict": False}


def pixart_inputs(module: Any, model: ZooModel, ctx: WorkloadContext, side: int) -> dict[str, Any]:
    import torch

    cfg, x, b = module.config, Inputs(ctx), ctx.batch_size
    inputs = {"hidden_states": x.randn(b, cfg.in_channels, side, side), "timestep": x.timesteps(),
              "encoder_hidden_states": x.randn(b, text_tokens(model, ctx.size), cfg.caption_channels),
              "return_dict": False}
    pixels = float(side * VAE_SCALE)
    # the PixArt pipeline's micro-conditions (on for the 1024 px model): height, width and aspect ratio
    inputs["added_cond_kwargs"] = {
        "resolution": torch.tensor([[pixels, pixels]] * b, device=ctx.device, dtype=ctx.dtype),
        "aspect_ratio": torch.tensor([[1.0]] * b, device=ctx.device, dtype=ctx.dtype),
    } if module.use_additional_conditions else {"resolution": None, "aspect_ratio": None}
    return inputs


def sd3_inputs(module: Any, model: ZooModel, ctx: WorkloadContext, side: int) -> dict[str, Any]:
    cfg, x, b = module.config, Inputs(ctx), ctx.batch_size
    return {"hidden_states": x.randn(b, cfg.in_channels, side, side),
            "encoder_hidden_states": x.randn(b, text_tokens(model, ctx.size), cfg.joint_attention_dim),
            "pooled_projections": x.randn(b, cfg.pooled_projection_dim), "timestep": x.timesteps(),
            "return_dict": False}


def flux_image_ids(rows: int, cols: int, device: Any, dtype: Any) -> Any:
    """The Flux pipeline's latent position ids: (0, row, col) per 2x2-packed latent patch."""
    import torch

    ids = torch.zeros(rows, cols, 3)
    ids[..., 1] = torch.arange(rows)[:, None]
    ids[..., 2] = torch.arange(cols)[None, :]
    return ids.reshape(rows * cols, 3).to(device, dtype)


def flux_inputs(module: Any, model: ZooModel, ctx: WorkloadContext, side: int) -> dict[str, Any]:
    import torch

    cfg, x, b = module.config, Inputs(ctx), ctx.batch_size
    if side % 2:
        raise DiffusersZooOptionError(f"{model.name}: resolution {side * VAE_SCALE} gives an odd latent side; "
                                      "Flux packs 2x2 latent patches, use a multiple of 16 pixels")
    packed = side // 2
    tokens = text_tokens(model, ctx.size)
    inputs = {"hidden_states": x.randn(b, packed * packed, cfg.in_channels),
              "encoder_hidden_states": x.randn(b, tokens, cfg.joint_attention_dim),
              "pooled_projections": x.randn(b, cfg.pooled_projection_dim),
              "timestep": x.timesteps(scale=1.0).to(ctx.dtype),  # Flux takes sigmas in [0, 1]
              "img_ids": flux_image_ids(packed, packed, ctx.device, ctx.dtype),
              "txt_ids": torch.zeros(tokens, 3, device=ctx.device, dtype=ctx.dtype),
              "return_dict": False}
    if cfg.guidance_embeds:
        inputs["guidance"] = torch.full((b,), 3.5, device=ctx.device, dtype=ctx.dtype)  # the dev pipeline's default
    return inputs


INPUTS: dict[str, Callable[[Any, ZooModel, WorkloadContext, int], dict[str, Any]]] = {
    "unet": unet_inputs, "dit": dit_inputs, "pixart": pixart_inputs, "sd3": sd3_inputs, "flux": flux_inputs,
}


def vae_module(vae: Any, direction: str) -> Any:
    """One half of the autoencoder as a module (so every compiler config can take it, as
    pipelines compile `vae.decode`): decode takes scaled latents, encode returns the latent
    distribution's mean (deterministic, so eager and compiled compare)."""
    import torch

    class VAEHalf(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.vae = vae
            self.scale = float(vae.config.scaling_factor)
            self.shift = float(vae.config.shift_factor or 0.0)

        def forward(self, x: Any) -> Any:
            if direction == "decode":
                return self.vae.decode(x / self.scale + self.shift, return_dict=False)[0]
            return self.vae.encode(x, return_dict=False)[0].mean

    return VAEHalf()


def vae_input(vae: Any, direction: str, ctx: WorkloadContext, pixels: int) -> Any:
    x = Inputs(ctx)
    if direction == "encode":
        return x.randn(ctx.batch_size, vae.config.in_channels, pixels, pixels)
    # each level after the first halves the side: 8x for the real VAEs, less for the tiny ones
    side = pixels // 2 ** (len(vae.config.block_out_channels) - 1)
    return x.randn(ctx.batch_size, vae.config.latent_channels, side, side)


def build(model: ZooModel, ctx: WorkloadContext) -> Built:
    pixels = resolution(model, ctx)
    module = build_module(model, ctx)
    extras = {"resolution": pixels, "kind": model.kind, "params": sum(p.numel() for p in module.parameters())}
    if model.kind.startswith("vae-"):
        direction = model.kind.removeprefix("vae-")
        return Built(model=vae_module(module, direction), args=(vae_input(module, direction, ctx, pixels),),
                     extras=extras, units_per_call=float(ctx.batch_size))
    side = pixels // VAE_SCALE
    return Built(model=module, kwargs=INPUTS[model.kind](module, model, ctx, side), extras=extras,
                 units_per_call=float(ctx.batch_size))


def make_factory(model: ZooModel) -> Callable[[WorkloadContext], Built]:
    def factory(ctx: WorkloadContext) -> Built:
        return build(model, ctx)

    factory.__doc__ = model.description
    return factory


for _model in MODELS:
    workload(_model.name, unit="images", batch_size=1,
             scenarios=("forward", "train") if _model.kind in DENOISER_KINDS else ("forward",),
             description=f"{_model.description}; diffusers zoo", options=OPTIONS)(make_factory(_model))

ZOO_WORKLOADS = tuple(m.name for m in MODELS)
# Flux's 11.9 B with AdamW states and 4096-token activations does not fit one 141 GB GPU
FULL_TRAIN_WORKLOADS = tuple(m.name for m in MODELS if m.kind in DENOISER_KINDS and m.kind != "flux")

register_suite(Suite(
    "diffusers-tiny",
    "diffusers zoo (SD 1.5/2.1 UNets, DiT, PixArt, SD3, Flux, SD/Flux VAEs) at tiny configs on CPU, "
    "one denoiser step or VAE pass and a train step, eager vs inductor",
    entries=(SuiteEntry(workloads=ZOO_WORKLOADS, compilers=("eager", "inductor"), devices=("cpu",),
                        dtypes=("float32",), sizes=("tiny",)),),
    policy=(("min_time_s", 0.2), ("min_samples", 5), ("max_samples", 200), ("warmup", 2), ("max_time_s", 3.0)),
    timeout_s=300.0,
    max_memory_gb=8.0,  # host memory cap per CPU case (virtual, compile workers included)
))
register_suite(Suite(
    "diffusers",
    "diffusers zoo at the real models' configs on one GPU in bf16: one denoiser step at each model's "
    "resolution, VAE decode/encode, and train steps of the denoisers up to SD3's 2 B; eager vs inductor",
    entries=(SuiteEntry(workloads=ZOO_WORKLOADS, scenarios=("forward",), compilers=("eager", "inductor"),
                        devices=("cuda",), dtypes=("bfloat16",), sizes=("full",)),
             SuiteEntry(workloads=FULL_TRAIN_WORKLOADS, scenarios=("train",), compilers=("eager", "inductor"),
                        devices=("cuda",), dtypes=("bfloat16",), sizes=("full",))),
    policy=(("min_time_s", 1.0), ("min_samples", 10), ("max_samples", 200), ("warmup", 3), ("max_time_s", 15.0)),
    timeout_s=900.0,
))
