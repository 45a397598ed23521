"""`tox -e bench-gpu` runs on the box's own torch, wherever it lives (.ci/host_torch.py).

By default (offline, seconds): the linking itself. A stand-in box venv holds a tiny fake
torch package; a bare env venv (what tox creates) runs `.ci/host_torch.py show` against it
and must then import the box's torch file through the .pth, with its own packages still
first. No pip, no network, no real torch import.

Opt-in (COMPILEBENCH_TEST_TOX_ENV=1, needs the `tox` executable and a package index or
PIP_FIND_LINKS, minutes): the real `tox -e bench-gpu --notest` against a stand-in box whose
site-packages holds this interpreter's CPU torch as symlinks: exactly the situation where
`sitepackages = true` saw nothing. It pip-installs transformers, diffusers, pandas... so it
is never part of the default suite (the test extra has no tox; CI's PATH may have a shim).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / ".ci"))
import host_torch  # noqa: E402


def _requirement_names(dist: importlib.metadata.Distribution) -> list[str]:
    names = []
    for req in dist.requires or []:
        if "extra ==" in req:
            continue
        match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
        if match:
            names.append(match.group(1))
    return names


def link_distribution(name: str, site: Path, seen: set[str]) -> None:
    """Symlink `name` and its (non-extra) requirements, dist-info included, into `site`."""
    key = name.lower().replace("_", "-")
    if key in seen:
        return
    seen.add(key)
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return
    root = Path(dist.locate_file(""))
    for top in {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
        target = site / top
        if not target.exists() and (root / top).exists():
            target.symlink_to(root / top)
    for req in _requirement_names(dist):
        link_distribution(req, site, seen)


def make_standin_box(path: Path) -> Path:
    """A venv holding torch in its own site-packages; returns its python."""
    venv.EnvBuilder(with_pip=False).create(path)
    python = path / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    link_distribution("torch", site, set())
    return python


def test_split_args_leaves_the_box_packages_to_the_box():
    options, keep, dropped = host_torch.split_args(
        ["--force-reinstall", "torch>=2.6", "numpy>=1.26", "nvidia-cublas-cu12==12.4", "triton", "pytorch-triton-rocm",
         "cuda-bindings>=12", "transformers>=4.50", "/tmp/x/compilebench-0.1.0.tar.gz", "-c", "c.txt"])
    assert options == ["--force-reinstall", "-c", "c.txt"]
    assert keep == ["numpy>=1.26", "transformers>=4.50", "/tmp/x/compilebench-0.1.0.tar.gz"]
    assert dropped == ["torch>=2.6", "nvidia-cublas-cu12==12.4", "triton", "pytorch-triton-rocm", "cuda-bindings>=12"]


@pytest.mark.parametrize("no_deps", [True, False])
def test_the_projects_no_deps_install_skips_the_dry_run_and_the_torch_check(monkeypatch, no_deps):
    """tox installs the project itself with --no-deps: pip can install nothing else, so the dry
    run (an sdist's isolated build) and the `import torch` check are skipped; a deps install
    keeps both."""
    calls: list[str] = []
    monkeypatch.setattr(host_torch, "ensure_linked", lambda: {"constraints": "c.txt", "torch_version": "x",
                                                               "torch_file": "/box/torch/__init__.py"})
    monkeypatch.setattr(host_torch, "would_install_host_packages", lambda *a: calls.append("dry-run") or [])
    monkeypatch.setattr(host_torch, "check_torch", lambda state: calls.append("check"))
    monkeypatch.setattr(host_torch, "pip", lambda *a, **k: calls.append("install " + " ".join(a))
                        or subprocess.CompletedProcess(a, 0))
    args = ["--force-reinstall", "--no-deps", "/x/compilebench-0.1.0-py3-none-any.whl"] if no_deps else ["numpy>=1.26"]
    assert host_torch.install(args) == 0
    if no_deps:
        assert calls == ["install install -c c.txt --force-reinstall --no-deps /x/compilebench-0.1.0-py3-none-any.whl"]
    else:
        assert calls == ["dry-run", "install install -c c.txt numpy>=1.26", "check"]


def test_no_python_with_torch_is_a_one_line_error_naming_the_fix(monkeypatch):
    monkeypatch.setenv("COMPILEBENCH_TORCH_PYTHON", sys.executable + "-does-not-exist")
    with pytest.raises(host_torch.HostTorchError, match="COMPILEBENCH_TORCH_PYTHON=.*cannot `import torch`"):
        host_torch.find_host()


FAKE_TORCH = {"torch/__init__.py": "__version__ = '9.9.9+standin'\nfrom torch import version\n",
              "torch/version.py": "cuda = '12.8'\n",
              "torch-9.9.9+standin.dist-info/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 9.9.9+standin\n",
              "shadowed.py": "WHERE = 'box'\n"}


def _purelib(python: Path) -> Path:
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())


def _bare_venv(path: Path) -> Path:
    """A venv as tox makes one (no system site-packages, no pip needed here)."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(path)
    return path / "bin" / "python"


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COMPILEBENCH_TORCH_PYTHON", "PYTHONHOME")}
    return {**env, **extra}


def test_env_links_the_box_torch_from_a_venv_offline(tmp_path):
    box = _bare_venv(tmp_path / "box")
    box_site = _purelib(box)
    for rel, text in FAKE_TORCH.items():
        (box_site / rel).parent.mkdir(parents=True, exist_ok=True)
        (box_site / rel).write_text(text)
    env = _bare_venv(tmp_path / "env")
    env_site = _purelib(env)
    (env_site / "shadowed.py").write_text("WHERE = 'env'\n")
    check = "import json, torch, shadowed; print(json.dumps([torch.__file__, torch.__version__, shadowed.WHERE]))"
    before = subprocess.run([str(env), "-c", check], capture_output=True, text=True, env=_clean_env(), cwd=tmp_path)
    assert before.returncode != 0 and "No module named 'torch'" in before.stderr  # the venv alone cannot see it

    shown = subprocess.run([str(env), str(ROOT / ".ci" / "host_torch.py"), "show"], capture_output=True, text=True,
                           env=_clean_env(COMPILEBENCH_TORCH_PYTHON=str(box)), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    state = json.loads(shown.stdout[shown.stdout.index("{"):])
    assert state["torch_version"] == "9.9.9+standin" and state["pins"] == {"torch": "9.9.9+standin"}
    assert (tmp_path / "env" / "compilebench-host-constraints.txt").read_text() == "torch==9.9.9+standin\n"

    after = subprocess.run([str(env), "-c", check], capture_output=True, text=True, env=_clean_env(), cwd=tmp_path)
    assert after.returncode == 0, after.stderr
    torch_file, version, where = json.loads(after.stdout)
    assert torch_file == str(box_site / "torch" / "__init__.py")  # the box's very file, not a copy
    assert version == "9.9.9+standin"
    assert where == "env"  # appended after the env's own packages: the env's versions win
    assert not (env_site / "torch").exists()


def test_a_box_on_another_python_minor_is_refused_with_the_fix(monkeypatch):
    other = [sys.version_info[0], sys.version_info[1] + 1]
    with pytest.raises(host_torch.HostTorchError, match=r"installed for Python .* run tox with that interpreter"):
        host_torch.link({"version": other, "python": "/box/bin/python", "torch_file": "/box/torch/__init__.py",
                         "site_dirs": [], "dists": {}, "torch_version": "x", "cuda": None})


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("COMPILEBENCH_TEST_TOX_ENV") != "1",
                    reason="builds the real bench-gpu tox env (pip, minutes): set COMPILEBENCH_TEST_TOX_ENV=1")
def test_bench_gpu_env_imports_the_box_torch_from_a_venv_and_installs_the_rest(tmp_path):
    import torch

    tox = shutil.which("tox")  # the executable: this interpreter need not have tox installed
    if tox is None:
        pytest.fail("COMPILEBENCH_TEST_TOX_ENV=1 but no `tox` on PATH: pip install tox, or unset the variable")
    box_python = make_standin_box(tmp_path / "box")
    box_torch = subprocess.run([str(box_python), "-c", "import torch; print(torch.__file__)"], capture_output=True,
                               text=True, check=True).stdout.strip()
    assert box_torch.startswith(str(tmp_path / "box"))  # the stand-in holds torch itself
    env = {**os.environ, "COMPILEBENCH_TORCH_PYTHON": str(box_python)}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([tox, "-e", "bench-gpu", "--notest", "--workdir", str(tmp_path / "tox")],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    env_python = tmp_path / "tox" / "bench-gpu" / "bin" / "python"
    check = ("import json, torch, transformers, diffusers, ruptures, pandas, matplotlib, harness, compiler, suites;"
             "print(json.dumps({'torch': torch.__file__, 'version': torch.__version__, 'harness': harness.__file__}))")
    got = json.loads(subprocess.run([str(env_python), "-c", check], capture_output=True, text=True, check=True,
                                    env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd=tmp_path
                                    ).stdout.strip().splitlines()[-1])
    assert got["torch"] == box_torch  # the very file the box imports, not a copy, not a download
    assert got["version"] == torch.__version__
    assert got["harness"].startswith(str(tmp_path / "tox"))  # the env's own install of the project
    site = Path(got["harness"]).parent.parent
    box_only = ("torch", "torchgen", "functorch", "triton", "nvidia")
    assert not [p.name for p in site.iterdir() if re.split(r"[-_.]", p.name)[0].lower() in box_only]
