"""Workloads: user-facing registration of model factories.

    from harness import workload

    @workload("my-mlp", unit="samples", batch_size=32)
    def my_mlp(ctx):
        model = build(...).to(ctx.device, ctx.dtype)
        return model, (torch.randn(ctx.batch_size, 10, device=ctx.device, dtype=ctx.dtype),)

A factory returns `(model, args)`, `(model, args, kwargs)` or a `Built`. The registry is a
plain dict filled at import time, so a user's `--workload-file` registers its workloads by
being imported, in the parent (for planning) and again in each worker (for running).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.model.errors import UserError

SIZES = ("tiny", "full")
DEFAULT_SCENARIOS = ("forward", "train")


class UnknownWorkloadError(UserError, ValueError):
    pass


class WorkloadFileError(UserError, ValueError):
    pass


@dataclass(frozen=True)
class WorkloadContext:
    """What a factory is asked to build for. `options` carries workload-specific knobs
    (prompt length, resolution, ...) so the contract stays four fields wide."""

    device: str
    dtype: Any  # torch.dtype; Any so this module imports without torch
    batch_size: int
    size: str = "tiny"
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def torch_device(self):
        import torch

        return torch.device(self.device)


@dataclass
class Built:
    """What a factory produced, normalised. `extras` is free-form state for scenarios that
    need more than (model, args) (an LLM's cache, a scheduler, ...)."""

    model: Any
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    units_per_call: float | None = None  # overrides the workload's default (batch_size)


@dataclass(frozen=True)
class Workload:
    name: str
    factory: Callable[[WorkloadContext], Any]
    unit: str = "samples"
    batch_size: int = 1
    scenarios: tuple[str, ...] = DEFAULT_SCENARIOS
    sizes: tuple[str, ...] = SIZES
    devices: tuple[str, ...] | None = None  # None: any device
    loss: Callable[[Any], Any] | None = None  # train scenario: output -> scalar loss
    optimizer: str = "adamw"
    description: str = ""
    source: str = ""  # module or file it came from

    def build(self, ctx: WorkloadContext) -> Built:
        produced = self.factory(ctx)
        return normalise_built(produced, self.name)


def normalise_built(produced: Any, name: str) -> Built:
    if isinstance(produced, Built):
        return produced
    if isinstance(produced, tuple) and len(produced) in (2, 3):
        model, args = produced[0], produced[1]
        kwargs = produced[2] if len(produced) == 3 else {}
        if not isinstance(args, (tuple, list)):
            args = (args,)
        if not isinstance(kwargs, dict):
            raise TypeError(f"workload {name!r}: kwargs must be a dict, got {type(kwargs).__name__}")
        return Built(model=model, args=tuple(args), kwargs=kwargs)
    raise TypeError(
        f"workload {name!r}: factory must return (model, args), (model, args, kwargs) or Built, "
        f"got {type(produced).__name__}"
    )


WORKLOADS: dict[str, Workload] = {}


def workload(
    name: str,
    *,
    unit: str = "samples",
    batch_size: int = 1,
    scenarios: Sequence[str] = DEFAULT_SCENARIOS,
    sizes: Sequence[str] = SIZES,
    devices: Sequence[str] | None = None,
    loss: Callable[[Any], Any] | None = None,
    optimizer: str = "adamw",
    description: str = "",
) -> Callable[[Callable], Callable]:
    """Register `factory(ctx)` as workload `name`. Returns the factory unchanged."""
    bad = [s for s in sizes if s not in SIZES]
    if bad:
        raise ValueError(f"workload {name!r}: unknown size(s) {bad}; sizes are {SIZES}")

    def register(factory: Callable) -> Callable:
        WORKLOADS[name] = Workload(
            name=name,
            factory=factory,
            unit=unit,
            batch_size=int(batch_size),
            scenarios=tuple(scenarios),
            sizes=tuple(sizes),
            devices=tuple(devices) if devices else None,
            loss=loss,
            optimizer=optimizer,
            description=description or (factory.__doc__ or "").strip().split("\n")[0],
            source=getattr(factory, "__module__", ""),
        )
        return factory

    return register


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        close = difflib.get_close_matches(name, WORKLOADS, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownWorkloadError(
            f"unknown workload {name!r}{hint}; `compilebench list` shows the registered workloads"
        ) from None


def import_workload_module(module: str) -> None:
    importlib.import_module(module)


def import_workloads(spec: Mapping[str, Any]) -> None:
    """Register the workloads a worker-side step names: its `workload_modules` and
    `workload_files` (a fresh process starts with an empty registry)."""
    for module in spec.get("workload_modules", []):
        import_workload_module(module)
    for path in spec.get("workload_files", []):
        load_workload_file(path)


def load_workload_file(path: str | Path) -> list[str]:
    """Import a user's Python file so its @workload factories register. Returns the names it
    added. The module gets a stable name derived from the path so a worker process that
    imports the same file registers the same workloads."""
    path = Path(path).resolve()
    if not path.is_file():
        raise WorkloadFileError(f"--workload-file {path}: no such file; pass the path of a .py file")
    if path.suffix != ".py":
        raise WorkloadFileError(f"--workload-file {path}: not a .py file; pass a Python file with @workload factories")
    before = set(WORKLOADS)
    mod_name = "compilebench_user_" + "".join(c if c.isalnum() else "_" for c in path.stem) + "_" + hashlib.sha1(str(path).encode()).hexdigest()[:8]
    if mod_name in sys.modules:
        return sorted(n for n in WORKLOADS if WORKLOADS[n].source == mod_name)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise WorkloadFileError(f"--workload-file {path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a user's file: report where, not a traceback
        del sys.modules[mod_name]
        raise WorkloadFileError(f"--workload-file {path}: importing it raised {type(exc).__name__}: {exc}") from exc
    added = sorted(set(WORKLOADS) - before)
    if not added:
        raise WorkloadFileError(f"--workload-file {path}: defines no workloads; decorate a factory with @workload('name')")
    return added
