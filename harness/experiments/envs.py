"""Environments as an input: `--env NAME=PYTHON` or `--env NAME=SPEC`.

A compiler engineer compares builds, not just commits: `--env old=torch==2.12.1
--env new=/path/to/venv/bin/python`. An environment is one of:

- NAME=PYTHON: an interpreter (or an executable wrapper script) that has torch. A value
  with a path separator, or a command found on PATH, is taken as an interpreter.
- NAME=SPEC: pip requirement(s), e.g. `torch==2.12.1` or `"torch==2.12.1 numpy<2"`. The
  spec is installed once into a venv under `<cache>/envs/<slug>-<key>`, keyed by the spec,
  the base interpreter's version and the worker's own requirements, then reused: a cache hit
  costs a marker-file read and a version probe (well under 5 s; benchmarks/env_cache.py).
  `SPEC` alone (no NAME=, e.g. `--env torch==2.12.1`) names the env after the spec.

How the harness gets into the env: it is not pip-installed there (that would pin the
harness into the cache key and re-install it on every edit). Workers run with this
checkout's root on PYTHONPATH (harness.run.runner.worker_env), so the env only needs the
worker's runtime requirements (`WORKER_REQUIREMENTS`), which are installed beside the
spec. pip runs with the caller's environment, so `PIP_FIND_LINKS=/dir/of/wheels` (or a
pip.conf) makes it install from local wheels without downloading anything.

Each env's torch / triton / transformers / diffusers versions are probed with
importlib.metadata (no torch import: milliseconds) and go into the run file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.model.schema import RunFileError, write_json_atomic
from harness.run.runner import default_cache_root

# what a worker imports besides torch (harness.model/measure, compiler, suites.mlp)
WORKER_REQUIREMENTS = ("numpy",)
# bump when the layout of a cached env changes: old envs are then rebuilt, not misread
ENV_FORMAT = 1
MARKER = "compilebench-env.json"
VERSION_PACKAGES = ("torch", "triton", "pytorch-triton", "transformers", "diffusers", "numpy")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
INSTALL_TIMEOUT_S = 3600.0
VENV_TIMEOUT_S = 600.0

_PROBE = ("import importlib.metadata as m, json, platform, sys\n"
          "def v(name):\n"
          "    try:\n"
          "        return m.version(name)\n"
          "    except m.PackageNotFoundError:\n"
          "        return None\n"
          "print(json.dumps({'python_version': platform.python_version(), 'executable': sys.executable,\n"
          "                  'packages': {p: v(p) for p in sys.argv[1:]}}))\n")


class EnvError(RunFileError):
    """An environment that cannot be used or built; the message names the fix."""


@dataclass(frozen=True)
class EnvSpec:
    """What the user asked for: a name and either an interpreter or pip requirement(s)."""

    name: str
    python: str | None = None
    requirements: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return "python" if self.python else "spec"

    def describe(self) -> str:
        return self.python or " ".join(self.requirements)


@dataclass
class Env:
    """A ready environment: its interpreter and what is installed in it."""

    name: str
    python: str
    kind: str
    spec: str
    packages: dict[str, str | None] = field(default_factory=dict)
    python_version: str = ""
    cache_dir: str | None = None
    from_cache: bool = False
    ready_s: float = 0.0  # seconds to create or find it (the cache-hit figure)

    @property
    def torch(self) -> str | None:
        return self.packages.get("torch")

    def label(self) -> str:
        """'NAME (torch X)': how summaries name an env."""
        return f"{self.name} (torch {self.torch or '?'})"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "python": self.python, "kind": self.kind, "spec": self.spec,
                "packages": dict(self.packages), "python_version": self.python_version, "cache_dir": self.cache_dir,
                "from_cache": self.from_cache, "ready_s": round(self.ready_s, 3)}


def parse_env(text: str) -> EnvSpec:
    """`NAME=PYTHON`, `NAME=SPEC` or a bare `SPEC` (named after itself)."""
    text = text.strip()
    if _is_bare_requirement(text):  # 'torch==2.12.1', 'torch>=2.12', 'torch<2.13 numpy<2': no NAME=
        return EnvSpec(_slug(text), requirements=tuple(_requirements(text, _slug(text))))
    name, sep, value = text.partition("=")
    if not sep:
        if _looks_like_python(text):
            name, value = _slug(text), text
        else:
            raise EnvError(f"--env {text!r} is not NAME=PYTHON or NAME=SPEC; e.g. --env old=torch==2.12.1 "
                           f"or --env mine=/path/to/venv/bin/python")
    name, value = name.strip(), value.strip()
    if not NAME_RE.match(name):
        raise EnvError(f"--env name {name!r} must be letters, digits and . _ + - (e.g. --env t212=torch==2.12.1)")
    if not value:
        raise EnvError(f"--env {name}= has no value; give an interpreter path or a pip requirement")
    if _looks_like_python(value):
        return EnvSpec(name, python=value)
    return EnvSpec(name, requirements=tuple(_requirements(value, name)))


def _is_bare_requirement(text: str) -> bool:
    """True when the whole text is pip requirement(s) with a version operator: splitting it at
    the first '=' would cut 'torch>=2.12' into a name 'torch>' and a value '2.12'."""
    from packaging.requirements import InvalidRequirement, Requirement

    items = text.split()
    if not items:
        return False
    try:
        reqs = [Requirement(item) for item in items]
    except InvalidRequirement:
        return False
    # 'old=torch==2.1' is no requirement (InvalidRequirement); a plain 'torch' without an
    # operator is not taken either: it reads like a NAME missing its '=' and gets that error
    return any(r.specifier or r.url for r in reqs)


def parse_envs(texts: Sequence[str], minimum: int = 1) -> list[EnvSpec]:
    specs = [parse_env(t) for t in texts]
    if len(specs) < minimum:
        raise EnvError(f"need at least {minimum} --env (got {len(specs)}); e.g. --env old=torch==2.12.1 "
                       f"--env new=torch==2.13.0")
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise EnvError(f"--env name {spec.name!r} is given twice; give each environment its own name")
        seen.add(spec.name)
    return specs


# each operator its own word in a slug: 'torch<2.13' and 'torch==2.13' must not share a name
# (or a cache folder prefix); longest first so '<=' is not read as '<' then '='
_OPERATOR_WORDS = (("===", "-arb-"), ("==", "-"), (">=", "-ge-"), ("<=", "-le-"), ("~=", "-compat-"),
                   ("!=", "-ne-"), (">", "-gt-"), ("<", "-lt-"))


def _slug(text: str) -> str:
    for operator, word in _OPERATOR_WORDS:
        text = text.replace(operator, word)
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip("-")[:60] or "env"


def _looks_like_python(value: str) -> bool:
    if os.sep in value or value.startswith(("~", ".")):
        return True
    return bool(re.match(r"^python[0-9.]*$", value)) and shutil.which(value) is not None


def _requirements(value: str, name: str) -> list[str]:
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for item in value.split():
        try:
            Requirement(item)
        except InvalidRequirement as exc:
            raise EnvError(f"--env {name}={value!r}: {item!r} is not a pip requirement ({exc}); "
                           f"e.g. torch==2.12.1, or give an interpreter path") from None
        out.append(item)
    return out


# ---------------------------------------------------------------- resolving

ProgressFn = Callable[[str, str], None]  # (stage, message); stage: venv, install, probe, done


def envs_root() -> Path:
    """The env cache: $COMPILEBENCH_ENV_CACHE, else <user cache>/compilebench/envs."""
    override = os.environ.get("COMPILEBENCH_ENV_CACHE")
    return Path(override) if override else default_cache_root() / "envs"


def cache_key(spec: EnvSpec, base_python: str = sys.executable) -> str:
    """Same spec + same base Python + same worker requirements -> same venv."""
    payload = {"requirements": sorted(spec.requirements), "python": _python_version(base_python),
               "worker": list(WORKER_REQUIREMENTS), "format": ENV_FORMAT}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def env_dir(spec: EnvSpec, root: Path | None = None, base_python: str = sys.executable) -> Path:
    slug = _slug("_".join(spec.requirements))[:40]
    return (root or envs_root()) / f"{slug}-{cache_key(spec, base_python)}"


def resolve_env(spec: EnvSpec, progress: ProgressFn | None = None, root: Path | None = None,
                base_python: str = sys.executable) -> Env:
    """A ready Env: an interpreter as given, or the cached venv of a spec (built if missing)."""
    started = time.perf_counter()
    if spec.python:
        python = _check_python(spec)
        env = Env(spec.name, python, "python", spec.python, cache_dir=None)
    else:
        env = _cached_or_built(spec, progress, root or envs_root(), base_python)
    info = probe_packages(env.python)
    env.packages, env.python_version = info["packages"], info["python_version"]
    if not env.torch:
        raise EnvError(f"--env {spec.name}: {env.python} has no torch installed; install torch there or pass "
                       f"a spec such as {spec.name}=torch==2.13.0")
    env.ready_s = time.perf_counter() - started
    if progress:
        progress("done", f"{env.name}: torch {env.torch} ready in {env.ready_s:.2f}s"
                         f"{' (cached)' if env.from_cache else ''}")
    return env


def resolve_envs(specs: Sequence[EnvSpec], progress: ProgressFn | None = None, root: Path | None = None) -> list[Env]:
    for spec in specs:  # a typo in the last --env fails now, not after building the first ones
        if spec.python:
            _check_python(spec)
    return [resolve_env(s, progress, root) for s in specs]


def _check_python(spec: EnvSpec) -> str:
    path = os.path.expanduser(spec.python or "")
    found = shutil.which(path) if os.sep not in path else (path if os.access(path, os.X_OK) else None)
    if not found:
        raise EnvError(f"--env {spec.name}={spec.python}: no such executable; pass the path of a Python "
                       f"(e.g. /path/to/venv/bin/python) or a pip spec such as torch==2.13.0")
    # keep the path as given (a venv's bin/python is a symlink: resolving it would leave the venv)
    return str(Path(found).absolute())


def probe_packages(python: str, packages: Sequence[str] = VERSION_PACKAGES) -> dict[str, Any]:
    """Versions of the packages that matter, read from the env's metadata (no torch import)."""
    try:
        out = subprocess.run([python, "-c", _PROBE, *packages], capture_output=True, text=True, timeout=60,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"{python}: cannot run it ({exc}); pass a working Python interpreter") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvError(f"{python}: probing its packages failed ({last}); pass a working Python interpreter")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _python_version(python: str) -> str:
    if python == sys.executable:
        return ".".join(map(str, sys.version_info[:3]))
    return probe_packages(python, ())["python_version"]


def _cached_or_built(spec: EnvSpec, progress: ProgressFn | None, root: Path, base_python: str) -> Env:
    target = env_dir(spec, root, base_python)
    marker = _read_marker(target)
    if marker is None:
        root.mkdir(parents=True, exist_ok=True)
        with _lock(root / f".{target.name}.lock"):  # two runs building the same spec build it once
            marker = _read_marker(target)
            if marker is None:
                marker = _build(spec, target, progress, base_python)
                return _env_from_marker(spec, target, marker, from_cache=False)
    return _env_from_marker(spec, target, marker, from_cache=True)


def _env_from_marker(spec: EnvSpec, target: Path, marker: dict[str, Any], from_cache: bool) -> Env:
    return Env(spec.name, str(target / "bin" / "python"), "spec", " ".join(spec.requirements),
               cache_dir=str(target), from_cache=from_cache)


def _read_marker(target: Path) -> dict[str, Any] | None:
    """The marker is written last: a venv without it is a half-built one and is rebuilt."""
    try:
        data = json.loads((target / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if data.get("format") != ENV_FORMAT or not (target / "bin" / "python").exists():
        return None
    return data


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _build(spec: EnvSpec, target: Path, progress: ProgressFn | None, base_python: str) -> dict[str, Any]:
    """Create the venv beside its final place, install, then move it in: an interrupted
    build never leaves a venv that looks complete."""
    building = target.with_name(target.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    say = progress or (lambda stage, message: None)
    say("venv", f"creating venv for {spec.name} ({spec.describe()})")
    _check_call([base_python, "-m", "venv", *_venv_pip_flags(base_python), str(building)], spec, "creating the venv")
    # venvs embed their own path in scripts; the interpreter itself works after the move
    python = str(building / "bin" / "python")
    say("install", f"pip install {' '.join(spec.requirements)} (+ {', '.join(WORKER_REQUIREMENTS) or 'nothing'})")
    _stream([*_pip(base_python, python), "install", "--disable-pip-version-check", "--no-input", "--progress-bar",
             "off", *spec.requirements, *WORKER_REQUIREMENTS], spec, say)
    os.replace(building, target)
    marker = {"format": ENV_FORMAT, "requirements": list(spec.requirements), "worker": list(WORKER_REQUIREMENTS),
              "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "base_python": base_python}
    write_json_atomic(target / MARKER, marker)
    return marker


def _base_pip_drives_venv(base_python: str) -> bool:
    """pip >= 22.3 installs into another interpreter (`pip --python`): the venv then needs no
    pip of its own, which saves the ensurepip step (seconds, tens of seconds on a busy box)."""
    if base_python != sys.executable:
        return False
    # the installed version, read without `import pip`: on Python < 3.12 importing pip makes
    # setuptools' distutils shim stand down for the rest of the process, and a later
    # `import setuptools` (Inductor's C++ builds, the CPU ISA probe) then fails an assertion
    try:
        version = importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:
        return False
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit()) >= (22, 3)


def _venv_pip_flags(base_python: str) -> list[str]:
    return ["--without-pip"] if _base_pip_drives_venv(base_python) else []


def _pip(base_python: str, venv_python: str) -> list[str]:
    if _base_pip_drives_venv(base_python):
        return [base_python, "-m", "pip", "--python", venv_python]
    return [venv_python, "-m", "pip"]


def _check_call(cmd: list[str], spec: EnvSpec, what: str, timeout_s: float = VENV_TIMEOUT_S) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise EnvError(f"--env {spec.name}: {what} did not finish in {timeout_s:.0f}s ({' '.join(cmd[:3])} ...); "
                       f"check that the base Python works and the disk is not full, then run again") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvError(f"--env {spec.name}: {what} failed ({last})")


def _stream(cmd: list[str], spec: EnvSpec, say: ProgressFn, timeout_s: float | None = None) -> None:
    """Run pip, passing each output line to the progress display; keep the tail for errors.
    The deadline covers the whole run, reading included: a pip that hangs with its output
    open (a stalled download, a prompt) would otherwise block the line loop forever, and a
    wait(timeout=) after it would never start. A reader thread feeds a queue; the loop here
    waits on the queue with what is left of the deadline, then kills pip's process group."""
    timeout_s = INSTALL_TIMEOUT_S if timeout_s is None else timeout_s
    tail: list[str] = []
    lines: queue.Queue[str | None] = queue.Queue()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own group: the kill reaches pip's children too
    assert proc.stdout is not None
    reader = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise _install_timeout(spec, timeout_s, tail) from None
            if line is None:  # EOF: pip closed its output; it still gets the rest of the deadline to exit
                break
            line = line.rstrip()
            if line:
                tail = (tail + [line])[-20:]
                say("install", line)
        try:
            rc = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise _install_timeout(spec, timeout_s, tail) from None
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=5)
        proc.stdout.close()
    if rc != 0:
        hint = next((t for t in reversed(tail) if "ERROR" in t), tail[-1] if tail else "no output")
        raise EnvError(f"--env {spec.name}: pip install {' '.join(spec.requirements)} failed ({hint}); check the "
                       f"spec, or point PIP_FIND_LINKS at a folder of wheels when offline")


def _pump(stream: Any, lines: queue.Queue[str | None]) -> None:
    """Reader thread: every line of pip's output, then None at EOF."""
    try:
        for line in stream:
            lines.put(line)
    except (OSError, ValueError):  # the stream closed under us after a kill
        pass
    lines.put(None)


def _install_timeout(spec: EnvSpec, timeout_s: float, tail: list[str]) -> EnvError:
    last = tail[-1] if tail else "no output"
    return EnvError(f"--env {spec.name}: pip install {' '.join(spec.requirements)} did not finish in {timeout_s:.0f}s "
                    f"(last output: {last}); check the network or point PIP_FIND_LINKS at a folder of wheels, "
                    f"then run again")


def cached_envs(root: Path | None = None) -> list[dict[str, Any]]:
    """Every complete env in the cache, with its marker (for `compilebench env list`)."""
    root = root or envs_root()
    out = []
    for path in sorted(root.glob("*")) if root.exists() else []:
        marker = _read_marker(path)
        if marker is not None:
            out.append({"path": str(path), **marker})
    return out
