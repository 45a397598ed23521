"""Installer of the `bench-gpu` tox env: the env runs on the box's own torch, at the same path.

tox calls this as the env's install_command (`python .ci/host_torch.py install {opts} {packages}`).

Why: a GPU box's CUDA torch lives in a venv, a conda env or the system python. tox's
`sitepackages = true` exposes only the *base* interpreter's site-packages, so a venv's or
conda env's torch is invisible inside the env; `pip --no-deps` then also leaves
transformers, diffusers, ruptures... uninstalled. Instead, on first use this script

1. finds the python that holds the box's torch: $COMPILEBENCH_TORCH_PYTHON, else the first
   `python3` / `python` on PATH (outside this env) whose `import torch` works;
2. checks it is the same Python minor version as the env (compiled extensions must match);
3. writes `compilebench_host_torch.pth` into the env's site-packages: the directory holding
   that torch and the box's site-packages directories are appended to sys.path, after the
   env's own packages;
4. writes constraints pinning torch, triton, pytorch-triton, nvidia-* and cuda-* to the
   versions the box has.

Every install then drops requirements on those packages (they are the box's), installs the
rest with pip under those constraints, after a `pip install --dry-run` proved that pip would
not install any of them; and it checks afterwards that `import torch` in the env still loads
the box's torch file. torch, triton and nvidia-* are never downloaded, upgraded or replaced.

    python .ci/host_torch.py install [pip options] REQUIREMENT...   (what tox runs)
    python .ci/host_torch.py show                                  (what the env is linked to)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

PTH_NAME = "compilebench_host_torch.pth"
STATE_NAME = "compilebench-host-torch.json"
# the box's packages: pinned to what is installed, never installed by this env
HOST_ONLY = re.compile(r"^(torch|triton|pytorch[-_.]triton([-_.].*)?|nvidia[-_.].*|cuda[-_.].*)$", re.IGNORECASE)

# run by each candidate interpreter: where its torch is and what the box has installed
PROBE = r"""
import importlib.metadata as md, json, os, sys
import torch
paths = [p for p in sys.path if p and os.path.isdir(p) and ("site-packages" in p or "dist-packages" in p)]
pins = {}
for dist in md.distributions():
    name = (dist.metadata["Name"] or "")
    if name:
        pins.setdefault(name, dist.version)
print(json.dumps({"python": sys.executable, "version": list(sys.version_info[:2]), "torch_file": torch.__file__,
                  "torch_version": torch.__version__, "cuda": torch.version.cuda, "site_dirs": paths, "dists": pins}))
"""


class HostTorchError(RuntimeError):
    """A box on which the env cannot be linked; the message says what to do."""


def env_site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def candidates() -> list[str]:
    """Pythons that may hold the box's torch, in the order they are tried."""
    explicit = os.environ.get("COMPILEBENCH_TORCH_PYTHON")
    if explicit:
        return [explicit]
    env_bin = Path(sys.executable).parent.resolve()
    found: list[str] = []
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or Path(directory).resolve() == env_bin:
            continue
        for name in ("python3", "python"):
            exe = shutil.which(name, path=directory)
            if exe and exe not in found:
                found.append(exe)
    return found


def probe(python: str) -> dict | None:
    try:
        out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def find_host() -> dict:
    tried = candidates()
    for python in tried:
        info = probe(python)
        if info:
            return info
    if os.environ.get("COMPILEBENCH_TORCH_PYTHON"):
        raise HostTorchError(f"COMPILEBENCH_TORCH_PYTHON={tried[0]} cannot `import torch`; point it at the python "
                             "whose torch should be benchmarked")
    raise HostTorchError("no python on PATH can `import torch` (tried: " + (", ".join(tried) or "none") + "); "
                         "set COMPILEBENCH_TORCH_PYTHON=/path/to/python, the python that holds this box's CUDA torch")


def link(host: dict) -> dict:
    """Write the .pth and the constraints; returns the state (also saved in the env)."""
    if tuple(host["version"]) != sys.version_info[:2]:
        want = ".".join(map(str, host["version"]))
        raise HostTorchError(f"the box's torch is installed for Python {want} ({host['python']}) but this tox env runs "
                             f"Python {sys.version_info[0]}.{sys.version_info[1]}: run tox with that interpreter, "
                             f"e.g. `{host['python']} -m pip install tox && {host['python']} -m tox -e bench-gpu`")
    torch_root = str(Path(host["torch_file"]).parent.parent)  # as the box imports it (no symlink resolution)
    dirs = [torch_root] + [d for d in host["site_dirs"] if d != torch_root]
    site = env_site_packages()
    # appended (addsitedir), so the env's own packages win and nested .pth files of the box
    # (editable installs) are honoured
    (site / PTH_NAME).write_text("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n")
    pins = {name: version for name, version in host["dists"].items() if HOST_ONLY.match(name)}
    state = {"host_python": host["python"], "torch_file": host["torch_file"], "torch_version": host["torch_version"],
             "cuda": host["cuda"], "dirs": dirs, "pins": pins}
    constraints = Path(sys.prefix) / "compilebench-host-constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
    state["constraints"] = str(constraints)
    (Path(sys.prefix) / STATE_NAME).write_text(json.dumps(state, indent=1))
    return state


def ensure_linked() -> dict:
    state_file = Path(sys.prefix) / STATE_NAME
    if state_file.exists() and (env_site_packages() / PTH_NAME).exists():
        return json.loads(state_file.read_text())
    state = link(find_host())
    print(f"host_torch: this env uses torch {state['torch_version']} (CUDA {state['cuda']}) from {state['torch_file']} "
          f"({state['host_python']}); pinned: {', '.join(sorted(state['pins'])) or 'nothing'}", flush=True)
    return state


def requirement_name(spec: str) -> str | None:
    """The project name of a requirement string (None for a path, URL or option)."""
    if spec.startswith("-") or "://" in spec or os.sep in spec or spec.endswith((".whl", ".tar.gz", ".zip")):
        return None
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    return match.group(1) if match else None


def split_args(args: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(pip options, requirements to install, requirements left to the box)."""
    options, keep, dropped = [], [], []
    takes_value = {"-c", "--constraint", "-r", "--requirement", "-e", "--editable", "-i", "--index-url",
                   "--extra-index-url", "-f", "--find-links", "--target", "--prefix", "--root"}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in takes_value and i + 1 < len(args):
            (keep if arg in ("-e", "--editable", "-r", "--requirement") else options).extend(args[i:i + 2])
            i += 2
            continue
        if arg.startswith("-"):
            options.append(arg)
        else:
            name = requirement_name(arg)
            (dropped if name and HOST_ONLY.match(name) else keep).append(arg)
        i += 1
    return options, keep, dropped


def pip(*args: str, capture: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=capture, text=True, check=False)


def would_install_host_packages(options: list[str], requirements: list[str], constraints: str) -> list[str]:
    """Names of box-only packages pip would install for `requirements` (a dry run)."""
    out = pip("install", "--dry-run", "--quiet", "--report", "-", "-c", constraints, *options, *requirements, capture=True)
    if out.returncode != 0:
        raise HostTorchError(f"pip cannot resolve {' '.join(requirements)} against the box's torch:\n{out.stderr[-3000:]}")
    report = json.loads(out.stdout)
    return [item["metadata"]["name"] + "==" + item["metadata"]["version"] for item in report.get("install", [])
            if HOST_ONLY.match(item["metadata"]["name"])]


def check_torch(state: dict) -> None:
    """`import torch` in this env must load the box's torch file."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__file__)"], capture_output=True, text=True,
                         check=False)
    loaded = out.stdout.strip()
    if out.returncode != 0 or Path(loaded).resolve() != Path(state["torch_file"]).resolve():
        raise HostTorchError(f"after the install, `import torch` loads {loaded or out.stderr[-500:]!r}, "
                             f"not the box's {state['torch_file']}")


def install(args: list[str]) -> int:
    state = ensure_linked()
    options, requirements, dropped = split_args(args)
    if dropped:
        print(f"host_torch: left to the box: {' '.join(dropped)} (torch {state['torch_version']} at "
              f"{state['torch_file']})", flush=True)
    # --no-deps (tox's install of the project itself): pip installs the named requirements only,
    # and none of them is a box package (split_args dropped those), so neither the dry run nor
    # the torch check can find anything; each cost an isolated build of an sdist or an
    # `import torch` (10.2 s of the env's 20.8 s setup on the 2-core CPU box, 2026-12-02)
    no_deps = "--no-deps" in options
    if requirements:
        forbidden = [] if no_deps else would_install_host_packages(options, requirements, state["constraints"])
        if forbidden:
            raise HostTorchError(f"pip would install {', '.join(forbidden)} for {' '.join(requirements)}; "
                                 "this env never replaces the box's torch, triton or nvidia-* packages")
        rc = pip("install", "-c", state["constraints"], *options, *requirements).returncode
        if rc:
            return rc
    if not no_deps:
        check_torch(state)
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("install", "show"):
        print("usage: host_torch.py install [pip options] REQUIREMENT... | host_torch.py show", file=sys.stderr)
        return 2
    try:
        if argv[0] == "show":
            print(json.dumps(ensure_linked(), indent=1))
            return 0
        return install(argv[1:])
    except HostTorchError as exc:
        print(f"host_torch: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
