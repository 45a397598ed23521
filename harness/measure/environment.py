"""Environment capture: what a result depends on besides the code under test."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

# timm and torchvision: the timm suites build with them, and a timm or torchvision change moves
# those figures (expected files key on the packages a suite names, harness/analysis/expected.py)
PACKAGES = ("torch", "triton", "pytorch-triton", "transformers", "diffusers", "timm", "torchvision", "numpy", "compilebench")


# a folder set here is one Inductor cache shared by every case of the run (FX graphs,
# Triton kernels, autotune results): a warm-cache run, e.g. max-autotune reusing an earlier
# run's autotuning. Unset (the default), each case gets an empty cache and compiles cold.
# The runner sets the worker's cache from it; workloads read it to say which cache they had.
SHARED_CACHE_ENV = "COMPILEBENCH_COMPILE_CACHE_DIR"


def default_cache_root() -> Path:
    """Where compilebench keeps caches that outlive a run on this machine (the CPU ISA probe
    answer, ...): $XDG_CACHE_HOME/compilebench, else ~/.cache/compilebench."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "compilebench"


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def harness_git_commit() -> str | None:
    """The commit of the compilebench checkout that ran (None when installed from a wheel)."""
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
        commit = out.stdout.strip()
        if not commit:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5, check=False,
        ).stdout.strip()
        return commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def capture_environment(devices: list[str] | None = None) -> dict[str, Any]:
    """Versions, host, CPU and the devices in use. Imports torch (the runner's parent does
    this once per run, not per case)."""
    from harness.measure.devices import cpu_model_name, parse_device

    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "host": socket.gethostname(),
        "cpu_model": cpu_model_name(),
        "cpu_count": os.cpu_count(),
        "packages": package_versions(),
        "git_commit": harness_git_commit(),
    }
    try:
        import torch

        env["torch_version"] = torch.__version__
        env["torch_cuda"] = torch.version.cuda
        env["torch_hip"] = getattr(torch.version, "hip", None)
        env["torch_git"] = getattr(torch.version, "git_version", None)
        env["torch_num_threads"] = torch.get_num_threads()
    except ImportError:  # pragma: no cover - torch is a hard dependency
        env["torch_version"] = None
    from harness.measure.capabilities import capabilities_summary

    # which version-dependent features this torch/transformers/diffusers offer (skips cite them)
    env["capabilities"] = capabilities_summary()
    env["devices"] = {}
    for spec in devices or []:
        dev = parse_device(spec)
        avail = dev.availability()
        env["devices"][spec] = dev.describe() if avail.available else {"available": False, "reason": avail.reason}
    return env
