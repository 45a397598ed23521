"""The layer rule of harness/ (model -> measure -> run -> analysis|experiments -> report ->
interop -> cli) holds: import-linter checks the contracts declared in pyproject.toml."""

from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_harness_layers_import_one_way(monkeypatch):
    monkeypatch.chdir(ROOT)  # the contracts name packages importable from the project root
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0
