"""`CompilerConfig`: a named, frozen description of how to turn a model into a callable.

Frozen and hashable so it can key cases; `to_dict`/`from_dict` make it travel as data to
worker processes, which is how a config defined in a user's TOML file reaches a worker
that never read that file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

DYNAMIC_CHOICES = {"true": True, "false": False, "automatic": None, "auto": None, "none": None}
# backends that need a CUDA device to do anything at all (the `cudagraphs` backend records
# CUDA graphs; on CPU it would only fail or measure eager)
CUDA_ONLY_BACKENDS = frozenset({"cudagraphs"})
# Inductor options that only take effect as process-wide config (see _apply_process_options)
PROCESS_WIDE_OPTIONS = frozenset({"freezing"})


# What a compile calls first to make sure its backend exists in this process (a plugin may
# register it on import). compiler/__init__.py installs backends.ensure_backend here, so
# this module, the data a config travels as, imports nothing that loads plugins.
BACKEND_LOADERS: list[Callable[[str | None], None]] = []


def freeze_options(options: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((options or {}).items()))


@dataclass(frozen=True)
class CompilerConfig:
    """How to compile. `backend=None` is eager: nothing is compiled.

    inplace: `model.compile(...)` (the module compiles its own forward; the same object is
        returned) instead of wrapping it in `torch.compile(model)` (an OptimizedModule).
    regional: compile each repeated block (transformer layers, UNet blocks) instead of the
        whole model: much shorter cold compiles, a few more graph boundaries.
    """

    name: str
    backend: str | None = "inductor"
    mode: str | None = None
    options: tuple[tuple[str, Any], ...] = field(default_factory=tuple)
    fullgraph: bool = False
    dynamic: bool | None = None
    inplace: bool = False
    regional: bool = False
    description: str = ""

    @property
    def is_eager(self) -> bool:
        return self.backend is None

    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)

    def compile_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `torch.compile` / `nn.Module.compile`."""
        kwargs: dict[str, Any] = {"backend": self.backend, "fullgraph": self.fullgraph, "dynamic": self.dynamic}
        if self.mode is not None and self.options:
            # torch.compile refuses mode and options together; a mode is a named set of
            # options, so merge them (explicit options win)
            from torch._inductor import list_mode_options

            kwargs["options"] = {**list_mode_options(self.mode, self.dynamic), **self.options_dict()}
        elif self.mode is not None:
            kwargs["mode"] = self.mode
        elif self.options:
            kwargs["options"] = self.options_dict()
        return kwargs

    def unsupported_reason(self, device_type: str) -> str | None:
        """Why this config cannot run on `device_type` at all (the case is skipped), or None.
        Modes that merely do less on a device (reduce-overhead on CPU) still run and say so."""
        if self.backend in CUDA_ONLY_BACKENDS and device_type != "cuda":
            return f"compiler {self.name!r}: backend {self.backend!r} records CUDA graphs and needs a CUDA device"
        return None

    def required_features(self) -> tuple[str, ...]:
        """What the installed torch must offer for this config (feature names of
        harness.measure.capabilities); the worker skips the case, with the reason, otherwise."""
        if self.is_eager:
            return ()
        needs = ["torch.compile"]
        if self.regional or self.inplace:
            needs += ["module_compile", "set_stance"]  # the eager variant of the same module runs under force_eager
        if self.mode is not None and self.options:
            needs.append("list_mode_options")
        return tuple(needs)

    def compile(self, fn: Callable) -> Callable:
        """Turn `fn` (module or function) into what is measured. Lazy: nothing compiles
        until the first call, which the worker times as the cold compile."""
        if self.is_eager:
            return fn
        import torch

        for load_backend in BACKEND_LOADERS:
            load_backend(self.backend)
        kwargs = self.compile_kwargs()
        self._apply_process_options()
        if (self.regional or self.inplace) and not isinstance(fn, torch.nn.Module):
            from .regional import NotApplicableError

            # both act on a module's own forward; a train_step function has none, and
            # silently falling back to torch.compile(fn) would mislabel the result
            how = "regional compilation" if self.regional else "model.compile() in place"
            raise NotApplicableError(f"compiler {self.name!r}: {how} needs an nn.Module, this scenario compiles "
                                     f"{type(fn).__name__} {getattr(fn, '__name__', '')!r} (try scenario train_module_only)")
        if self.regional:
            from .regional import compile_regions

            compile_regions(fn, kwargs)
            return fn
        if self.inplace:
            fn.compile(**kwargs)
            return fn
        return torch.compile(fn, **kwargs)

    def _apply_process_options(self) -> None:
        """Set the options torch.compile(options=...) does not honour on its own.

        Measured with torch 2.13 on CPU: options={"freezing": True} leaves the weights as
        graph inputs (no freezing, no GEMM template autotuning) while the global
        `torch._inductor.config.freezing = True` freezes them. The worker is one process
        per case, so a process-wide setting affects only this case."""
        if self.backend != "inductor":
            return
        import torch._inductor.config as inductor_config

        for key in PROCESS_WIDE_OPTIONS & set(self.options_dict()):
            setattr(inductor_config, key, self.options_dict()[key])

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["options"] = self.options_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompilerConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"compiler config has unknown field(s) {unknown}; known fields: {sorted(known)}")
        data = dict(data)
        data["options"] = freeze_options(data.get("options"))
        return cls(**data)

    def fingerprint(self) -> str:
        """Stable string of everything that changes what is compiled (for run metadata)."""
        return json.dumps(self.to_dict(), sort_keys=True, default=str)


def builtin_configs() -> list[CompilerConfig]:
    """The named matrix every user gets without writing a file."""
    c = CompilerConfig
    return [
        c("eager", backend=None, description="no compilation: the eager baseline"),
        c("inductor", description="torch.compile default mode (TorchInductor)"),
        c("inductor-reduce-overhead", mode="reduce-overhead",
          description="CUDA graphs on top of Inductor; on CPU the graphs are skipped (recorded as cudagraph_skips)"),
        c("inductor-max-autotune", mode="max-autotune",
          description="autotuned GEMM/conv templates + CUDA graphs; on CPU GEMMs autotune only with freezing"),
        c("inductor-max-autotune-no-cudagraphs", mode="max-autotune-no-cudagraphs",
          description="autotuned templates without CUDA graphs"),
        c("inductor-max-autotune-freezing", mode="max-autotune-no-cudagraphs", options=freeze_options({"freezing": True}),
          description="max-autotune with freezing: the setting under which CPU GEMM templates autotune (inference)"),
        c("inductor-fullgraph", fullgraph=True, description="Inductor, fullgraph=True: a graph break fails the case"),
        c("inductor-dynamic", dynamic=True, description="Inductor, dynamic=True: symbolic shapes from the first compile"),
        c("inductor-static", dynamic=False, description="Inductor, dynamic=False: every new shape recompiles"),
        c("inductor-inplace", inplace=True, description="model.compile() in place instead of torch.compile(model)"),
        c("inductor-regional", regional=True,
          description="regional compilation: each repeated block compiled, not the whole model"),
        c("aot_eager", backend="aot_eager", description="Dynamo + AOTAutograd, eager kernels: isolates Inductor"),
        c("cudagraphs", backend="cudagraphs", description="Dynamo + CUDA graphs without Inductor (CUDA only)"),
        *recipe_configs(),
    ]


# The diffusers "fast diffusion" tutorial's Inductor flags (conv 1x1 as mm, no epilogue
# fusion) with a narrower search, so that a cold compile fits an 8-minute call: the
# max-autotune modes switch coordinate-descent tuning on (it benchmarks each of the UNet's
# ~1000 Triton kernels; the tutorial asks for it too) and autotune Triton conv templates;
# here both are off and convolutions stay on cuDNN. Without these cuts max-autotune on the
# SDXL UNet did not finish in 565 s on the H200 box.
SDXL_TUTORIAL_OPTIONS = {
    "conv_1x1_as_mm": True,
    "epilogue_fusion": False,
    "coordinate_descent_tuning": False,
    "max_autotune_conv_backends": "ATEN",
}
# gpt-fast's generate.py sets these process-wide before compiling decode_one_token
GPT_FAST_OPTIONS = {"coordinate_descent_tuning": True, "triton.unique_kernel_names": True}


def recipe_configs() -> list[CompilerConfig]:
    """Published recipes as named configs, so anyone can rerun an anchor's setup by name."""
    c = CompilerConfig
    sdxl = freeze_options(SDXL_TUTORIAL_OPTIONS)
    gpt_fast = freeze_options(GPT_FAST_OPTIONS)
    return [
        c("sdxl-max-autotune", mode="max-autotune-no-cudagraphs", options=sdxl, fullgraph=True,
          description="diffusers fast-diffusion tutorial, narrowed: max-autotune GEMMs only (convs on cuDNN, no "
                      "coordinate descent), conv 1x1 as mm, no epilogue fusion, fullgraph; no CUDA graphs"),
        c("sdxl-max-autotune-cudagraphs", mode="max-autotune", options=sdxl, fullgraph=True,
          description="sdxl-max-autotune plus CUDA graphs (the tutorial's mode='max-autotune')"),
        c("gpt-fast", mode="reduce-overhead", options=gpt_fast, fullgraph=True,
          description="gpt-fast's generate.py: reduce-overhead (CUDA graphs), fullgraph, coordinate-descent tuning"),
        c("gpt-fast-max-autotune", mode="max-autotune", options=gpt_fast, fullgraph=True,
          description="gpt-fast's recipe with max-autotune GEMMs: CUDA graphs, fullgraph, coordinate-descent tuning"),
    ]
