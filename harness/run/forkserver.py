"""A preloaded worker: a fork server that imports torch (and what the suites use) once, so
a case starts in a fraction of a second instead of paying the imports again.

Why it is still a fresh, cold process per case (DESIGN.md's protocol):
- the server imports modules and nothing else: no tensor op (so no OpenMP pool), no CUDA
  (imports run with `PYTORCH_NVML_BASED_CUDA_CHECK=1`, so availability checks count devices
  through NVML; after each import the server asks whether the driver was initialised
  (`cuda_driver_started`: cuInit, not the library being mapped, which torch 2.11+cu130 does
  at import), and a module that started it is left out: the server starts again without it
  (`--skip`), so CUDA cases still fork; where that cannot help (`import torch` itself
  started it) the server refuses every case, CPU ones too: a forked child of a process
  with CUDA started fails its first CUDA call, and Dynamo makes one on each compile where
  CUDA is available); the CPU ISA probe the server settles runs under the same NVML rule;
  nothing compiled;
- `TORCHINDUCTOR_CACHE_DIR` points at an empty sentinel folder while the server imports.
  After the imports the folder must still be empty (nothing written) and the only
  import-time copy of the path is Dynamo's `DynamoCache` prefix (a module-level
  `cache_dir()` call in torch._dynamo.package), which each case re-points at its own
  folder (`repoint_caches`; tests/test_forkserver.py scans every loaded module for other
  copies). The variable is then removed, and each case sets its own after the fork;
- many torch settings are read from the environment at import (torch._inductor.config,
  torch._dynamo.config, TORCH_LOGS, TORCH_TRACE): a server serves only cases whose
  environment equals its own apart from the per-case keys (`PER_CASE_ENV`); the runner
  keeps one server per environment (`server_key`) and spawns a plain worker otherwise.

Why a forked CPU case's peak RSS means what a spawned one's means (its memory figure is the
RSS high-water mark, mostly the RSS it starts with): it inherits the server's anonymous
pages, so a CPU case's server imports only what that case's worker imports anyway
(`preload_for`: one server per module set as well); and it maps again the library pages the
server had mapped (`map_file_pages`), which a fork does not copy. GPU cases too: their
memory peaks are the allocator's, but compile host memory is the worker's RSS (on an H200 a
server with every module put mlp-deep's at 1239 MiB against 1019 MiB spawned, and compare
failed the preloaded tree on it).

Why a forked case's compile pays what a spawned one's pays: a fork leaves the server's
anonymous pages shared copy-on-write, and the compile would copy them one page fault at a time
(~30k faults more than a spawned worker's in a tiny MLP's compile), so the child copies the
pages it shares before the worker starts (`own_inherited_pages`, MADV_POPULATE_WRITE).

Isolation is the spawn path's (harness/run/isolation.py): each case is a child that calls
`setsid()` before the server reports its pid (so the runner's killpg always finds its
session), gets the case's environment, logs, memory cap (RLIMIT_AS) and parent-death
signal (its parent is the server, which itself dies with the runner), and runs
`harness.measure.worker.main`. The server reaps it and reports its exit status, a signal
as a negative code, as `Popen.returncode` does. A descendant that forks without exec
carries the server's own start-up environment: the server token (`SERVER_TOKEN_ENV`) lets
the sweep find it too.

Protocol (JSON lines; the server's stdin and stdout are its control pipe):
  server -> {"ready": true, "preloaded": [...], "import_s": s, "cuda_started": bool, "pid": n, "file_pages": {...}}
  runner -> {"argv": [SPEC, OUT], "env": {...}, "stdout": PATH, "stderr": PATH, "memory_cap": n|null}
  server -> {"pid": n}  then, when the case's process has exited,  {"pid": n, "returncode": rc}
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from harness.measure.quiet import ALONE_ENV, QUIET_LOCK_ENV
from harness.run.isolation import PARENT_ENV, SERVER_TOKEN_ENV, TOKEN_ENV

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
# keys a case may set differently from the server's environment: none of them is read at import
PER_CASE_ENV = frozenset({CACHE_ENV, TOKEN_ENV, PARENT_ENV, SERVER_TOKEN_ENV, QUIET_LOCK_ENV, ALONE_ENV})
# imported once by the server, in this order; a module that is not installed is left out (and listed)
# (the modeling modules of the `gpu` suite's models too: a case's build imported them for ~0.5 s)
PRELOAD = ("torch", "torch._dynamo", "torch._inductor.compile_fx", "transformers", "diffusers",
           "transformers.models.llama.modeling_llama", "transformers.models.gemma.modeling_gemma",
           "diffusers.models.unets.unet_2d_condition", "suites", "harness.measure.worker")
# a server that loses one of these to the driver check is of no use: it stays, and refuses CUDA cases
ESSENTIAL = frozenset({"torch", "harness.measure.worker"})
MAX_RESTARTS = 4  # each skipped module costs one more import pass, once per run
READY_TIMEOUT_S = 600.0
# how long a start waits for the server to reap the case before (its worker was killed: the
# runner's _kill_tree waited 10 s already); a worker that is never reaped (stuck in
# uninterruptible sleep on a hung device or file system) breaks that server instead of the run
REAP_WAIT_S = 30.0
NO_PRELOAD_ENV = "COMPILEBENCH_NO_PRELOAD"
# GPU cases fork like CPU ones unless this is 0. On an H200 (2026-12-01, torch 2.11) forked
# mlp-deep forward cases' Inductor phase had taken 1.23-1.46 s (5 processes) against 0.54-0.84 s
# spawned (7), so GPU cases were spawned; once forked cases owned their server's pages
# (own_inherited_pages) the next H200 run had it at 0.70-0.85 s forked against 0.59-0.78 s
# spawned and 0.60-0.89 s by the old tree, compile medians 4.56 / 4.35 / 4.27 s (4 processes
# each, compare: noisy, no regression) for 8 s of worker wall instead of 17-23 s
# (docs/BENCHMARKS.md, "Sixth session")
GPU_PRELOAD_ENV = "COMPILEBENCH_PRELOAD_GPU"
PRELOAD_ATTR = "PRELOAD_MODULES"  # a workload module's: what each of its builds imports (workload_preload)


def preload_for(setup_modules: Sequence[str] | None, workload_modules: Sequence[str] = ()) -> tuple[str, ...]:
    """The modules a server imports for a case whose setup imports
    `setup_modules` (harness.measure.worker.setup_imports; None: not a case, e.g. a sweep
    task) and whose workload's build imports `workload_modules` (workload_preload): a case's
    server imports what a spawned worker of that case imports anyway and nothing
    more, since its peak RSS counts every anonymous page it inherits (transformers, diffusers
    and the modeling modules added 95 MiB to a tiny MLP's, torch._inductor 43 MiB to an
    eager case's, the 11 workload modules 8 MiB to a case that imports one). A GPU case the
    same: its memory peaks are the allocator's, but its compile host memory (the worker's
    peak RSS while compiling) is not (H200, 2026-12-01: mlp-deep forward 1239 MiB from the
    every-module server against 1019 MiB spawned, the same 107 MiB growth on top)."""
    if setup_modules is None:
        return PRELOAD
    wanted = ESSENTIAL | set(setup_modules)
    torch_part = [m for m in PRELOAD if m in wanted and m != "harness.measure.worker"]
    extra = [m for m in workload_modules if m not in torch_part]
    return (*torch_part, *extra, "harness.measure.worker")


def workload_preload(name: str) -> tuple[str, ...]:
    """What the module that defines workload `name` declares every one of its builds imports
    (its `PRELOAD_MODULES`, e.g. suites/hf.py: transformers and its modeling_utils, about
    1.5 s a case here), so a CPU case's server may import them ahead of it; () if none."""
    from harness.model.workloads import WORKLOADS

    workload = WORKLOADS.get(name)
    module = sys.modules.get(workload.source) if workload is not None else None
    return tuple(getattr(module, PRELOAD_ATTR, ()))


def case_preload(spec: Any) -> tuple[str, ...]:
    """preload_for a worker spec (harness.measure.spec.WorkerSpec): a case task's own modules."""
    from harness.measure.spec import CASE_TASK
    from harness.measure.worker import setup_imports

    if spec.task != CASE_TASK or spec.compiler is None or spec.case is None:
        return PRELOAD
    return preload_for(setup_imports(spec.compiler), workload_preload(spec.case.workload))


class ForkServerError(RuntimeError):
    """The server could not start or stopped answering: the runner falls back to spawn."""


# ----------------------------------------------------------------------------- server side


def preload(modules: Sequence[str], skip: Sequence[str] = ()) -> dict[str, Any]:
    """Import `modules` (and the suites' workload modules) except `skip`; returns what was
    imported, what failed, the seconds, and the first module after whose import the CUDA
    driver was started (`driver_started_by`; the imports stop there: the server is spoilt
    for CUDA). A module that fails is left out: the case that needs it imports it itself."""
    import importlib

    started = time.perf_counter()
    done: list[str] = []
    failed: dict[str, str] = {}
    names = [name for name in modules if name not in skip]
    driver_started_by = None
    index = 0
    while index < len(names) and driver_started_by is None:
        name = names[index]
        index += 1
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - not installed, or broken: the case will say so
            failed[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            # a module may start the driver before it fails: blame it, not the next one
            driver_started_by = name if cuda_driver_started() else None
            continue
        done.append(name)
        if cuda_driver_started():
            driver_started_by = name
        elif name == "suites":
            from suites import WORKLOAD_MODULES

            names[index:index] = [m for m in WORKLOAD_MODULES if m not in skip and m not in names]
    return {"preloaded": done, "preload_failed": failed, "import_s": round(time.perf_counter() - started, 3),
            "driver_started_by": driver_started_by}


CUDA_ERROR_NOT_INITIALIZED = 3


def mapped_libcuda() -> str | None:
    """The path of the CUDA driver library mapped into this process, if any."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                if "libcuda.so" in line:
                    return line.split(None, 5)[-1].strip()
    except OSError:
        pass
    return None


def cuda_driver_started() -> bool:
    """Whether the CUDA driver was initialised (cuInit) in this process, which is what makes
    a fork unsafe for CUDA: the library merely being mapped is not (PyTorch's own DataLoader
    forks after `import torch`). torch 2.11+cu130 maps libcuda at `import torch` without
    initialising it (H200, 2026-12-01: benchmarks/gpu/cuda_import_trace.py), so the mapping
    alone would refuse every CUDA case. Asked with cuCtxGetCurrent, which before cuInit
    answers CUDA_ERROR_NOT_INITIALIZED and changes nothing; the library is looked up with
    RTLD_NOLOAD, never loaded by this check. Anything unexpected counts as started."""
    import ctypes

    path = mapped_libcuda()
    if path is None:
        return False
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        context = ctypes.c_void_p()
        return int(lib.cuCtxGetCurrent(ctypes.byref(context))) != CUDA_ERROR_NOT_INITIALIZED
    except (OSError, AttributeError):
        return True


PAGEMAP_ENTRY = 8  # bytes per page in /proc/self/pagemap; bit 63: the page is present
PRESENT_BIT, EXCLUSIVE_BIT = 63, 56  # bit 56: mapped by this process only (Linux 4.2+)
MADV_POPULATE_READ = 22  # Linux 5.14+
MADV_POPULATE_WRITE = 23  # Linux 5.14+


def resident_file_pages() -> list[tuple[int, int]]:
    """(address, length) runs of this process's readable file-backed pages that are present
    in its page table (/proc/self/pagemap), for map_file_pages in a forked case. Empty where
    the kernel does not say."""
    import numpy as np

    def keep(parts: list[str]) -> bool:  # a library, a mapped file; never a device's mapping
        return len(parts) == 6 and parts[1][0] == "r" and parts[5].startswith("/") and not parts[5].startswith("/dev/")

    try:
        with open("/proc/self/maps") as maps:
            return _pagemap_runs(maps.readlines(), keep,
                                 lambda entries: ((entries >> np.uint64(PRESENT_BIT)) & np.uint64(1)).astype(bool))
    except (OSError, ValueError):
        return []


def _pagemap_runs(lines: Sequence[str], keep: Any, select: Any) -> list[tuple[int, int]]:
    """(address, length) runs of the pages of the /proc/self/maps `lines` that `keep(parts)`
    accepts whose pagemap entries `select(entries)` marks (a numpy bool array per mapping)."""
    import numpy as np

    page = os.sysconf("SC_PAGE_SIZE")
    runs: list[tuple[int, int]] = []
    with open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
        for line in lines:
            parts = line.split(None, 5)
            if len(parts) < 5 or not keep(parts):
                continue
            low, high = (int(x, 16) for x in parts[0].split("-"))
            pagemap.seek(low // page * PAGEMAP_ENTRY)
            entries = np.frombuffer(pagemap.read((high - low) // page * PAGEMAP_ENTRY), dtype=np.uint64)
            marked = select(entries).astype(np.int8)
            edges = np.flatnonzero(np.diff(np.concatenate(([0], marked, [0]))))
            runs.extend((low + int(a) * page, int(b - a) * page) for a, b in zip(edges[::2], edges[1::2], strict=True))
    return runs


def shared_private_pages() -> list[tuple[int, int]]:
    """Runs of this process's private writable pages that are present but not its own alone:
    in a forked child, the server's pages it still shares copy-on-write (its Python objects,
    the libraries' data)."""
    import numpy as np

    def keep(parts: list[str]) -> bool:
        name = parts[5].strip() if len(parts) > 5 else ""
        return parts[1][:2] == "rw" and parts[1][3] == "p" and not name.startswith("/dev/") and \
            name not in ("[vvar]", "[vdso]", "[vsyscall]", "[vvar_vclock]")

    def select(entries: Any) -> Any:
        one = np.uint64(1)
        return ((entries >> np.uint64(PRESENT_BIT)) & one).astype(bool) & \
            ~((entries >> np.uint64(EXCLUSIVE_BIT)) & one).astype(bool)

    try:
        with open("/proc/self/maps") as maps:
            return _pagemap_runs(maps.readlines(), keep, select)
    except (OSError, ValueError):
        return []


def own_inherited_pages() -> dict[str, Any]:
    """Copy, in a forked case before the worker starts, every page it still shares
    copy-on-write with its server, so the case's compile does not take those copies as page
    faults one by one, which a spawned worker never takes: a child of a process that had
    imported torch's compile stack took 74k minor faults in a tiny MLP's compile against 43k
    in a fresh process, and compiled 0.3-0.9 s slower (this 2-core box, 2026-12-01); after
    MADV_POPULATE_WRITE over the 250 MiB it shared (0.15 s, at the case's start, outside every
    measured phase), 43.7k faults and the spawned process's compile time. RSS is unchanged
    (the pages were present already). Returns the bytes owned, the runs refused, the seconds."""
    import ctypes

    start = time.perf_counter()
    runs = shared_private_pages()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    owned = refused = 0
    for address, length in runs:
        if libc.madvise(address, length, MADV_POPULATE_WRITE) == 0:
            owned += length
        else:  # a kernel before 5.14 (EINVAL), or a mapping of a kind that cannot be populated
            refused += 1
    return {"bytes": owned, "runs": len(runs), "refused": refused, "seconds": round(time.perf_counter() - start, 4)}


def map_file_pages(runs: Sequence[tuple[int, int]], madvise: bool = True) -> int:
    """Map into this forked process the file pages its server had mapped, so its RSS counts
    them as a spawned worker's counts the pages its own imports touched. A fork copies the
    page-table entries of anonymous memory (the server's Python objects: they are in a
    forked case's RSS) but not those of read-only file mappings (libraries' code), which
    start empty in the child: without this a tiny CPU case forked from a torch-only server
    read 171 MiB against 232 MiB spawned (RssFile 20 against 81 MiB). MADV_POPULATE_READ
    maps pages already in the page cache (about 10 ms for 80 MiB); where the kernel lacks
    it (or `madvise` is False) each page is read once. Returns the bytes mapped."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = os.sysconf("SC_PAGE_SIZE")
    populate: bool | None = None if madvise else False  # None: not known yet whether this kernel has it
    done = 0
    for address, length in runs:
        if populate is not False:
            if libc.madvise(address, length, MADV_POPULATE_READ) == 0:
                populate, done = True, done + length
                continue
            if populate is None and ctypes.get_errno() == errno.EINVAL:
                populate = False  # a kernel before 5.14: each page is read instead
            else:
                continue  # this one mapping refused (gone, or of a kind that cannot be populated)
        for at in range(address, address + length, page):
            ctypes.string_at(at, 1)
        done += length
    return done


def repoint_caches() -> None:
    """Point import-time copies of the Inductor cache folder at this case's folder (see module doc)."""
    package = sys.modules.get("torch._dynamo.package")
    cache = getattr(package, "DynamoCache", None)
    if cache is not None and hasattr(cache, "_path_prefix"):
        cache._path_prefix = os.path.join(os.environ[CACHE_ENV], "dynamo")


def warm_isa(isa_cache_dir: str) -> dict[str, Any]:
    """Settle Inductor's CPU ISA choice once, in the server (harness.measure.worker.probe_cpu_isa,
    with its isa.json answer): torch 2.13 still builds and dlopens three C++ probes per
    process even when told to trust the CPU flags (~2 s a case here). The builds land in a
    scratch folder that is removed; the cached answer (`pick_vec_isa`) is inherited by each
    case, whose own cache folder stays empty. A case reports the probe it paid (about 0 s)."""
    import shutil

    from harness.measure.worker import probe_cpu_isa

    scratch = tempfile.mkdtemp(prefix="cb-preload-isa-")
    os.environ[CACHE_ENV] = scratch
    try:
        probe = probe_cpu_isa(isa_cache_dir)
    except Exception as exc:  # noqa: BLE001 - each case then probes for itself
        probe = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    finally:
        del os.environ[CACHE_ENV]
        shutil.rmtree(scratch, ignore_errors=True)
    return probe


@contextmanager
def nvml_availability_checks() -> Iterator[None]:
    """`torch.cuda.is_available()` answered through NVML while the server works: the default
    path (cudaGetDeviceCount) runs cuInit and registers torch's fork poisoning, after which
    every forked child fails its first CUDA call, and Dynamo makes one on every compile where
    CUDA is available (it saves the CUDA RNG state), CPU cases included."""
    nvml = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        yield
    finally:
        if nvml is None:
            del os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"]
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = nvml


def _serve_preload(isa_cache_dir: str | None, skip: Sequence[str] = (),
                   modules: Sequence[str] = PRELOAD) -> dict[str, Any]:
    sentinel = tempfile.mkdtemp(prefix="cb-preload-cache-")
    os.environ[CACHE_ENV] = sentinel
    with nvml_availability_checks():
        loaded = preload(modules, skip)
    written = os.listdir(sentinel)
    del os.environ[CACHE_ENV]
    # kept (empty) for the server's life: the runner looks into it after each case
    # (ForkServer.cache_leak), since a copy of this path that a case did not re-point would
    # write there, and a removed folder would be re-created and found warm by the next case
    # the ISA probe asks for CUDA too (an H200 box, 2026-12-01: every CPU case forked after
    # it failed with "Cannot re-initialize CUDA in forked subprocess")
    with nvml_availability_checks():
        isa = warm_isa(isa_cache_dir) if isa_cache_dir else None
    if isa is not None and not loaded.get("driver_started_by") and cuda_driver_started():
        loaded["driver_started_in"] = "the CPU ISA probe"  # not a module: no restart without it
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    cuda_started = bool(cuda is not None and cuda.is_initialized())
    # no gc.freeze(): frozen import objects cut the garbage collector's share of a compile
    # (mlp-deep train, tiny: 1.21 s of gc in a spawned worker, 1.31 s forked, 0.75 s forked
    # and frozen), which would bias compile times low against every earlier run
    return {"ready": True, "pid": os.getpid(), **loaded, "skipped_for_driver": list(skip),
            "isa_probe": isa, "cuda_started": cuda_started or cuda_driver_started(), "cache_written": written[:5],
            "cache_sentinel": sentinel}


def restart_without(info: dict[str, Any], skip: Sequence[str]) -> list[str] | None:
    """The skip list a new server should start with, or None to keep this one: the module
    that started the driver is left out, unless the server cannot do without it or the
    restarts are spent."""
    culprit = info.get("driver_started_by")
    if not culprit or culprit in ESSENTIAL or culprit in skip or len(skip) >= MAX_RESTARTS:
        return None
    return [*skip, culprit]


def parse_server_args(argv: Sequence[str]) -> tuple[str | None, list[str], tuple[str, ...]]:
    """[ISA_CACHE_DIR] [--skip=A,B] [--preload=A,B] (the last for tests: the modules to import)."""
    isa, skip, modules = None, [], PRELOAD
    for arg in argv:
        if arg.startswith("--skip="):
            skip = [m for m in arg[len("--skip="):].split(",") if m]
        elif arg.startswith("--preload="):
            modules = tuple(m for m in arg[len("--preload="):].split(",") if m)
        else:
            isa = arg
    return isa, skip, modules


def _child(request: dict[str, Any], ctrl: Sequence[int], sync_w: int, server_pid: int,
           file_pages: Sequence[tuple[int, int]] = ()) -> None:
    """The case's process, right after the fork: never returns."""
    code = 1
    try:
        os.setsid()
        os.write(sync_w, b"s")
        os.close(sync_w)
        for fd in ctrl:
            os.close(fd)
        _redirect(request["stdout"], request["stderr"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ[PARENT_ENV] = str(server_pid)  # for die_with_parent: the server is this process's parent
        from harness.measure import quiet

        quiet.hold_shared()  # --compile-overlap: not while another worker measures (before the page copies)
        repoint_caches()
        fresh_random_state()
        map_file_pages(file_pages)  # the server's library pages, in this RSS as in a spawned worker's
        # the server's anonymous pages, this process's own (no copy-on-write faults in its compile)
        from harness.measure.spec import OWNED_PAGES_ENV

        os.environ[OWNED_PAGES_ENV] = json.dumps(own_inherited_pages())
        from harness.run.isolation import apply_memory_cap, die_with_parent

        die_with_parent()  # the parent is the server, which dies with the runner
        apply_memory_cap(request.get("memory_cap"))
        from harness.measure.worker import main as worker_main

        sys.argv = ["harness.measure.worker", *request["argv"]]
        code = worker_main(list(request["argv"]))
    except BaseException:  # noqa: BLE001 - the child must never return into the server's loop
        import traceback

        traceback.print_exc()
    finally:
        exit_now(code)


def fresh_random_state() -> None:
    """numpy's global generator from fresh entropy, as a spawned worker starts with it: forked
    cases would otherwise all continue the server's one state (Python's `random` is reseeded
    at fork by CPython itself; torch's is seeded by the worker). The string-hash salt cannot be
    changed after start: every case of one server shares it (docs/RELIABILITY.md)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def exit_now(code: int) -> None:
    """Leave without the interpreter's teardown (seconds for torch), once what matters is
    written: the record was fsync'd by write_json_atomic; logs and trace handlers flush here."""
    import logging

    try:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _redirect(stdout: str, stderr: str) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    for path, fd in ((stdout, 1), (stderr, 2)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)


def _send(fd: int, message: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(message) + "\n").encode())


def _fork_case(request: dict[str, Any], ctrl_in: int, ctrl_out: int,
               file_pages: Sequence[tuple[int, int]] = ()) -> None:
    sync_r, sync_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    server_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(sync_r)
        _child(request, (ctrl_in, ctrl_out), sync_w, server_pid, file_pages)
    os.close(sync_w)
    os.read(sync_r, 1)  # the child's setsid() is done (or it died): its process group exists
    os.close(sync_r)
    _send(ctrl_out, {"pid": pid})
    _, status = os.waitpid(pid, 0)
    _send(ctrl_out, {"pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


def serve(argv: Sequence[str]) -> NoReturn:
    """The server's loop: preload, say ready, then one case at a time until stdin closes, then exit.
    argv: see parse_server_args; ISA_CACHE_DIR settles the CPU ISA probe once (CPU cases)."""
    from harness.run.isolation import die_with_parent

    start_env = dict(os.environ)  # as the interpreter (or its wrapper) began: the runner compares it with what it passed
    die_with_parent()
    isa, skip, modules = parse_server_args(argv)
    ctrl_in, ctrl_out = os.dup(0), os.dup(1)
    os.dup2(2, 1)  # stray prints from imports go to the server's log, never into the control pipe
    info = _serve_preload(isa, skip, modules)
    again = restart_without(info, skip)
    if again is not None:
        # a fresh interpreter without the module that started the driver; the control pipe
        # goes back on 0/1 (the dups are close-on-exec), the log stays on 2
        os.dup2(ctrl_in, 0)
        os.dup2(ctrl_out, 1)
        kept = [arg for arg in argv if not arg.startswith("--skip=")]
        sys.stderr.write(f"forkserver: {info['driver_started_by']} started the CUDA driver at import; "
                         f"starting again without it\n")
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "harness.run.forkserver", *kept,
                                   "--skip=" + ",".join(again)], start_env)  # without what the imports set
    started = time.perf_counter()
    file_pages = resident_file_pages()
    info["file_pages"] = {"bytes": sum(length for _, length in file_pages), "runs": len(file_pages),
                          "scan_s": round(time.perf_counter() - started, 3)}
    _send(ctrl_out, {**info, "start_env": start_env})
    reader = os.fdopen(ctrl_in, "r", closefd=False)
    for line in reader:
        if line.strip():
            _fork_case(json.loads(line), ctrl_in, ctrl_out, file_pages)
    # stdin closed: the run is over and nothing here is left to save (each case was reaped,
    # its record sent). The interpreter's teardown of torch, transformers and diffusers took
    # a server 1.8 s on the 2-core CPU box, paid by the runner at every close
    sys.stderr.flush()
    os._exit(0)


# ----------------------------------------------------------------------------- runner side


def server_key(python: str, env: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Cases whose (python, environment minus the per-case keys) are equal share a server."""
    return python, tuple(sorted((k, v) for k, v in env.items() if k not in PER_CASE_ENV))


# set by the interpreter itself at start-up (PEP 538 locale coercion), so a spawned worker has it too
INTERPRETER_ENV = frozenset({"LC_CTYPE"})


def start_env_changed(passed: Mapping[str, str], started: Mapping[str, str] | None) -> str | None:
    """Why a server cannot serve, when its interpreter began with an environment other than
    the one passed (a wrapper script, an activation shim): a forked case gets the runner's
    environment, so it would miss what a spawned worker of that interpreter sees."""
    if started is None:
        return None
    changed = sorted(k for k in set(passed) | set(started)
                     if k not in INTERPRETER_ENV and passed.get(k) != started.get(k))
    if not changed:
        return None
    return (f"the interpreter changed its environment at start-up ({', '.join(changed[:5])}"
            f"{', ...' if len(changed) > 5 else ''}): a forked case would not see that, a spawned one does")


class ForkedWorker:
    """A case's process started by a server; quacks like the `subprocess.Popen` the runner waits on."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None
        self.server_died: str | None = None  # why, when the server exited while this worker ran

    def poll(self) -> int | None:
        with self.server.read_lock:
            if self.returncode is None:
                self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        with self.server.read_lock:  # the --gpus pool's slot and kill_live_workers may both wait
            if self.returncode is None:
                self._read(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout or 0.0)
        return self.returncode

    def _read(self, timeout: float | None) -> None:
        try:
            message = self.server.receive(timeout)
        except ForkServerError as exc:
            # the server died under its case: the case died with it (its parent-death signal is
            # SIGKILL), which is the case's outcome, recorded as data; the server is broken, so
            # later cases spawn (the run goes on)
            self.server_died = str(exc)
            self.returncode = -signal.SIGKILL
            self.server.busy.release()
            return
        if message is None:
            return
        if message.get("pid") != self.pid or "returncode" not in message:
            raise ForkServerError(f"fork server answered {message} while waiting for worker {self.pid}")
        self.returncode = int(message["returncode"])
        self.server.busy.release()


class ForkServer:
    """The runner's handle on one server process (one case at a time)."""

    def __init__(self, python: str, env: Mapping[str, str], cwd: str, isa_cache_dir: str | None = None,
                 modules: Sequence[str] = PRELOAD) -> None:
        self.token = secrets.token_hex(8)
        self.env = {**env, SERVER_TOKEN_ENV: self.token, PARENT_ENV: str(os.getpid())}
        self.env.pop(CACHE_ENV, None)
        self.log = tempfile.NamedTemporaryFile(prefix="cb-forkserver-", suffix=".log", delete=False)
        args = [*([isa_cache_dir] if isa_cache_dir else []), *([] if tuple(modules) == PRELOAD else
                                                                ["--preload=" + ",".join(modules)])]
        self.proc = subprocess.Popen([python, "-m", "harness.run.forkserver", *args],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=self.env, cwd=cwd,
                                     start_new_session=True)
        self.busy = threading.Lock()  # one case at a time: held from start until the case's returncode arrives
        self.current: ForkedWorker | None = None
        self.read_lock = threading.Lock()
        self._buffer = b""
        self.info: dict[str, Any] = {}
        self.broken: str | None = None

    def ready(self, timeout: float = READY_TIMEOUT_S) -> dict[str, Any]:
        if not self.info and self.broken is None:
            try:
                self.info = self.receive(timeout) or {}
            except ForkServerError as exc:
                self.broken = str(exc)
            if not self.info.get("ready") and self.broken is None:
                self.broken = f"no ready message in {timeout:g}s"
            elif self.broken is None:
                self.broken = start_env_changed(self.env, self.info.pop("start_env", None))
        return self.info

    def start(self, argv: Sequence[str], env: Mapping[str, str], stdout: Path, stderr: Path,
              memory_cap: int | None) -> ForkedWorker:
        self._claim()
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps({"argv": list(argv), "env": dict(env), "stdout": str(stdout),
                                               "stderr": str(stderr), "memory_cap": memory_cap}) + "\n").encode())
            self.proc.stdin.flush()
            message = self.receive(READY_TIMEOUT_S)
        except (OSError, ForkServerError) as exc:
            self.busy.release()
            self.broken = f"{type(exc).__name__}: {exc}"
            raise ForkServerError(self.broken) from None
        if not message or "pid" not in message:
            self.busy.release()
            self.broken = f"fork server gave no pid ({message})"
            raise ForkServerError(self.broken)
        self.current = ForkedWorker(self, int(message["pid"]))
        return self.current

    def _claim(self) -> None:
        """Take `busy` for a new case. The runner waits for each worker before it starts the
        next (one server per environment, so per --gpus slot too), so `busy` is only still
        held when the last worker was killed and the server has not reaped it yet: its
        returncode is read here, for up to REAP_WAIT_S, and a worker that is never reaped
        makes the server unusable (ForkServerError: the case is spawned) instead of a hang."""
        if self.busy.acquire(blocking=False):
            return
        last = self.current
        if last is not None:
            try:
                last.wait(REAP_WAIT_S)
            except (subprocess.TimeoutExpired, ForkServerError):
                pass
        if not self.busy.acquire(timeout=1.0):
            pid = last.pid if last is not None else "?"
            self.broken = (f"its last case's worker (pid {pid}) was not reaped {REAP_WAIT_S:g}s after it was "
                           "killed (a process in uninterruptible sleep?)")
            raise ForkServerError(self.broken)

    def receive(self, timeout: float | None) -> dict[str, Any] | None:
        """The next message, or None when `timeout` passes first; EOF is a ForkServerError."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                self.broken = f"fork server exited ({self.proc.poll()}); its log: {self.log_tail()}"
                raise ForkServerError(self.broken)
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:  # something else wrote to the server's stdout (a wrapper script, a .pth)
            message = None
        if not isinstance(message, dict):
            self.broken = (f"fork server's control pipe carried {line[:200].decode('utf-8', 'replace')!r}, not a "
                           "message: its interpreter or a wrapper writes to stdout")
            raise ForkServerError(self.broken)
        return message

    def cache_leak(self) -> list[str]:
        """What the cases forked so far wrote into the folder the server imported under."""
        sentinel = self.info.get("cache_sentinel")
        try:
            return sorted(os.listdir(sentinel)) if sentinel else []
        except OSError:  # removed: nothing of ours was written there
            return []

    def begin_close(self) -> None:
        """Close the server's stdin, its signal to exit, without waiting for it."""
        try:
            if self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except OSError:
            pass

    def log_tail(self, limit: int = 2000) -> str:
        try:
            return Path(self.log.name).read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def close(self) -> None:
        self.begin_close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)
        if self.info.get("cache_sentinel"):
            import shutil

            shutil.rmtree(self.info["cache_sentinel"], ignore_errors=True)


class ServerPool:
    """One server per (python, import-time environment, modules to preload, whether it settles
    the CPU ISA probe), started on first use, closed at the end. A CPU Inductor case and a GPU
    case may want the same modules, but only the former's server runs the ISA probe (which
    may start the CUDA driver: then it refuses CUDA cases), so they do not share one."""

    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        self.servers: dict[Any, ForkServer] = {}
        self.begun: set[Any] = set()  # started by begin_all, not yet awaited by start_all
        self.lock = threading.Lock()

    @staticmethod
    def key(python: str, env: Mapping[str, str], modules: Sequence[str], settles_isa: bool) -> tuple[Any, ...]:
        """Which server a case shares: interpreter, import-time environment, modules, ISA probe."""
        return (*server_key(python, env), tuple(modules), settles_isa)

    def get(self, python: str, env: Mapping[str, str], isa_cache_dir: str | None = None,
            modules: Sequence[str] = PRELOAD) -> ForkServer:
        """`isa_cache_dir`: a CPU case's ISA probe folder, so a new server settles the probe once;
        `modules`: what it imports (preload_for)."""
        key = self.key(python, env, modules, isa_cache_dir is not None)
        with self.lock:
            server = self.servers.get(key)
            if server is None:
                server = self.servers[key] = ForkServer(python, env, self.cwd, isa_cache_dir, modules)
        server.ready()
        return server

    def begin_all(self, wanted: Sequence[tuple[str, Mapping[str, str], Sequence[str]]]) -> int:
        """Start the servers that these (python, environment, modules) need and have none yet,
        without waiting for their imports (start_all waits); returns how many started."""
        with self.lock:
            started = 0
            for python, env, modules in wanted:
                key = self.key(python, env, modules, settles_isa=False)
                if key not in self.servers:
                    self.servers[key] = ForkServer(python, env, self.cwd, None, modules)
                    self.begun.add(key)
                    started += 1
            return started

    def start_all(self, wanted: Sequence[tuple[str, Mapping[str, str], Sequence[str]]]) -> dict[str, Any]:
        """Start the servers that these (python, environment, modules) need and have none yet,
        all at once, then wait until each of them has imported, those begun earlier by
        begin_all too (no ISA probe: GPU cases' servers). The imports then overlap one another
        and never a case: a `gpu` run's four servers, started on first use, imported one after
        another for 24.9 s on an H200 (8.6 + 2.5 + 6.7 + 7.1 s, 2026-12-02), before cases that
        waited for each. Returns how many this pool started for them (begin_all's included) and
        the wall seconds this call waited until all were ready (config.worker_start.prestart)."""
        waited_from = time.perf_counter()
        self.begin_all(wanted)
        with self.lock:
            keys = list(dict.fromkeys(self.key(python, env, modules, settles_isa=False)
                                      for python, env, modules in wanted))
            servers = [self.servers[key] for key in keys]
            started = sum(key in self.begun for key in keys)
            self.begun.difference_update(keys)
        for server in servers:
            server.ready()
        return {"servers": started, "wall_s": round(time.perf_counter() - waited_from, 3)}

    def close_python(self, python: str) -> int:
        """Close every server of `python` (an env a bisect will not measure again), so a long
        search holds only the servers it still needs; a later case of that python starts a
        new one. Returns how many were closed."""
        with self.lock:
            closing = [self.servers.pop(key) for key in [k for k in self.servers if k[0] == python]]
        for server in closing:
            server.close()
        return len(closing)

    def describe(self) -> list[dict[str, Any]]:
        return [{**{k: s.info.get(k) for k in ("preloaded", "preload_failed", "import_s", "isa_probe", "cuda_started",
                                              "driver_started_by", "driver_started_in", "skipped_for_driver",
                                              "file_pages")},
                 "python": key[0],
                 "broken": s.broken} for key, s in self.servers.items()]

    def close(self) -> None:
        with self.lock:
            for server in self.servers.values():  # all told at once, so their exits overlap
                server.begin_close()
            for server in self.servers.values():
                server.close()
            self.servers.clear()


_open_pool: ServerPool | None = None


@contextmanager
def preloaded_workers(enabled: bool = True, cwd: str | None = None) -> Iterator[ServerPool | None]:
    """Servers for the cases started inside the block (a run, an A/B session, a bisect
    step), closed at its end. None: preloading is off (--no-preload, COMPILEBENCH_NO_PRELOAD=1,
    no fork on this platform) and every case is spawned. Nested blocks share the outer pool."""
    global _open_pool
    if not preload_enabled(enabled):
        yield None
        return
    if _open_pool is not None:
        yield _open_pool
        return
    pool = _open_pool = ServerPool(cwd or str(Path(__file__).resolve().parents[2]))
    try:
        yield pool
    finally:
        _open_pool = None
        pool.close()


def preload_enabled(requested: bool = True) -> bool:
    return requested and hasattr(os, "fork") and sys.platform.startswith("linux") and \
        os.environ.get(NO_PRELOAD_ENV, "") in ("", "0")


def gpu_preload_enabled() -> bool:
    """Whether a case on a non-CPU device may fork from a server (yes unless COMPILEBENCH_PRELOAD_GPU=0)."""
    return os.environ.get(GPU_PRELOAD_ENV, "") != "0"


def open_pool() -> ServerPool | None:
    """The pool of the enclosing preloaded_workers block (None outside one)."""
    return _open_pool


if __name__ == "__main__":
    serve(sys.argv[1:])
