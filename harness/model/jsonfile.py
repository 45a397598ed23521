"""JSON file helpers: read an input file with one clear error for every way it can be wrong;
make a value writable as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json(path: str | Path, error: type[Exception], what: str, missing_hint: str) -> Any:
    """Parsed JSON of `path`; raises `error` naming the file, what it should be, and the fix."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise error(f"{path}: no such {what}; {missing_hint}") from None
    except (OSError, ValueError) as exc:
        raise error(f"{path}: not a readable {what} ({exc})") from None


def json_safe(obj: Any) -> Any:
    """NaN/Inf are not JSON: store them as None (and keep the file loadable everywhere)."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
