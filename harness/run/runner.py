"""The runner (parent process): plan cases, run each in a fresh worker, keep every result.

One subprocess per case, in a new process session so a timeout kills the whole tree. The
parent blocks in `wait(timeout)` (no busy loop), turns signals and timeouts into statuses,
and writes the run file atomically even when interrupted: Ctrl-C keeps the finished cases.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import itertools
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler import get_compiler
from harness.measure import quiet
from harness.measure.environment import SHARED_CACHE_ENV, default_cache_root
from harness.measure.spec import WorkerSpec
from harness.measure.timing import StopPolicy
from harness.model.errors import UserError
from harness.model.schema import Case, Record, Run, save_run
from harness.run.forkserver import (
    GPU_PRELOAD_ENV,
    ForkServerError,
    case_preload,
    gpu_preload_enabled,
    open_pool,
    preloaded_workers,
)
from harness.run.isolation import child_env, classify_memory_failure, memory_limit_bytes, sweep_escaped
from harness.run.journal import Journal, journal_path
from harness.run.lookup import resolve_run as resolve_run  # re-exported: RUN arguments resolve in one place
from harness.run.signals import StopSignals, checkpoint, deferred, interruptible
from harness.run.traces import TraceSettings, attach_trace, case_slug, trace_env, trace_settings

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LOG_TAIL_BYTES = 8192
DTYPES = ("float32", "float16", "bfloat16", "float64")


class PlanError(UserError, ValueError):
    """A run that cannot be planned (bad option combination); the message says the fix."""


@dataclass
class RunOptions:
    suite: str | None = None
    workloads: list[str] = field(default_factory=list)
    workload_files: list[str] = field(default_factory=list)
    scenarios: list[str] = field(default_factory=list)
    compilers: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    sizes: list[str] = field(default_factory=list)
    timeout_s: float | None = None
    out_dir: str = "results"
    label: str = ""
    policy: dict[str, Any] = field(default_factory=dict)
    ingest: bool = True
    max_memory_gb: float | None = None  # per-case host memory cap (RLIMIT_AS), CPU cases
    shard: str | None = None  # 'i/N': run one shard of the plan (harness/run/shard.py)
    shard_costs: str | None = None  # history .sqlite balancing the shards, or 'none'
    gpus: list[int] = field(default_factory=list)  # one concurrent worker per GPU (harness/run/multigpu.py)
    options: dict[str, Any] = field(default_factory=dict)  # workload options from --option, override the suite's
    python: str | None = None  # interpreter of the workers (an --env); None: this one
    trace: bool = False  # TORCH_TRACE log (+ tlparse HTML) per case under <out>/traces/<run_id>/ (harness/run/traces.py)
    trace_max_mb: float | None = None  # per-case trace cap (default traces.DEFAULT_TRACE_MAX_MB)
    warm_compile: bool = False  # a second compile per case in a fresh process on the populated cache
    override_workloads: bool = False  # a --workload-file may replace a built-in workload of the same name
    preload: bool = True  # start cases from a preloaded fork server (harness/run/forkserver.py); --no-preload: spawn
    eager_from_twin: bool = True  # an eager case's record from its compiled twin's where allowed (harness/run/twins.py)
    # workers alive at once on one device, compiles side by side, measurements alone (harness/run/overlap.py);
    # None: the suite's default (1 without a suite)
    compile_overlap: int | None = None


def workload_modules() -> list[str]:
    from suites import WORKLOAD_MODULES

    return list(WORKLOAD_MODULES)


def workload_file_hashes(paths: Sequence[str]) -> dict[str, str]:
    """SHA-256 of each workload file, as the run began: a resume refuses a file changed since
    (a missing file is left out: the planner reports it, with its own message)."""
    from harness.run.journal import file_sha256

    return {path: digest for path in paths if (digest := file_sha256(Path(path))) is not None}


def load_registries(workload_files: Sequence[str], override: bool = False) -> None:
    from harness.model.workloads import import_workload_module, load_workload_file

    for module in workload_modules():
        import_workload_module(module)
    for path in workload_files:
        load_workload_file(path, override=override)


def _resolve_devices(devices: Sequence[str]) -> list[str]:
    from harness.measure.devices import auto_device, parse_device

    out = []
    for spec in devices:
        spec = auto_device() if spec == "auto" else spec
        parse_device(spec)  # validates the name
        out.append(spec)
    return out


def plan_cases(opts: RunOptions) -> tuple[list[Case], dict[str, Any]]:
    """Expand a suite and/or explicit workloads into concrete cases. Command-line values
    override the suite's per-entry defaults. Returns (cases, suite policy overrides)."""
    from harness.model.workloads import get_workload
    from suites import SuiteEntry, get_suite

    load_registries(opts.workload_files, opts.override_workloads)
    for name in opts.compilers:
        get_compiler(name)
    for dtype in opts.dtypes:
        if dtype not in DTYPES:
            raise PlanError(f"--dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    for size in opts.sizes:
        if size not in ("tiny", "full"):
            raise PlanError(f"--size {size!r} is not supported; use tiny or full")
    devices = _resolve_devices(opts.devices) if opts.devices else []

    suite_name = opts.suite or ""
    policy: dict[str, Any] = {}
    if opts.suite:
        suite = get_suite(opts.suite)
        entries = list(suite.entries)
        policy = dict(suite.policy)
        if opts.workloads:  # --suite + --workload narrows the suite; a name it lacks is a typo, not a no-op
            from harness.model.workloads import UnknownWorkloadError

            in_suite = list(dict.fromkeys(w for e in entries for w in e.workloads))
            lacking = [w for w in opts.workloads if w not in in_suite]
            if lacking:
                raise UnknownWorkloadError(f"suite {opts.suite!r} has no workload {lacking[0]!r}; its workloads: "
                                           f"{', '.join(in_suite)} (drop --suite to run it on its own)")
            entries = [SuiteEntry(**{**e.__dict__, "workloads": tuple(w for w in e.workloads if w in opts.workloads)})
                       for e in entries]
            entries = [e for e in entries if e.workloads]
            if not entries:
                raise PlanError(f"none of the workloads {opts.workloads} is in suite {opts.suite!r}")
    elif opts.workloads:
        entries = [SuiteEntry(workloads=tuple(opts.workloads))]
        suite_name = "adhoc"
    elif opts.workload_files:
        from harness.model.workloads import load_workload_file

        # the workloads of these files only (already imported above: this returns their names), not every
        # user file this process ever loaded
        names = tuple(dict.fromkeys(n for path in opts.workload_files
                                    for n in load_workload_file(path, override=opts.override_workloads)))
        entries = [SuiteEntry(workloads=names)]
        suite_name = "adhoc"
    else:
        raise PlanError("nothing to run: pass --suite NAME (e.g. --suite smoke) or --workload NAME")

    from harness.model.workloads import check_options, check_selection_options, options_for

    check_selection_options([get_workload(w) for w in dict.fromkeys(w for e in entries for w in e.workloads)],
                            opts.options)  # before any worker: a typo never runs or lands in a case id
    cases: list[Case] = []
    seen: set[str] = set()
    for entry in entries:
        for wname in entry.workloads:
            wl = get_workload(wname)
            check_options(wl, dict(entry.options))
            options = merge_options(entry.options, options_for(wl, opts.options))
            scenarios = opts.scenarios or list(entry.scenarios or wl.scenarios)
            for sc in scenarios:
                from harness.model.scenarios import get_scenario

                get_scenario(sc)
                if sc not in wl.scenarios:
                    if opts.scenarios and len(entries) == 1 and len(entry.workloads) == 1:
                        raise PlanError(f"workload {wname!r} has no scenario {sc!r}; it has: {', '.join(wl.scenarios)}")
                    continue
                for comp in opts.compilers or entry.compilers:
                    for dev in devices or list(entry.devices):
                        for dtype in opts.dtypes or entry.dtypes:
                            for size in opts.sizes or entry.sizes:
                                if size not in wl.sizes:
                                    continue
                                for bs in opts.batch_sizes or entry.batch_sizes or (wl.batch_size,):
                                    case = Case(wname, sc, comp, dev, dtype, int(bs), size, suite_name, options)
                                    if case.case_id not in seen:
                                        seen.add(case.case_id)
                                        cases.append(case)
    if not cases:
        raise PlanError("the selection matches no case (check --scenario/--size against `compilebench list`)")
    return cases, policy


def merge_options(entry: tuple[tuple[str, Any], ...], overrides: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted({**dict(entry), **overrides}.items()))


def parse_option(text: str) -> tuple[str, Any]:
    """--option KEY=VALUE; VALUE as JSON when it parses (1024, true, 0.5), else a string."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise PlanError(f"--option {text!r} is not KEY=VALUE, e.g. --option resolution=1024")
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = value
    if isinstance(parsed, (dict, list)):
        raise PlanError(f"--option {key}: lists and objects are not supported; pass a number, true/false or text")
    if isinstance(parsed, float) and not math.isfinite(parsed):
        # json.loads takes NaN, Infinity and 1e999: the run file (strict JSON) could not hold the
        # case id, and the journal would resume the case as `KEY=None`
        raise PlanError(f"--option {key}={value}: not a finite number; pass a finite number, true/false or text")
    if isinstance(parsed, int) and not isinstance(parsed, bool) and abs(parsed) >= 2 ** 63:
        raise PlanError(f"--option {key}={value}: an integer beyond 64 bits, which the history store cannot hold")
    return key.strip(), parsed


def new_run_id(label: str) -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    slug = "".join(c if c.isalnum() or c in "-_" else "-" for c in label)[:40] or "run"
    return f"{stamp}-{slug}-{secrets.token_hex(3)}"


def log_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """Last `limit` bytes of a log file: output can be unbounded, the record is not."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            if size > limit:
                fh.seek(size - limit)
            data = fh.read()
        text = data.decode("utf-8", "replace")
        return (f"[... {size - limit} bytes truncated ...]\n" if size > limit else "") + text
    except OSError:
        return ""


def _kill_tree(proc: Any) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except Exception:  # noqa: BLE001 - a timeout, or a forked worker's server gone: killed either way
        pass



def worker_env(cache_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCHINDUCTOR_CACHE_DIR"] = os.environ.get(SHARED_CACHE_ENV) or str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded at run time
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_worker(case: Case, spec: WorkerSpec | dict[str, Any], timeout_s: float, python: str = sys.executable,
               workdir: Path | None = None, extra_env: dict[str, str] | None = None,
               trace: TraceSettings | None = None) -> Record:
    """Run one case in a fresh process; every outcome (record, crash, timeout) is a Record.

    `trace`: write the case's TORCH_TRACE log (and tlparse HTML) under `trace.root`.
    `spec.warm_compile`: after a good cold run, compile again in a fresh process on the
    same (now populated) Inductor cache and record that as the warm compile."""
    spec = WorkerSpec.coerce(spec)
    tmp = Path(tempfile.mkdtemp(prefix="cb-case-", dir=workdir))
    cache_dir = tmp / "inductor-cache"
    trace_dir = trace.root / case_slug(case.case_id) if trace else None
    try:
        record = _run_process(case, spec, tmp, "cold", cache_dir, timeout_s, python, extra_env, trace_dir)
        warm_compile = spec.warm_compile and record.status == "ok" and record.compiled is not None
        if not warm_compile and trace_dir is None:
            return record
        # The runner holds stop signals from here to the journal's fsync (its case loop runs
        # this under deferred()). The warm worker and tlparse (up to TLPARSE_TIMEOUT_S) are
        # still the case in flight: a signal stops them at once and the case is dropped (a
        # --resume reruns it whole), instead of being held until they end (issue 18).
        with interruptible():
            if warm_compile:
                warm_spec = spec.with_mode("warm_compile")
                warm = _run_process(case, warm_spec, tmp, "warm", cache_dir, timeout_s, python, extra_env,
                                    trace_dir / "warm" if trace_dir else None)
                merge_warm_compile(record, warm)
                if trace_dir and trace:
                    attach_trace(record, trace_dir / "warm", trace.max_bytes, key="warm_trace")
            if trace_dir and trace:
                attach_trace(record, trace_dir, trace.max_bytes)  # subprocess.run kills tlparse on the interrupt
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return record


def merge_warm_compile(record: Record, warm: Record) -> None:
    """The warm compile's figures go into the cold record; its failure is a note, not the case's status."""
    from harness.measure.compile_metrics import layers_hit

    wm = warm.metrics or {}
    block: dict[str, Any] = {"status": warm.status, "compile_time_s": wm.get("compile_time_s"),
                             "compile_breakdown_s": wm.get("compile_breakdown_s"), "cache_layers": wm.get("cache_layers"),
                             "layers_hit": layers_hit(wm.get("cache_layers")),
                             "compile_peak_rss_bytes": wm.get("compile_peak_rss_bytes"),
                             "wall_s": warm.worker.get("wall_s")}
    cold = record.metrics.get("compile_time_s")
    if warm.status == "ok" and wm.get("compile_time_s") is not None:
        record.metrics["warm_compile_time_s"] = wm["compile_time_s"]
        block["saved_s"] = round(cold - wm["compile_time_s"], 6) if cold is not None else None
    else:
        err = warm.error or {}
        block["error"] = f"{err.get('type', '')}: {err.get('message', '')}"[:500]
        record.notes.append(f"warm compile {warm.status}: {block['error']}")
    record.metrics["warm_compile"] = block


@dataclass
class Outcome:
    """What the one isolation path saw of one worker process: exit, timeout, logs, wall time,
    which start path it took (`start`: preloaded | spawn, `start_note`) and the escapees swept."""

    returncode: int | None
    timed_out: bool
    out_path: Path
    logs: dict[str, str]
    wall_s: float
    start: dict[str, str]
    escaped: list[int]

    def result(self) -> Any:
        """The worker's JSON output, or None when it wrote none (crash, timeout) or half of one."""
        try:
            return json.loads(self.out_path.read_text()) if self.out_path.exists() else None
        except (OSError, ValueError):
            return None


def launch(spec: WorkerSpec, tmp: Path, name: str, cache_dir: Path, timeout_s: float, python: str = sys.executable,
           extra_env: dict[str, str] | None = None, trace_dir: Path | None = None) -> Outcome:
    """Run one worker task in its box and wait for it: the only place a worker process starts.
    A new session (forked from a preloaded server when it can be, else spawned as
    `python -m harness.run.isolation SPEC OUT`), `cache_dir` as its Inductor cache, a blocking
    wait with `timeout_s`, killpg, the sweep for escaped descendants."""
    spec_path, out_path = tmp / f"{name}-spec.json", tmp / f"{name}-record.json"
    spec.write(spec_path)
    stdout_path, stderr_path = tmp / f"{name}-stdout.log", tmp / f"{name}-stderr.log"
    env = {**worker_env(cache_dir), **(extra_env or {})}  # extra_env: GPU pinning (--gpus), experiment settings
    if trace_dir is not None:
        env.update(trace_env(trace_dir))  # in the environment: torch opens the log at import
    # --compile-overlap: a server started now imports in the runner's time: under the run's lock
    hold = quiet.RunnerHold(env.get(quiet.QUIET_LOCK_ENV), alone=env.get(quiet.ALONE_ENV) == "1")
    try:
        server, start = _server_for(spec, python, env, trace_dir)  # a new server preloads once
        token = child_env(env)  # marks the worker's descendants, even those that leave its session
        return _start_and_wait(spec_path, out_path, stdout_path, stderr_path, env, python, server, start, token,
                               memory_limit_bytes(spec.to_dict()), timeout_s, hold)
    finally:
        hold.release()  # idempotent: released once the worker exists, or here on any failure before


def _start_and_wait(spec_path: Path, out_path: Path, stdout_path: Path, stderr_path: Path, env: dict[str, str],
                    python: str, server: Any, start: dict[str, str], token: str, limit: int | None, timeout_s: float,
                    hold: quiet.RunnerHold) -> Outcome:
    started = time.monotonic()
    # deferred: a stop signal cannot land between the spawn and the registration that lets
    # the runner kill this worker; only the wait itself is interruptible (harness/run/signals.py)
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err, deferred():
        proc: Any = None
        if server is not None:
            try:
                proc = server.start([str(spec_path), str(out_path)], env, stdout_path, stderr_path, limit)
            except ForkServerError as exc:
                start = {"start": "spawn", "start_note": f"fork server failed: {exc}"[:300]}
        if proc is None:
            proc = subprocess.Popen(
                # harness.run.isolation applies the memory cap and parent-death signal, then runs harness.measure.worker
                [python, "-m", "harness.run.isolation", str(spec_path), str(out_path)],
                stdout=out, stderr=err, env=env, cwd=str(PROJECT_ROOT), start_new_session=True,
            )
        LIVE_WORKERS.add(proc)  # so an interrupted --gpus run can kill every worker in flight
        hold.release()  # the worker holds the lock itself from its first line
        if env.get(quiet.QUIET_LOCK_ENV) in STOPPED_LOCKS:  # the run stopped while this slot waited for the lock
            _kill_tree(proc)
        try:
            checkpoint("worker-started")
            with interruptible():
                proc.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_tree(proc)
        except BaseException:
            _kill_tree(proc)
            LIVE_WORKERS.discard(proc)
            _sweep(token, None, server)
            raise
        _kill_tree(proc)  # the worker's own children (compile workers) die with it
        LIVE_WORKERS.discard(proc)
        escaped = _sweep(token, proc.pid, server)  # and so do descendants that called setsid()
    if server is not None and start.get("start") == "preloaded":
        start = {**start, **_cache_leak(server)}
        if getattr(proc, "server_died", None):
            start = {**start, "server_died": str(proc.server_died)[:300]}
    logs = {"stdout": log_tail(stdout_path), "stderr": log_tail(stderr_path)}
    return Outcome(proc.returncode, timed_out, out_path, logs, time.monotonic() - started, start, escaped)


def run_task(spec: WorkerSpec, timeout_s: float, cache_dir: Path, workdir: Path | None = None,
             python: str = sys.executable, extra_env: dict[str, str] | None = None, name: str = "task") -> Outcome:
    """An experiment's worker task (a lifecycle step, a shape policy) through `launch`, its
    logs and spec in a temporary folder (under `workdir` when given) that is removed after."""
    tmp = Path(tempfile.mkdtemp(prefix="cb-task-", dir=workdir))
    try:
        outcome = launch(spec, tmp, name, cache_dir, timeout_s, python, extra_env)
        data = outcome.result()
        kept = tmp.parent / f"{tmp.name}-{name}.json"  # the result outlives the folder
        if data is not None:
            kept.write_text(json.dumps(data))
            outcome.out_path = kept
        return outcome
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_process(case: Case, spec: WorkerSpec, tmp: Path, name: str, cache_dir: Path, timeout_s: float,
                 python: str, extra_env: dict[str, str] | None, trace_dir: Path | None) -> Record:
    outcome = launch(spec, tmp, name, cache_dir, timeout_s, python, extra_env, trace_dir)
    logs = outcome.logs
    record = _record_from_outcome(case, outcome.out_path, outcome.returncode, outcome.timed_out, timeout_s, logs)
    record.logs = logs if record.status != "ok" else {k: v[-2000:] for k, v in logs.items()}
    classify_memory_failure(record, spec.max_memory_bytes if case.device.split(":")[0] == "cpu" else None)
    record.worker.update({"returncode": outcome.returncode, "wall_s": round(outcome.wall_s, 3), "python": python,
                          **outcome.start})
    if outcome.start.get("server_cache_written"):
        record.notes.append("part of this case's Inductor cache went to the fork server's import-time folder, "
                            "not the case's own; later cases of that server were spawned")
    if outcome.start.get("server_died"):
        record.notes.append("the fork server this case was forked from exited while it ran, and the case was killed "
                            "with it; later cases of that server were spawned")
    if outcome.escaped:
        record.worker["escaped_processes_killed"] = len(outcome.escaped)
        record.notes.append(f"{len(outcome.escaped)} process(es) left behind by the worker outside its session were killed")
    return record


def _server_for(spec: WorkerSpec, python: str, env: dict[str, str], trace_dir: Path | None) -> tuple[Any, dict[str, str]]:
    """The preloaded server this case can start from, or None and why it is spawned instead
    (record.worker: start = preloaded | spawn, start_note)."""
    pool = open_pool()
    if pool is None:
        return None, {"start": "spawn"}
    if not spec.preload:
        return None, {"start": "spawn", "start_note": "the task measures a fresh interpreter (imports included)"}
    device = spec.case.device if spec.case else str(spec.payload.get("device", "cpu"))
    if trace_dir is not None:
        return None, {"start": "spawn", "start_note": "--trace: TORCH_TRACE is read when torch is imported"}
    if not device.startswith("cpu") and not gpu_preload_enabled():
        return None, {"start": "spawn", "start_note": f"a {device} case is spawned: {GPU_PRELOAD_ENV}=0"}
    # another interpreter (--env, ab/versions/bisect sides) gets a server of its own, started
    # with that python (server_key holds it) and this checkout on PYTHONPATH (worker_env), as
    # its spawned workers import harness; a server that cannot start there is broken: spawn
    modules = case_preload(spec)
    isa = spec.isa_cache_dir if device.startswith("cpu") and "torch._inductor.compile_fx" in modules else None
    with interruptible():  # a first server imports for seconds: a stop signal must not wait for it
        server = pool.get(python, env, isa, modules)
    if server.broken:
        return None, {"start": "spawn", "start_note": f"fork server unusable: {server.broken}"[:300]}
    if server.info.get("cache_written"):  # its imports wrote cache files: a case would not start from an empty cache
        return None, {"start": "spawn", "start_note": "the fork server's imports wrote into the Inductor cache folder: "
                      + ", ".join(server.info["cache_written"])[:200]}
    if server.info.get("cuda_started"):
        # CPU cases too: a child of a server with CUDA started fails its first CUDA call, and
        # Dynamo makes one on every compile where CUDA is available (the CUDA RNG state)
        where = (f"while importing {server.info['driver_started_by']}" if server.info.get("driver_started_by")
                 else f"in {server.info.get('driver_started_in') or 'its imports'}")
        return None, {"start": "spawn", "start_note": f"the fork server started the CUDA driver {where}"}
    return server, {"start": "preloaded"}


def prestart_servers(cases: Sequence[Case], opts: RunOptions, policy: dict[str, Any], isa_cache: Path,
                     skip: Collection[str] = ()) -> dict[str, Any] | None:
    """Start, together, the preloaded servers the GPU cases of this run will fork from (cases
    in `skip` start no process: journaled or derived), and wait for all of them before the
    first case, so their imports overlap one another and no case (ServerPool.start_all; those
    begun earlier by begin_prestart are awaited too). None when there is nothing to start here:
    no pool, --gpus (each GPU's environment differs), --trace (spawned), GPU cases spawned
    (COMPILEBENCH_PRELOAD_GPU=0) or not runnable here. CPU servers still start on first use:
    each settles the ISA probe once, in its own time."""
    pool, wanted = _prestart_wanted(cases, opts, policy, isa_cache, skip)
    if pool is None or not wanted:
        return None
    with interruptible():  # seconds of imports: a stop signal must not wait for them
        return pool.start_all(wanted)


def begin_prestart(cases: Sequence[Case], opts: RunOptions, policy: dict[str, Any], isa_cache: Path,
                   skip: Collection[str] = ()) -> int:
    """Start the servers prestart_servers would, without waiting: the runner reads the
    environment (its own torch, transformers and diffusers imports, the CUDA query) while
    they import. Returns how many started."""
    pool, wanted = _prestart_wanted(cases, opts, policy, isa_cache, skip)
    return pool.begin_all(wanted) if pool is not None and wanted else 0


def _prestart_wanted(cases: Sequence[Case], opts: RunOptions, policy: dict[str, Any], isa_cache: Path,
                     skip: Collection[str]) -> tuple[Any, list[tuple[str, dict[str, str], tuple[str, ...]]]]:
    """The open pool and the (python, environment, modules) of each server the GPU cases not
    in `skip` fork from; (None, []) where prestarting does not apply (see prestart_servers)."""
    from harness.measure.devices import parse_device

    pool = open_pool()
    if pool is None or opts.gpus or opts.trace or not gpu_preload_enabled():
        return None, []
    python = opts.python or sys.executable
    env = worker_env(Path(tempfile.gettempdir()) / "cb-prestart")  # the per-case cache folder is not in the key
    wanted: dict[tuple[Any, ...], tuple[str, dict[str, str], tuple[str, ...]]] = {}
    runnable: dict[str, bool] = {}  # per device, asked once
    for case in cases:
        if case.case_id in skip or case.device.startswith("cpu"):
            continue
        if case.device not in runnable:
            runnable[case.device] = parse_device(case.device).availability().available
        if not runnable[case.device]:
            continue
        spec = make_spec(case, opts, policy, str(isa_cache))
        if not spec.preload:
            continue
        modules = case_preload(spec)
        wanted.setdefault(modules, (python, env, modules))
    from harness.run.overlap import slot_marker, slots_needed

    slots = slots_needed([c for c in cases if c.case_id not in skip], overlap_width(opts))
    if slots > 1:  # --compile-overlap: each slot forks from servers of its own
        return pool, [(py, {**e, **slot_marker(slot)}, mods) for py, e, mods in wanted.values()
                      for slot in range(slots)]
    return pool, list(wanted.values())


def _isa_cache() -> Path:
    """Where CPU servers keep the settled ISA probe (and the spec names it for every case)."""
    return default_cache_root() / "isa-probe"


def _cache_leak(server: Any) -> dict[str, Any]:
    """After a forked case: did it write into the server's import-time cache folder? Then a
    module of that torch kept a copy of the path that repoint_caches does not re-point. This
    case still compiled cold (the folder was empty), but the next one would find its
    artifacts: the server forks no more cases (a torch the scan in tests/test_forkserver.py
    never saw, e.g. another --env's, is caught here)."""
    written = server.cache_leak()
    if not written:
        return {}
    server.broken = (f"a forked case wrote into the server's import-time Inductor cache folder ({', '.join(written[:3])}): "
                     "this torch keeps a copy of the path that is not re-pointed per case; later cases are spawned")
    return {"server_cache_written": written[:5]}


def _sweep(token: str, session: int | None, server: Any) -> list[int]:
    if server is None:
        return sweep_escaped(token, session=session)
    return sweep_escaped(token, session=session, server_token=server.token, spare=frozenset({server.proc.pid}))


LIVE_WORKERS: set[Any] = set()  # subprocess.Popen or forkserver.ForkedWorker
# the quiet locks of --compile-overlap runs that stopped: a slot that was waiting for its lock
# when the run killed its workers gets the lock then, and must not start a worker after
STOPPED_LOCKS: set[str] = set()


def kill_live_workers() -> None:
    for proc in list(LIVE_WORKERS):
        _kill_tree(proc)


def _record_from_outcome(case: Case, out_path: Path, rc: int | None, timed_out: bool, timeout_s: float,
                         logs: dict[str, str]) -> Record:
    if timed_out:
        return Record.failure(case, "timeout", "Timeout",
                              f"case exceeded --timeout {timeout_s:g}s; the worker's process tree was killed")
    if out_path.exists():
        try:
            data = json.loads(out_path.read_text())
            return Record.from_dict(data)
        except (ValueError, KeyError, TypeError) as exc:
            return Record.failure(case, "crashed", "BadRecord", f"worker wrote an unreadable record: {exc}")
    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        message = f"worker killed by {sig}"
        if sig == "SIGKILL":
            message += " (out of host memory and killed by the kernel, or killed from outside)"
    else:
        message = f"worker exited with code {rc} without writing a record"
    return Record.failure(case, "crashed", "Crash", message, traceback=logs.get("stderr", "")[-4000:])


def modules_for(workload_name: str) -> list[str]:
    """Only the suite module that defines the workload: importing every suite (transformers,
    diffusers) costs each worker seconds that a tiny MLP case should not pay."""
    from harness.model.workloads import WORKLOADS

    source = WORKLOADS[workload_name].source if workload_name in WORKLOADS else ""
    return [source] if source in workload_modules() else workload_modules()


def make_spec(case: Case, opts: RunOptions, policy: dict[str, Any], isa_cache_dir: str) -> WorkerSpec:
    """The one worker's input for one case of a run (or of ab / bisect / versions)."""
    return WorkerSpec(
        case=case,
        compiler=get_compiler(case.compiler),
        policy=dict(policy),
        workload_modules=tuple(modules_for(case.workload)),
        workload_files=tuple(str(Path(p).resolve()) for p in opts.workload_files),
        isa_cache_dir=isa_cache_dir,
        seed=0,
        max_memory_bytes=int(opts.max_memory_gb * (1 << 30)) if opts.max_memory_gb else None,
        warm_compile=bool(opts.warm_compile),
        preload=bool(opts.preload),
    )


def trace_config(opts: RunOptions, run_id: str) -> dict[str, Any] | None:
    """What the run file says about its traces (None: --trace was off)."""
    if not opts.trace:
        return None
    settings = trace_settings(opts.out_dir, run_id, opts.trace_max_mb)
    return {"dir": str(settings.root), "max_bytes": settings.max_bytes}


ProgressFn = Callable[[str, Case, int, int, Record | None], None]


def execute(opts: RunOptions, progress: ProgressFn | None = None, environment: dict[str, Any] | None = None) -> Run:
    """Plan, run every case, save the run file (and ingest it). SIGINT and SIGTERM end the run
    at any moment (harness/run/signals.py): the run file is saved with the finished cases and
    `config.interrupted = true`, then KeyboardInterrupt re-raises. Each finished case is
    journaled first (harness/run/journal.py), so even SIGKILL loses only the case in flight
    and `resume` can finish the run."""
    with StopSignals():
        return _execute(opts, progress, environment)


def _execute(opts: RunOptions, progress: ProgressFn | None, environment: dict[str, Any] | None) -> Run:
    from harness.measure.environment import capture_environment

    # absolute, so a --resume from another folder finds them (the journal keeps the options)
    opts.workload_files = [str(Path(p).resolve()) for p in opts.workload_files]
    cases, suite_policy = plan_cases(opts)
    from harness.run.shard import apply_shard
    from harness.run.twins import plan_twins

    # a derived eager case goes to its twin's shard (apart, it would run in a process of its own)
    attach = plan_twins(cases, enabled=opts.eager_from_twin).sources if opts.shard else None
    cases, shard_info = apply_shard(cases, opts.shard, opts.shard_costs, Path(opts.out_dir) / "history.sqlite",
                                    attach)
    from harness.run.multigpu import check_cases

    check_cases(cases, opts.gpus)  # --gpus: before the journal exists, a plan that cannot run is one line
    policy = {**StopPolicy().to_dict(), **suite_policy, **opts.policy}
    from suites import SUITES

    timeout = opts.timeout_s or (SUITES[opts.suite].timeout_s if opts.suite else 600.0)
    if opts.max_memory_gb is None and opts.suite:  # the suite's default CPU memory cap (hf-tiny, timm-tiny)
        opts = dataclasses.replace(opts, max_memory_gb=SUITES[opts.suite].max_memory_gb)
    from harness.run.overlap import resolve_width

    # resolved here, so the journal's options keep it for a --resume
    width = resolve_width(opts.compile_overlap, SUITES[opts.suite].compile_overlap if opts.suite else 1,
                          opts.gpus, opts.warm_compile, opts.trace)
    opts = dataclasses.replace(opts, compile_overlap=width)
    devices = sorted({c.device for c in cases})
    with preloaded_workers(opts.preload):  # _run_cases's block shares this pool
        # the GPU cases' servers import while the environment is read; the first case still
        # waits for all of them (prestart_servers)
        begin_prestart(cases, opts, policy, _isa_cache(), skip=plan_twins(cases, enabled=opts.eager_from_twin).sources)
        env = environment if environment is not None else capture_environment(devices)
        return _planned_run(cases, opts, policy, timeout, shard_info, env, progress)


def _planned_run(cases: list[Case], opts: RunOptions, policy: dict[str, Any], timeout: float,
                 shard_info: Any, env: dict[str, Any], progress: ProgressFn | None) -> Run:
    """The run's record (id, configuration, environment), then its cases."""
    from harness.run.journal import journal_header

    run_id = new_run_id(opts.label or opts.suite or "adhoc")
    config = {
        "suite": opts.suite,
        "argv": sys.argv,
        "timeout_s": timeout,
        "policy": policy,
        "compilers": {c: get_compiler(c).to_dict() for c in sorted({c.compiler for c in cases})},
        "workload_files": opts.workload_files,
        "workload_file_sha256": workload_file_hashes(opts.workload_files),
        "cases_planned": len(cases),
        "max_memory_gb": opts.max_memory_gb,
        "shard": shard_info,
        "gpus": opts.gpus or None,
        "warm_compile": opts.warm_compile,
        "compile_overlap": opts.compile_overlap or 1,
        "trace": trace_config(opts, run_id),
        "interrupted": False,
    }
    run = Run(run_id=run_id, created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
              label=opts.label, environment=env, config=config)
    return _run_cases(run, cases, opts, lambda: Journal.create(journal_path(opts.out_dir, run_id),
                                                               journal_header(run, cases, opts)), progress)


def resume(ref: str, out_dir: str | Path = "results", progress: ProgressFn | None = None,
           environment: dict[str, Any] | None = None) -> Run:
    """Finish an interrupted run from its journal: keep the journaled records, run only the
    missing cases, write the run file a full run would have written (same id, plan order)."""
    with StopSignals():
        return _resume(ref, out_dir, progress, environment)


def _resume(ref: str, out_dir: str | Path, progress: ProgressFn | None, environment: dict[str, Any] | None) -> Run:
    from harness.measure.environment import capture_environment
    from harness.run.journal import check_workload_files, find_journal, resume_config

    path = find_journal(ref, out_dir)
    journal: Journal | None = None
    try:
        with deferred():  # a signal during the reopen is raised once `journal` can be closed
            journal = Journal.reopen(path)  # locks first: nobody appends while we read
        state = journal.read()
        state.require("options", "created_at")
        moved = check_workload_files(state)  # before they are imported: a changed model must not join the run
        opts = RunOptions(**{k: v for k, v in state.header["options"].items() if k in RunOptions.__dataclass_fields__})
        opts.workload_files = [moved.get(p, p) for p in opts.workload_files]
        if "eager_from_twin" not in state.header["options"]:  # a journal from before twins: go on as it began
            opts.eager_from_twin = False
        opts.out_dir = str(path.parent.parent)
        load_registries(opts.workload_files, opts.override_workloads)
        cases = state.planned_cases()
        env = environment if environment is not None else capture_environment(sorted({c.device for c in cases}))
        run = Run(run_id=state.run_id, created_at=str(state.header["created_at"]), label=str(state.header.get("label") or ""),
                  environment=dict(state.header.get("environment") or {}), config=resume_config(state, env, get_compiler))
        journal.note_resume(run.config["resumed"][-1])
        opened = journal
        return _run_cases(run, cases, opts, lambda: opened, progress, done=state.records)
    except BaseException:
        if journal is not None:
            journal.close()  # idempotent: _run_cases may have closed it already
        raise


def _run_cases(run: Run, cases: list[Case], opts: RunOptions, open_journal: Callable[[], Journal],
               progress: ProgressFn | None, done: dict[str, Record] | None = None) -> Run:
    """The case loop, its cases started from preloaded fork servers unless --no-preload
    (which path each case took: record.worker.start; the servers: config.worker_start)."""
    with preloaded_workers(opts.preload) as servers:
        run.config["worker_start"] = {"preload": servers is not None, "servers": []}
        return _case_loop(run, cases, opts, open_journal, progress, done)


def _case_loop(run: Run, cases: list[Case], opts: RunOptions, open_journal: Callable[[], Journal],
               progress: ProgressFn | None, done: dict[str, Record] | None = None) -> Run:
    """The case loop. Where a stop signal may land, and what it costs (harness/run/signals.py):
    between cases or in a worker's wait, at once (the case in flight is killed); while a
    worker is spawned, a record is journaled or the run file is written, as soon as that
    step ends, so a finished case is never lost."""
    from harness.measure.devices import parse_device
    from harness.run.multigpu import in_plan_order, start_pool
    from harness.run.overlap import lock_folder, slots_needed, start_overlap_pool
    from harness.run.twins import plan_twins

    done = done or {}
    twins = plan_twins(cases, enabled=opts.eager_from_twin)
    run.config["eager_from_twin"] = twins.config()
    finished: dict[str, Record] = dict(done)  # the twins' records, journaled or run now
    policy, timeout = run.config["policy"], run.config["timeout_s"]
    isa_cache = _isa_cache()
    started = time.monotonic()
    trace = trace_settings(opts.out_dir, run.run_id, opts.trace_max_mb) if opts.trace else None

    def run_one(case: Case, extra_env: dict[str, str] | None = None) -> Record:
        avail = parse_device(case.device).availability()
        if not avail.available:
            return Record.failure(case, "skipped", "Skipped", avail.reason, phase="setup")
        return run_worker(case, make_spec(case, opts, policy, str(isa_cache)), timeout,
                          python=opts.python or sys.executable, extra_env=extra_env, trace=trace)

    journal: Journal | None = None
    pool = None
    lock_dir: Path | None = None
    todo = [c for c in cases if c.case_id not in done]
    # the width the run uses, in the journal's header too: a group runs alone, so slots beyond the
    # largest group would idle; a resume keeps the widest of its segments
    slots = slots_needed([c for c in todo if c.case_id not in twins.sources], overlap_width(opts))
    run.config["compile_overlap"] = max(slots, int(run.config.get("compile_overlap") or 1) if done else 1)
    try:
        with deferred():  # created and guarded as one step: an interrupted run always gets its run file
            journal = open_journal()
        isa_cache.mkdir(parents=True, exist_ok=True)
        prestart = prestart_servers(cases, opts, policy, isa_cache, skip={*done, *twins.sources})
        if prestart is not None and isinstance(run.config.get("worker_start"), dict):
            run.config["worker_start"]["prestart"] = prestart
        pool_kw = {"held": twins.sources, "derive": twins.take, "known": done,
                   "on_start": start_announcer(progress, len(cases), len(done))}
        if slots > 1:
            lock_dir = lock_folder()
            pool = start_overlap_pool(todo, run_one, slots, lock_dir / "quiet.lock", **pool_kw)
        else:
            pool = start_pool(todo, run_one, opts.gpus, opts.out_dir, opts.shard_costs, **pool_kw)
        # --gpus: cases come back as they finish (journaled at once), the run file lists them in plan order;
        # one by one, a derived eager case comes right after its twin (twins.py), listed in plan order too
        # (with --gpus the pool holds it until its twin is back)
        for i, case in enumerate(pool.as_completed(cases) if pool else twins.order(cases)):
            if case.case_id in done:  # finished before an interruption: kept as journaled
                run.records.append(done[case.case_id])
                continue
            checkpoint("next-case")
            derived = None if pool else twins.take(case, finished)  # computed, not run: nothing to lose yet
            # no "running" line for a case that runs no process (derived here); with --gpus the pool
            # says "running" itself, when a GPU starts the case (start_announcer)
            if progress and derived is None and not pool:
                progress("start", case, i, len(cases), None)
            # held from the case's last process exit to the journal's fsync: the case is finished, keep it
            # (run_worker reopens the window for the warm worker and tlparse)
            with deferred():
                if pool:  # the pool derives a held eager case itself, on the slot that ran its twin
                    with interruptible():
                        record = pool.result(case)
                else:
                    record = derived or run_one(case)
                fallback = twins.fallback_note(case)
                if fallback and fallback not in record.notes:
                    record.notes.append(fallback)
                checkpoint("record-in-hand")
                journal.append(record)  # on disk (fsync) before the next case starts
                run.records.append(record)
                finished[case.case_id] = record
            if progress:
                progress("done", case, i, len(cases), record)
        run.records = in_plan_order(run.records, cases)
        run.config["eager_from_twin"] = twins.config(run.records)
    except KeyboardInterrupt:
        _stop_lock(lock_dir)
        with deferred():  # a second Ctrl-C must not cut the save of the first one short
            _save_partial(run, cases, opts, started, journal, pool, twins)
        raise
    except Exception as exc:
        _stop_lock(lock_dir)
        # the harness failed between cases (a bug, a full disk): the finished cases still get
        # their run file, marked interrupted with the error, beside the journal `--resume` reads
        run.config["error"] = f"{type(exc).__name__}: {exc}"[:500]
        with deferred(), contextlib.suppress(Exception):  # the original error is the one to report
            _save_partial(run, cases, opts, started, journal, pool, twins)
        raise
    except BaseException:
        if journal is not None:
            journal.close()
        raise
    finally:
        if lock_dir is not None:  # every worker is gone by now (finished, or killed by _save_partial)
            shutil.rmtree(lock_dir, ignore_errors=True)
    with deferred():  # a signal now waits for the run file and its history rows, then exits 130
        try:
            _finish(run, opts, started)
        finally:
            # once the complete run file is written it holds everything the journal had, even
            # if the ingest then failed (the store is rebuilt from run files): a journal left
            # behind would let a --resume rewrite a finished run from it
            if "path" in run.config:
                journal.remove()
            else:  # no run file (a full disk): the journal is all there is, kept for --resume
                journal.close()
    return run


def _stop_lock(lock_dir: Path | None) -> None:
    """Before the pool's workers are killed: no slot may start one after, once the lock frees."""
    if lock_dir is not None:
        STOPPED_LOCKS.add(str(lock_dir / "quiet.lock"))


def start_announcer(progress: ProgressFn | None, total: int, already: int) -> Callable[[Case], None] | None:
    """--gpus: the progress's "start" event of a case when its GPU starts it (called from the
    pool's slot threads), numbered in start order after the `already` finished cases."""
    if progress is None:
        return None
    numbers = itertools.count(already)
    lock = threading.Lock()

    def announce(case: Case) -> None:
        with lock:
            number = next(numbers)
        progress("start", case, number, total, None)

    return announce


def _save_partial(run: Run, cases: list[Case], opts: RunOptions, started: float, journal: Journal | None,
                  pool: Any, twins: Any) -> None:
    """A run that stops before its last case (a signal, an error): cases finished on other GPUs
    are journaled, live workers killed (the pool's slots start no more), and the run file holds
    exactly what the journal holds, marked interrupted; the journal is kept for --resume."""
    if pool:
        for finished in pool.cancel():  # done on another GPU, not journaled yet: measured, keep it
            if journal is not None:
                journal.append(finished)
        kill_live_workers()
    if journal is None:
        return
    run.config["interrupted"] = True
    run.records = journal.recorded(cases, run.records)  # a signal may land between the two appends
    run.config["eager_from_twin"] = twins.config(run.records)
    journal.close()  # kept: `compilebench run --resume` finishes the run from it
    _finish(run, opts, started)


def _finish(run: Run, opts: RunOptions, started: float) -> None:
    run.config["wall_s"] = round(time.monotonic() - started, 3)
    if overlap_width(opts) > 1:  # each compile's overlap with the others' work, each measurement checked alone
        from harness.run.overlap import annotate

        annotate(run.records)
    if opts.gpus:  # per-GPU busy/idle and scaling efficiency, from the records' pool stamps (multigpu.py)
        from harness.run.multigpu import pool_summary

        run.config["multi_gpu"] = pool_summary(run.records)
    pool = open_pool()
    if pool is not None and isinstance(run.config.get("worker_start"), dict):
        run.config["worker_start"]["servers"] = pool.describe()
    path = run_path(opts.out_dir, run.run_id)
    save_run(run, path)
    run.config["path"] = str(path)
    checkpoint("run-file-written")
    if opts.ingest:
        from harness.run.store import HistoryStore, StoreError

        try:
            with HistoryStore(Path(opts.out_dir) / "history.sqlite") as store:
                store.ingest(run)
        except StoreError as exc:
            exc.run = run  # the saved run rides with the error: the CLI still prints its results
            raise


def overlap_width(opts: RunOptions) -> int:
    """How many workers the run keeps alive at once on one device (1: one at a time)."""
    return int(opts.compile_overlap or 1)


def run_path(out_dir: str | Path, run_id: str) -> Path:
    return Path(out_dir) / "runs" / f"{run_id}.json"


def summarize_statuses(records: Iterable[Record]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        out[r.status] = out.get(r.status, 0) + 1
    return out
