"""Compilers contributed from outside the package: `torch._dynamo` backends by name and the
`compilebench.compilers` entry point group.

An entry point may name a `CompilerConfig`, a list of them, or a zero-argument callable
returning either; importing it may also register a Dynamo backend as a side effect (that
is why workers call `ensure_backend` before compiling: a worker gets the config as data,
not the plugin import).
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata
from typing import Any

from harness.model.errors import UserError

from .configs import CompilerConfig

ENTRY_POINT_GROUP = "compilebench.compilers"


class CompilerPluginError(UserError, ValueError):
    """A `compilebench.compilers` entry point that fails to load or yields no configs."""


_loaded_entry_points = False


def entry_point_configs(group: str = ENTRY_POINT_GROUP) -> list[CompilerConfig]:
    """Load every entry point of `group` and return the configs they provide."""
    out: list[CompilerConfig] = []
    for ep in metadata.entry_points(group=group):
        try:
            obj: Any = ep.load()
            if callable(obj) and not isinstance(obj, CompilerConfig):
                obj = obj()
        except Exception as exc:  # a third-party plugin: name it, do not dump its traceback
            raise CompilerPluginError(f"entry point {ep.name!r} ({ep.value}) in group {group} failed to load: "
                                      f"{type(exc).__name__}: {exc}") from exc
        configs = [obj] if isinstance(obj, CompilerConfig) else list(obj) if isinstance(obj, Iterable) else []
        if not configs or not all(isinstance(c, CompilerConfig) for c in configs):
            raise CompilerPluginError(f"entry point {ep.name!r} ({ep.value}) must give a CompilerConfig or a list of them")
        out.extend(configs)
    return out


def load_entry_points(register: Any) -> None:
    """Register the entry point configs once per process (`register` is the registry's)."""
    global _loaded_entry_points
    if _loaded_entry_points:
        return
    _loaded_entry_points = True
    for config in entry_point_configs():
        register(config, replace=True)


def dynamo_backends() -> list[str]:
    """Every backend name `torch.compile(backend=...)` accepts here, debug ones included."""
    import torch._dynamo

    return sorted(torch._dynamo.list_backends(exclude_tags=()))


def dynamo_backend_config(name: str) -> CompilerConfig | None:
    """A config for a backend registered with torch._dynamo under `name`, else None."""
    try:
        names = dynamo_backends()
    except Exception:  # torch missing or broken: the caller reports "unknown compiler"
        return None
    if name not in names:
        return None
    return CompilerConfig(name, backend=name, description=f"torch._dynamo backend {name!r}")


def ensure_backend(backend: str | None, register: Any) -> None:
    """Make sure `backend` is known to Dynamo in this process, loading plugins if needed
    (`register` is the registry's, as for load_entry_points)."""
    if backend is None:
        return
    from torch._dynamo.backends.registry import lookup_backend

    try:
        lookup_backend(backend)
        return
    except Exception:
        pass
    load_entry_points(register)  # a plugin may register the backend on import
