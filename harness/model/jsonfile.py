"""Read a JSON input file and turn every way it can be wrong into one clear error."""

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
