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


class UnknownOptionError(UserError, ValueError):
    """An --option (or a suite entry's option) that the workload does not declare."""


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
    options: Mapping[str, str] = field(default_factory=dict)  # option name -> what it sets (None declared: none)

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
    options: Mapping[str, str] | Sequence[str] = (),
) -> Callable[[Callable], Callable]:
    """Register `factory(ctx)` as workload `name`. Returns the factory unchanged.

    `options`: the `ctx.options` keys the factory reads, name -> one line on what it sets
    (or just the names). They are checked before any worker starts: an --option or suite
    option the workload does not declare is a one-line error naming the ones it has, so a
    typo never runs (and never lands in a case id). A workload that declares none takes none."""
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
            options=dict(options) if isinstance(options, Mapping) else dict.fromkeys(options, ""),
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


def _declared(wl: Workload) -> str:
    return ", ".join(sorted(wl.options)) if wl.options else "none"


def check_options(wl: Workload, options: Mapping[str, Any]) -> None:
    """Every key must be one the workload declares (UnknownOptionError names them)."""
    unknown = sorted(set(options) - set(wl.options))
    if unknown:
        close = difflib.get_close_matches(unknown[0], wl.options, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UnknownOptionError(f"workload {wl.name} has no option {unknown[0]!r}{hint}; its options: {_declared(wl)}")


def options_for(wl: Workload, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The command-line options that apply to `wl`: those it declares. A selection of several
    workloads (a suite) takes an option meant for some of them; check_selection_options makes
    sure each key is meant for at least one."""
    return {k: v for k, v in overrides.items() if k in wl.options}


def check_selection_options(workloads: Sequence[Workload], overrides: Mapping[str, Any]) -> None:
    """Each --option key must be declared by at least one workload of the selection."""
    if len(workloads) == 1:
        check_options(workloads[0], overrides)
        return
    for key in overrides:
        if not any(key in wl.options for wl in workloads):
            declared = "; ".join(f"{wl.name}: {_declared(wl)}" for wl in workloads)
            raise UnknownOptionError(f"--option {key}: no workload of the selection has option {key!r} ({declared})")


def import_workload_module(module: str) -> None:
    importlib.import_module(module)


def import_workloads(spec: Mapping[str, Any]) -> None:
    """Register the workloads a worker-side step names: its `workload_modules` and
    `workload_files` (a fresh process starts with an empty registry)."""
    for module in spec.get("workload_modules", []):
        import_workload_module(module)
    for path in spec.get("workload_files", []):
        load_workload_file(path, override=True)  # the parent already refused an unwanted override


def load_workload_file(path: str | Path, override: bool = False) -> list[str]:
    """Import a user's Python file so its @workload factories register. Returns the names it
    added. The module gets a stable name derived from the path so a worker process that
    imports the same file registers the same workloads.

    A file that redefines a workload already registered (a built-in, or another file's) is
    refused unless `override` (--override-workloads): its numbers would otherwise go into the
    history under the built-in's name without anyone asking for it."""
    path = Path(path).resolve()
    if not path.is_file():
        raise WorkloadFileError(f"--workload-file {path}: no such file; pass the path of a .py file")
    if path.suffix != ".py":
        raise WorkloadFileError(f"--workload-file {path}: not a .py file; pass a Python file with @workload factories")
    before = dict(WORKLOADS)
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
    replaced = sorted(n for n in before if WORKLOADS[n] is not before[n])
    if replaced and not override:
        WORKLOADS.clear()  # the registry as it was, and the file not imported: nothing half-loaded
        WORKLOADS.update(before)
        del sys.modules[mod_name]
        name = replaced[0]
        raise WorkloadFileError(f"--workload-file {path} redefines workload {name!r} (from {before[name].source}); "
                                "rename it, or pass --override-workloads to replace it (its results then go into "
                                "the history under that name)")
    added = sorted(set(WORKLOADS) - set(before)) + replaced
    if not added:
        raise WorkloadFileError(f"--workload-file {path}: defines no workloads; decorate a factory with @workload('name')")
    return added
