"""The compilers under test: named, frozen compiler configurations.

A `CompilerConfig` says *how* to turn a callable into the callable that is measured. `eager`
is a config too, so the runner never special-cases "no compiler". Configs come from four
places, looked up in this order by `get_compiler(name)`:

1. the built-in matrix (`configs.builtin_configs`: inductor modes, aot_eager, cudagraphs,
   fullgraph / dynamic / in-place / regional variants);
2. `--compiler-file FILE.toml` (`load_compiler_files`);
3. the `compilebench.compilers` entry point group (installed plugins);
4. any backend registered with `torch._dynamo` under that name (third-party backends).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path

from harness.model.errors import UserError

from .backends import CompilerPluginError, dynamo_backend_config, ensure_backend, load_entry_points
from .configs import BACKEND_LOADERS, CompilerConfig, builtin_configs
from .regional import NotApplicableError
from .toml_loader import CompilerFileError, load_compiler_file


class UnknownCompilerError(UserError, ValueError):
    """Raised for a compiler name that is not registered."""


COMPILERS: dict[str, CompilerConfig] = {}


def register_compiler(config: CompilerConfig, *, replace: bool = False) -> CompilerConfig:
    if config.name in COMPILERS and not replace and COMPILERS[config.name] != config:
        raise ValueError(f"compiler {config.name!r} is already registered with a different definition")
    COMPILERS[config.name] = config
    return config


BACKEND_LOADERS.append(lambda backend: ensure_backend(backend, register_compiler))


def load_compiler_files(paths: Iterable[str | Path]) -> list[str]:
    """Register the configs of each TOML file (a file may redefine a built-in name on
    purpose, e.g. to change its options); returns the names registered."""
    names: list[str] = []
    for path in paths:
        for config in load_compiler_file(path):
            register_compiler(config, replace=True)
            names.append(config.name)
    return names


def get_compiler(name: str) -> CompilerConfig:
    if name in COMPILERS:
        return COMPILERS[name]
    load_entry_points(register_compiler)
    if name in COMPILERS:
        return COMPILERS[name]
    config = dynamo_backend_config(name)
    if config is not None:
        return register_compiler(config)
    close = difflib.get_close_matches(name, COMPILERS, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise UnknownCompilerError(
        f"unknown compiler {name!r}{hint}; `compilebench list` shows the registered compilers, "
        "--compiler-file FILE.toml adds your own, and any torch._dynamo backend name works"
    )


for _config in builtin_configs():
    register_compiler(_config)

__all__ = [
    "COMPILERS", "CompilerConfig", "CompilerFileError", "CompilerPluginError", "NotApplicableError",
    "UnknownCompilerError", "get_compiler", "load_compiler_files", "register_compiler",
]
