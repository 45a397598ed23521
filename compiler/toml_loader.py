"""Compiler configs from a TOML file (`--compiler-file`), so users add configs without
editing the package:

    [my-inductor-freezing]
    backend = "inductor"          # any torch._dynamo backend name; omit for inductor
    mode = "max-autotune-no-cudagraphs"
    fullgraph = true
    dynamic = "automatic"         # true | false | "automatic"
    inplace = false               # model.compile() instead of torch.compile(model)
    regional = false
    description = "..."
    [my-inductor-freezing.options]
    freezing = true

Every table is one config; its name is the table name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.model.errors import UserError

from .configs import DYNAMIC_CHOICES, CompilerConfig, freeze_options

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "backend": (str,),
    "mode": (str,),
    "fullgraph": (bool,),
    "dynamic": (bool, str),
    "inplace": (bool,),
    "regional": (bool,),
    "description": (str,),
    "options": (dict,),
}


class CompilerFileError(UserError, ValueError):
    """A `--compiler-file` that cannot be read or holds an invalid config."""


def _dynamic(value: Any, where: str) -> bool | None:
    if isinstance(value, bool):
        return value
    key = str(value).lower()
    if key not in DYNAMIC_CHOICES:
        raise CompilerFileError(f"{where}: dynamic = {value!r}; use true, false or \"automatic\"")
    return DYNAMIC_CHOICES[key]


def config_from_table(name: str, table: dict[str, Any], where: str) -> CompilerConfig:
    """One TOML table -> CompilerConfig, with messages that name the file and the key."""
    if not isinstance(table, dict):
        raise CompilerFileError(f"{where}: top-level key {name!r} must be a table [{name}], not a value")
    unknown = sorted(set(table) - set(FIELD_TYPES))
    if unknown:
        raise CompilerFileError(f"{where}: [{name}] has unknown key(s) {unknown}; known: {sorted(FIELD_TYPES)}")
    for key, value in table.items():
        if not isinstance(value, FIELD_TYPES[key]):
            kinds = " or ".join(t.__name__ for t in FIELD_TYPES[key])
            raise CompilerFileError(f"{where}: [{name}] {key} = {value!r} must be {kinds}")
    backend = table.get("backend", "inductor")
    return CompilerConfig(
        name=name,
        backend=None if backend == "eager" else backend,
        mode=table.get("mode"),
        options=freeze_options(table.get("options")),
        fullgraph=table.get("fullgraph", False),
        dynamic=_dynamic(table["dynamic"], f"{where}: [{name}]") if "dynamic" in table else None,
        inplace=table.get("inplace", False),
        regional=table.get("regional", False),
        description=table.get("description", f"from {Path(where).name}"),
    )


def load_compiler_file(path: str | Path) -> list[CompilerConfig]:
    """Parse `path`; malformed TOML raises CompilerFileError naming the file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CompilerFileError(f"--compiler-file {path}: no such file; pass a TOML file of [name] tables") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CompilerFileError(f"--compiler-file {path}: cannot be read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # Python 3.13+ has exc.lineno; older versions only put "(at line N, column M)" in the text
        found = re.search(r"at line (\d+)", str(exc))
        line = getattr(exc, "lineno", None) or (int(found.group(1)) if found else None)
        msg = getattr(exc, "msg", None) or str(exc)
        at = f":{line}" if line else ""
        raise CompilerFileError(f"--compiler-file {path}{at}: invalid TOML: {msg}") from None
    if not data:
        raise CompilerFileError(f"--compiler-file {path}: defines no compilers; add a table such as [my-config]")
    return [config_from_table(name, table, str(path)) for name, table in data.items()]
