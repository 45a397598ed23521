"""tests/background.py's runs start when collection ends only for the tests whose fixtures
include a fixture named as the run's BACKGROUND key (tests/conftest.py). A fixture of another
name that reads BACKGROUND[key] still works, but its run starts on first use, in the
foreground, and its tests are not moved last: the whole run's time is added to the session."""

import ast
from pathlib import Path

from tests.background import BACKGROUND

TESTS = Path(__file__).resolve().parent


def _readers() -> dict[str, set[str]]:
    """BACKGROUND key -> the names of the test-module functions that read BACKGROUND[key]."""
    readers: dict[str, set[str]] = {}
    for path in sorted(TESTS.glob("test_*.py")):
        for func in ast.walk(ast.parse(path.read_text())):
            if not isinstance(func, ast.FunctionDef):
                continue
            for node in ast.walk(func):
                if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "BACKGROUND"
                        and isinstance(node.slice, ast.Constant)):
                    readers.setdefault(node.slice.value, set()).add(f"{path.name}:{func.name}")
    return readers


def test_every_background_run_is_read_by_a_fixture_of_its_own_name():
    readers = _readers()
    assert set(readers) == set(BACKGROUND), readers
    for key, funcs in readers.items():
        assert {f.rsplit(":", 1)[1] for f in funcs} == {key}, (key, funcs)
