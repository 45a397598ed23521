"""The layer rule of harness/ (model -> measure -> run -> analysis|experiments -> report ->
interop -> cli) holds: import-linter checks the contracts declared in pyproject.toml."""

from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_harness_layers_import_one_way(monkeypatch):
    monkeypatch.chdir(ROOT)  # the contracts name packages importable from the project root
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


def test_no_module_imports_another_modules_private_names():
    """A leading underscore means "this module's own": never imported from elsewhere."""
    import ast

    offenders = []
    for path in sorted([*ROOT.glob("harness/**/*.py"), *ROOT.glob("compiler/*.py"), *ROOT.glob("suites/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            ours = isinstance(node, ast.ImportFrom) and (
                node.level > 0 or (node.module or "").split(".")[0] in ("harness", "compiler", "suites"))
            if ours:
                offenders += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                              if a.name.startswith("_") and not a.name.startswith("__")]
    assert offenders == []
