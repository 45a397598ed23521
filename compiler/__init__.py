"""The compilers under test: named, frozen compiler configurations.

A `CompilerConfig` says *how* to turn a callable into the callable that is measured. `eager`
is a config too, so the runner never special-cases "no compiler". Adding a config is one
`register_compiler(CompilerConfig(...))` call; the full matrix (modes, backends, AOT paths,
TOML files, entry points) builds on the same registry.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


class UnknownCompilerError(ValueError):
    """Raised for a compiler name that is not registered."""


def _freeze(options: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((options or {}).items()))


@dataclass(frozen=True)
class CompilerConfig:
    """How to compile. Frozen and hashable so it can key cases and results."""

    name: str
    backend: str | None = "inductor"  # None means eager: nothing is compiled
    mode: str | None = None
    options: tuple[tuple[str, Any], ...] = field(default_factory=tuple)
    fullgraph: bool = False
    dynamic: bool | None = None
    description: str = ""

    @property
    def is_eager(self) -> bool:
        return self.backend is None

    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)

    def compile(self, fn: Callable) -> Callable:
        """Wrap `fn` (a module or a function) the way this config says. Lazy: nothing is
        compiled until the first call, which is what the worker times as cold compile."""
        if self.is_eager:
            return fn
        import torch

        kwargs: dict[str, Any] = {"backend": self.backend, "fullgraph": self.fullgraph, "dynamic": self.dynamic}
        if self.mode is not None:
            kwargs["mode"] = self.mode
        if self.options:
            kwargs["options"] = self.options_dict()
        return torch.compile(fn, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["options"] = self.options_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompilerConfig:
        data = dict(data)
        data["options"] = _freeze(data.get("options"))
        return cls(**data)

    def fingerprint(self) -> str:
        """Stable string of everything that changes what is compiled (for run metadata)."""
        return json.dumps(self.to_dict(), sort_keys=True, default=str)


COMPILERS: dict[str, CompilerConfig] = {}


def register_compiler(config: CompilerConfig, *, replace: bool = False) -> CompilerConfig:
    if config.name in COMPILERS and not replace and COMPILERS[config.name] != config:
        raise ValueError(f"compiler {config.name!r} is already registered with a different definition")
    COMPILERS[config.name] = config
    return config


def get_compiler(name: str) -> CompilerConfig:
    try:
        return COMPILERS[name]
    except KeyError:
        close = difflib.get_close_matches(name, COMPILERS, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownCompilerError(
            f"unknown compiler {name!r}{hint}; `compilebench list` shows the registered compilers"
        ) from None


register_compiler(CompilerConfig("eager", backend=None, description="no compilation: the eager baseline"))
register_compiler(CompilerConfig("inductor", description="torch.compile default mode (TorchInductor)"))
