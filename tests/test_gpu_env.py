"""`tox -e bench-gpu` runs on the box's own torch, wherever it lives (.ci/host_torch.py).

The GPU box's torch is played by a stand-in venv whose own site-packages holds this test
interpreter's CPU torch (and torch's dependencies) as symlinks: exactly the situation where
`sitepackages = true` saw nothing, at the cost of seconds instead of a 200 MB torch install.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
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


def test_no_python_with_torch_is_a_one_line_error_naming_the_fix(monkeypatch):
    monkeypatch.setenv("COMPILEBENCH_TORCH_PYTHON", sys.executable + "-does-not-exist")
    with pytest.raises(host_torch.HostTorchError, match="COMPILEBENCH_TORCH_PYTHON=.*cannot `import torch`"):
        host_torch.find_host()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tox") is None and importlib.util.find_spec("tox") is None, reason="needs tox")
def test_bench_gpu_env_imports_the_box_torch_from_a_venv_and_installs_the_rest(tmp_path):
    import torch

    box_python = make_standin_box(tmp_path / "box")
    box_torch = subprocess.run([str(box_python), "-c", "import torch; print(torch.__file__)"], capture_output=True,
                               text=True, check=True).stdout.strip()
    assert box_torch.startswith(str(tmp_path / "box"))  # the stand-in holds torch itself
    env = {**os.environ, "COMPILEBENCH_TORCH_PYTHON": str(box_python)}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([sys.executable, "-m", "tox", "-e", "bench-gpu", "--notest", "--workdir", str(tmp_path / "tox")],
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
