"""Keeping a worker in its box: memory cap, parent-death signal, and escaped processes.

The worker runs as `python -m harness.run.isolation SPEC OUT`: this module applies the limits
in the child itself, before torch is imported, then hands over to `harness.measure.worker.main`.
Doing it at worker start (not in a `preexec_fn`) keeps the parent's fork free of Python
code, which can deadlock when the parent has threads.

- Memory cap (`--max-memory-gb`): `RLIMIT_AS` on the worker (and what it spawns), so a
  case that eats host memory fails its own allocation and ends as status `oom` with a
  message naming the cap, instead of the kernel OOM killer picking a victim (possibly the
  parent, losing the run). RLIMIT_AS caps *virtual* memory: a torch CPU worker maps about
  0.7 GB before any model exists, so allow that on top. It is not applied to GPU cases
  (the CUDA/ROCm drivers reserve far more address space than physical memory).
- Parent death: `PR_SET_PDEATHSIG` (Linux) kills the worker when the runner dies, even by
  SIGKILL, so an interrupted nightly leaves no orphan measuring on the box.
- Escapees: the runner kills the worker's process group, which misses a grandchild that
  called `setsid()`. Every worker gets a per-case token in its environment, inherited by
  its descendants; after the case, processes of this user carrying the token are killed
  (the trick Jenkins' ProcessTreeKiller uses). A descendant that scrubs its environment
  *and* leaves the session is not found: documented in docs/RELIABILITY.md.
"""

from __future__ import annotations

import time

PROCESS_START = time.perf_counter()  # a spawned worker's start, before torch: a cold-start row counts its imports

import json  # noqa: E402
import os  # noqa: E402
import secrets  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

TOKEN_ENV = "COMPILEBENCH_CASE_TOKEN"
PARENT_ENV = "COMPILEBENCH_PARENT_PID"
SERVER_TOKEN_ENV = "COMPILEBENCH_SERVER_TOKEN"  # a fork server's own token (harness/run/forkserver.py)
PR_SET_PDEATHSIG = 1
GIB = 1 << 30

OOM_MARKERS = ("MemoryError", "can't allocate memory", "Cannot allocate memory", "std::bad_alloc", "out of memory")


def child_env(env: dict[str, str]) -> str:
    """Tag a worker's environment; returns the token to sweep for afterwards."""
    token = secrets.token_hex(8)
    env[TOKEN_ENV] = token
    env[PARENT_ENV] = str(os.getpid())
    return token


def memory_limit_bytes(spec: dict[str, Any]) -> int | None:
    """The cap that applies to this case: CPU cases only (see module doc)."""
    limit = (spec.get("limits") or {}).get("max_memory_bytes")
    device = str((spec.get("case") or {}).get("device", "cpu"))
    return int(limit) if limit and device.split(":")[0] == "cpu" else None


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies; exit now if it already did."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    expected = os.environ.get(PARENT_ENV)
    if expected and os.getppid() != int(expected):  # the parent died before prctl ran
        os._exit(1)


def apply_memory_cap(limit: int | None) -> None:
    if not limit:
        return
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    die_with_parent()
    from harness.measure import quiet

    quiet.hold_shared()  # --compile-overlap: not while another worker measures (before the imports)
    if len(argv) == 2:
        try:
            spec = json.loads(Path(argv[0]).read_text())
        except (OSError, ValueError):
            spec = {}
        apply_memory_cap(memory_limit_bytes(spec))
    from harness.measure.worker import main as worker_main

    return worker_main(argv)


def _session_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[3])  # after "pid (comm)": state ppid pgrp session
    except (OSError, IndexError, ValueError):
        return None


def sweep_escaped(token: str, session: int | None = None, server_token: str | None = None,
                  spare: frozenset[int] = frozenset()) -> list[int]:
    """SIGKILL this user's processes whose environment carries `token` (or, for a worker
    forked by a fork server, the server's token: a descendant that forked without exec
    shows the server's start-up environment; the server itself is in `spare`). Returns the
    pids of those outside `session` (the worker's own session was already killed as a
    group; its members may still be dying and are not escapees)."""
    killed: list[int] = []
    needles = {f"{TOKEN_ENV}={token}".encode()}
    if server_token:
        needles.add(f"{SERVER_TOKEN_ENV}={server_token}".encode())
    me, uid = os.getpid(), os.getuid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return killed
    for name in entries:
        if not name.isdigit() or int(name) == me or int(name) in spare:
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/environ", "rb") as fh:
                environ = fh.read()
        except OSError:
            continue  # gone already, or not ours to read
        if needles.intersection(environ.split(b"\0")):
            try:
                os.kill(int(name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            if session is None or _session_of(name) != session:
                killed.append(int(name))
    return killed


def classify_memory_failure(record: Any, limit: int | None) -> None:
    """A failed allocation is `oom`, whatever layer reported it (Python's MemoryError,
    torch's CPU allocator, C++ bad_alloc aborting the worker). Names the cap when one was set."""
    if record.status not in ("fail_run", "fail_compile", "crashed", "oom") or not record.error:
        return
    err = record.error
    text = f"{err.type or ''} {err.message or ''}" + (err.traceback or "")[-4000:]
    text += (record.logs or {}).get("stderr", "")[-4000:]
    if not any(marker in text for marker in OOM_MARKERS):
        return
    record.status = "oom"
    if limit:
        record.error = err.with_fields(
            message=f"host memory cap reached (--max-memory-gb {limit / GIB:g}, RLIMIT_AS on the worker): "
                    f"{err.message or ''}",
            memory_cap_bytes=limit)


if __name__ == "__main__":
    code = main()
    from harness.run.forkserver import exit_now

    # the record is written and fsync'd (write_json_atomic): the interpreter's teardown after a
    # compile took 3-5.5 s here (median 4.95 s, record written -> process reaped), os._exit 0.12 s
    exit_now(code)
