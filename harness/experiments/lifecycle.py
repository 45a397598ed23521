"""The compile lifecycle: how long a fresh process takes to its first correct result.

Each row of the cold-start table is one fresh process (a worker task, `run_step_task`, started
through the one isolation path, harness.run.runner.run_task; spawned, never preloaded, since a
cold start includes the imports), and the parent chooses which Inductor cache directory it sees:

- jit_cold:   torch.compile, empty cache dir A (also saves the Mega-Cache artifacts)
- jit_warm:   torch.compile again, fresh process on the populated cache dir A
- mega_cache: empty cache dir, `torch.compiler.load_cache_artifacts` of jit_cold's bytes,
              then torch.compile
- aot_compile: `torch.compile(type(m).forward, fullgraph=True).aot_compile(((m, *args), kwargs))` +
              `save_compiled_function` in a build process, `torch.compiler.load_compiled_function`
              in a fresh process with an empty cache dir (what a new machine sees) and
              with the build's cache dir (`aot_compile_warm`)
- aoti:       `torch.export` + `torch._inductor.aoti_compile_and_package` in a build process,
              `aoti_load_package` in a fresh process with an empty cache dir and
              AOTI_RUNTIME_CHECK_INPUTS=1 (AOTInductor does not check shapes otherwise)

Per row: time to first correct result (`ttfr_s` = compile or load + first call; imports,
model build and the CPU ISA probe are reported apart), artifact size, cache hits, the
steady-state median of the compiled/loaded callable next to eager, and for the AOT paths
what a batch size the artifact was not built for does (it must raise, never answer wrong).

Pickle: aot_compile artifacts and Mega-Cache bytes are pickles, and loading a pickle runs
code. A load step therefore only opens a file inside the parent's own work folder whose
SHA-256 matches what the build step in this run reported; never point it at a download.
"""

from __future__ import annotations

import time

_PROCESS_START = time.perf_counter()  # before `import torch`: import time is part of a cold start

import functools  # noqa: E402
import hashlib  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from harness.measure.compile_metrics import layers_hit  # noqa: E402

ROWS = ("jit_cold", "jit_warm", "mega_cache", "aot_compile", "aot_compile_warm", "aoti")
ROW_LABELS = {
    "jit_cold": "JIT cold (empty cache)",
    "jit_warm": "JIT warm (populated cache)",
    "mega_cache": "Mega-Cache load + JIT",
    "aot_compile": "aot_compile load (empty cache)",
    "aot_compile_warm": "aot_compile load (build's cache)",
    "aoti": "AOTInductor load (empty cache)",
}


# what each row needs from the installed torch (harness.measure.capabilities): a row whose
# feature is missing ends `skipped` with the reason instead of failing
ROW_FEATURES: dict[str, tuple[str, ...]] = {
    "jit_cold": ("torch.compile",), "jit_warm": ("torch.compile",), "mega_cache": ("torch.compile", "mega_cache"),
    "aot_compile": ("aot_compile",), "aot_compile_warm": ("aot_compile",), "aoti": ("aoti",),
}


class ArtifactError(RuntimeError):
    """An artifact that is not the one this run built (path outside the work folder or
    a different SHA-256): it is never unpickled."""


@dataclass
class ColdStartOptions:
    workload: str = "mlp-deep"
    size: str = "tiny"
    batch_size: int | None = None
    device: str = "cpu"
    dtype: str = "float32"
    rows: Sequence[str] = ROWS
    workload_files: Sequence[str] = ()
    override_workloads: bool = False  # a workload file may replace a built-in of the same name (as in run)
    steady_calls: int = 30
    warmup: int = 3  # untimed calls per variant before the steady-state samples (run's StopPolicy.warmup)
    timeout_s: float = 600.0
    workdir: str | None = None  # kept when given; a temporary folder otherwise
    options: dict[str, Any] = field(default_factory=dict)  # workload options


# ----------------------------------------------------------------------------- child side


def sha256_of(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_artifact(path: str | Path, workdir: str | Path, expected_sha256: str) -> Path:
    """Refuse to unpickle anything but the artifact this run built (see module docstring)."""
    path, workdir = Path(path).resolve(), Path(workdir).resolve()
    if workdir not in path.parents:
        raise ArtifactError(f"artifact {path} is outside this run's work folder {workdir}; refusing to load it")
    actual = sha256_of(path)
    if actual != expected_sha256:
        raise ArtifactError(f"artifact {path} has SHA-256 {actual[:12]}..., the build wrote {expected_sha256[:12]}...; "
                            "refusing to load it")
    return path


def _build(step: dict[str, Any], batch_size: int | None = None) -> tuple[Any, tuple, dict, Any]:
    """Model and inputs from the workload registry, eval mode, seed 0 (same weights in
    every process). Returns (model, args, kwargs, workload)."""
    import torch

    from harness.model.workloads import WorkloadContext, get_workload, import_workloads

    import_workloads(step)
    wl = get_workload(step["workload"])
    torch.manual_seed(0)
    ctx = WorkloadContext(device=step["device"], dtype=getattr(torch, step["dtype"]),
                          batch_size=batch_size or step["batch_size"], size=step["size"], options=step.get("options", {}))
    built = wl.build(ctx)
    model = built.model
    if hasattr(model, "eval"):
        model.eval()
    return model, tuple(built.args), dict(built.kwargs), wl


def _timed(fn: Callable[[], Any], sync: Callable[[], None]) -> tuple[Any, float]:
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - start


def steady_medians(fns: dict[str, Callable[[], Any]], device: Any, calls: int, warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each callable, interleaved (same process, same load), after
    `warmup` untimed calls each: run's measuring loop and stop policy (harness/measure/timing.py)
    with a fixed number of samples."""
    from harness.measure.timing import HostTimer, StopPolicy, measure_interleaved
    from harness.model.stats import summarize

    policy = StopPolicy(warmup=warmup, min_samples=calls, min_time_s=0.0, max_samples=calls, max_time_s=60.0)
    samples = measure_interleaved(fns, HostTimer(device.synchronize), policy)
    return {name: summarize(s)["median"] for name, s in samples.items()}


def _wrong_shape_check(step: dict[str, Any], call: Callable[..., Any], eager: Any) -> dict[str, Any]:
    """Call with batch+1: an artifact built for one shape must raise, not answer wrong."""
    import torch

    from harness.model.accuracy import compare_outputs

    _, args, kwargs, _ = _build(step, batch_size=step["batch_size"] + 1)
    try:
        with torch.no_grad():
            out = call(*args, **kwargs)
    except Exception as exc:  # the outcome we want: a clear error
        return {"batch_size": step["batch_size"] + 1, "outcome": "raised", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    with torch.no_grad():
        ref = eager(*args, **kwargs)
    ok = compare_outputs(ref, out, step["dtype"]).get("status") == "pass"
    return {"batch_size": step["batch_size"] + 1, "outcome": "accepted_correct" if ok else "silently_wrong"}


def run_step(step: dict[str, Any]) -> dict[str, Any]:
    """One row (or build) in this process; failures come back as data."""
    result: dict[str, Any] = {"row": step["row"], "kind": step["kind"], "status": "ok"}
    try:
        _run_step(step, result)
    except Exception as exc:  # noqa: BLE001 - every failure becomes data
        import traceback

        from compiler import NotApplicableError

        if isinstance(exc, NotApplicableError):  # a feature this torch lacks: skipped, with the reason
            result.update(status="skipped", error=str(exc))
            return result
        result["status"] = "failed"
        result["error"] = f"{type(exc).__name__}: {str(exc)[:2000]}"
        result["traceback"] = traceback.format_exc()[-8000:]
    return result


def _run_step(step: dict[str, Any], result: dict[str, Any]) -> None:
    started = time.perf_counter()
    import torch

    from harness.measure.capabilities import capability, enable, require
    from harness.measure.compile_metrics import CompileObserver
    from harness.measure.devices import parse_device
    from harness.model.accuracy import compare_outputs

    result["import_s"] = time.perf_counter() - started
    require(*ROW_FEATURES.get(step["row"], ()))
    device = parse_device(step["device"])
    if device.type == "cpu":
        from harness.measure.worker import probe_cpu_isa

        result["isa_probe_s"] = probe_cpu_isa(step.get("isa_cache_dir"))["seconds"]
    t = time.perf_counter()
    model, args, kwargs, _ = _build(step)
    with torch.no_grad():
        reference = model(*args, **kwargs)
    device.synchronize()
    result["build_s"] = time.perf_counter() - t
    observer = CompileObserver().start()
    kind = step["kind"]
    artifact = Path(step["artifact"]) if step.get("artifact") else None

    t = time.perf_counter()
    call: Callable[..., Any]
    if kind in ("jit", "mega_cache"):
        if kind == "mega_cache":
            data = check_artifact(artifact, step["workdir"], step["sha256"]).read_bytes()
            info = torch.compiler.load_cache_artifacts(data)
            result["mega_cache_loaded"] = info is not None
            # what the bytes held, per artifact type: explains a load that brings no hits
            result["mega_cache_artifacts"] = {k: len(v) for k, v in (info.artifacts if info else {}).items()}
        call = torch.compile(model)
    elif kind == "aot_compile_build":
        enable("aot_compile")  # torch 2.11 has it behind a flag that is off by default
        dropped: dict[str, int] = {}
        options = {"guard_filter_fn": serializable_guards(dropped)}
        # the class's forward with the module as its first argument: compiling the bound
        # `torch.compile(model).forward` traces `_wrapped_call_impl(*args)` but binds calls to
        # forward's own signature, so a model that calls a submodule by keyword (every
        # transformers model) fails its first call ("GuardManager check failed: len(L['args'])")
        with torch.no_grad():
            compiled = torch.compile(type(model).forward, fullgraph=True, options=options).aot_compile(
                ((model, *args), kwargs))
        result["guards_dropped"] = dropped
        compiled.save_compiled_function(str(artifact), external_data={"model": model})
        call = functools.partial(compiled, model)
    elif kind == "aot_compile_load":
        enable("aot_compile")
        with open(check_artifact(artifact, step["workdir"], step["sha256"]), "rb") as fh:
            # the module is not pickled into the artifact: this process supplies its own
            call = functools.partial(torch.compiler.load_compiled_function(fh, external_data={"model": model}), model)
    elif kind == "aoti_build":
        exported = torch.export.export(model, args, kwargs)
        torch._inductor.aoti_compile_and_package(exported, package_path=str(artifact))
        # package only: on the H200 (torch 2.11.0+cu130) AOTIModelPackageLoader segfaulted in
        # the process that had just compiled the package (docs/COMPILERS.md has the
        # reproducer); the aoti row loads it in a fresh process, which is what it measures
        result["ready_s"] = time.perf_counter() - t
        _record_artifact(result, artifact)
        return
    elif kind == "aoti_load":
        call = torch._inductor.aoti_load_package(str(check_artifact(artifact, step["workdir"], step["sha256"])))
    else:
        raise ValueError(f"unknown lifecycle step kind {kind!r}")
    result["ready_s"] = time.perf_counter() - t

    def first() -> Any:
        with torch.no_grad():
            return call(*args, **kwargs)

    out, result["first_call_s"] = _timed(first, device.synchronize)
    result["ttfr_s"] = result["ready_s"] + result["first_call_s"]
    result["accuracy"] = compare_outputs(reference, out, step["dtype"])
    if result["accuracy"].get("status") != "pass":
        result["status"] = "fail_accuracy"
    snap = observer.snapshot()
    result["cache"] = snap["cache"]
    result["cache_layers"] = snap["cache_layers"]
    if kind == "mega_cache":  # its artifacts pre-filled the other layers: their hits came from it
        result["cache_layers"]["mega_cache"] = {"used": bool(result.get("mega_cache_loaded")),
                                                "artifacts": result.get("mega_cache_artifacts", {})}
    result["compile_breakdown_s"] = snap["compile_breakdown_s"]
    # seconds spent after the first result, per task: a slow row says where (not in TTFR)
    after = result["after_first_result_s"] = {}
    t = time.perf_counter()
    if kind == "jit" and step.get("save_mega") and capability("mega_cache").available:
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            Path(step["save_mega"]).write_bytes(saved[0])
            result["mega_cache_bytes"] = len(saved[0])
            result["mega_cache_sha256"] = sha256_of(step["save_mega"])
        after["mega_cache_save"] = time.perf_counter() - t
    _record_artifact(result, artifact)
    if kind in ("aot_compile_load", "aoti_load"):
        t = time.perf_counter()
        result["wrong_shape"] = _wrong_shape_check(step, call, model)
        after["wrong_shape_check"] = time.perf_counter() - t
    if not kind.endswith("_build"):
        def eager_call() -> Any:
            with torch.no_grad():
                return model(*args, **kwargs)

        t = time.perf_counter()
        medians = steady_medians({"eager": eager_call, "artifact": first}, device, step.get("steady_calls", 30),
                                 step.get("warmup", 3))
        result["steady_eager_s"], result["steady_s"] = medians["eager"], medians["artifact"]
        after["steady_state"] = time.perf_counter() - t
    result["process_to_ready_s"] = time.perf_counter() - _PROCESS_START


def _record_artifact(result: dict[str, Any], artifact: Path | None) -> None:
    if artifact is not None and artifact.exists():
        result["artifact_bytes"] = artifact.stat().st_size
        result["artifact_sha256"] = sha256_of(artifact)


def run_step_task(step: dict[str, Any]) -> dict[str, Any]:
    """The worker task (harness/measure/spec.py) of one row or build. `process_to_ready_s`
    counts from the worker interpreter's start (harness.run.isolation.PROCESS_START): the
    rows run spawned, never preloaded, because a cold start includes the imports."""
    global _PROCESS_START
    from harness.run.isolation import PROCESS_START

    _PROCESS_START = PROCESS_START
    return run_step(step)


# ---------------------------------------------------------------------------- parent side


def _spawn(step: dict[str, Any], workdir: Path, cache_dir: Path, timeout_s: float,
           extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one step in a fresh process on `cache_dir` through the one worker path
    (harness.run.runner.run_task); a crash or timeout is a result too."""
    from harness.measure.spec import WorkerSpec
    from harness.run.runner import run_task

    name = step["row"] + ("-build" if step["kind"].endswith("_build") else "")
    spec = WorkerSpec(task="harness.experiments.lifecycle:run_step_task", payload=step, preload=False,
                      isa_cache_dir=step.get("isa_cache_dir"))
    # faulthandler: a native crash (SIGSEGV in a compiled artifact) still prints the Python
    # stack it happened under, which lands in the row's error
    env = {"PYTHONFAULTHANDLER": "1", **(extra_env or {})}
    outcome = run_task(spec, timeout_s, cache_dir, workdir=workdir, extra_env=env, name=name)
    result = outcome.result()
    if result is None:
        rc = None if outcome.timed_out else outcome.returncode
        result = row_without_result(step, rc, outcome.logs.get("stderr", ""), timeout_s)
    result["process_wall_s"] = outcome.wall_s
    return result


def row_without_result(step: dict[str, Any], rc: int | None, stderr: str, timeout_s: float) -> dict[str, Any]:
    """A process that wrote no result: `timeout`, or `crashed` naming the signal or exit code."""
    if rc is None:
        return {"row": step["row"], "kind": step["kind"], "status": "timeout",
                "error": f"process exceeded --timeout {timeout_s:g}s and was killed"}
    if rc < 0:
        try:
            how = f"killed by {signal.Signals(-rc).name} (exit {rc})"
        except ValueError:
            how = f"killed by signal {-rc}"
    else:
        how = f"exited with code {rc}"
    return {"row": step["row"], "kind": step["kind"], "status": "crashed", "signal": -rc if rc < 0 else None,
            "error": f"process {how} without a result; stderr tail: {stderr[-3000:]}"}


def coldstart(opts: ColdStartOptions, progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the cold-start table; returns {'config', 'rows': [...], 'builds': [...]}.
    `progress` sees each row and build as it finishes (a long table shows what it has)."""
    from harness.measure.capabilities import missing_reason
    from harness.model.workloads import get_workload
    from harness.run.runner import default_cache_root, load_registries, workload_modules

    load_registries(opts.workload_files, opts.override_workloads)
    wl = get_workload(opts.workload)
    unknown = [r for r in opts.rows if r not in ROWS]
    if unknown:
        raise ValueError(f"unknown cold-start row(s) {unknown}; rows are {', '.join(ROWS)}")
    owned = opts.workdir is None
    workdir = Path(opts.workdir or tempfile.mkdtemp(prefix="cb-coldstart-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    isa_cache = default_cache_root() / "isa-probe"
    isa_cache.mkdir(parents=True, exist_ok=True)
    base = {
        "workload": opts.workload, "size": opts.size, "batch_size": opts.batch_size or wl.batch_size,
        "device": opts.device, "dtype": opts.dtype, "options": opts.options, "workdir": str(workdir),
        "workload_modules": workload_modules(), "workload_files": [str(Path(p).resolve()) for p in opts.workload_files],
        "isa_cache_dir": str(isa_cache), "steady_calls": opts.steady_calls, "warmup": opts.warmup,
    }
    rows: dict[str, dict[str, Any]] = {}
    builds: list[dict[str, Any]] = []

    def step(row: str, kind: str, cache: str, **extra: Any) -> dict[str, Any]:
        skip = missing_reason(*ROW_FEATURES[row])  # no process for a row this torch cannot do
        if skip:
            result = {"row": row, "kind": kind, "status": "skipped", "error": skip}
        else:
            env = {"AOTI_RUNTIME_CHECK_INPUTS": "1"} if kind.startswith("aoti") else None
            result = _spawn({**base, "row": row, "kind": kind, **extra}, workdir, workdir / cache, opts.timeout_s, env)
        if progress:
            progress(result)
        return result

    want = set(opts.rows)
    mega = workdir / "mega-cache.bin"
    if want & {"jit_cold", "jit_warm", "mega_cache"}:
        rows["jit_cold"] = step("jit_cold", "jit", "cache-jit", save_mega=str(mega))
    if "jit_warm" in want:
        rows["jit_warm"] = step("jit_warm", "jit", "cache-jit")
    if "mega_cache" in want:
        sha = rows["jit_cold"].get("mega_cache_sha256")
        if sha or missing_reason(*ROW_FEATURES["mega_cache"]):
            rows["mega_cache"] = step("mega_cache", "mega_cache", "cache-mega", artifact=str(mega), sha256=sha)
        elif rows["jit_cold"].get("status") != "ok":
            rows["mega_cache"] = row_of_failed_build("mega_cache", rows["jit_cold"])
        else:
            rows["mega_cache"] = {"row": "mega_cache", "status": "failed", "error": "jit_cold saved no Mega-Cache artifacts"}
    if want & {"aot_compile", "aot_compile_warm"}:
        fn_path = workdir / "aot_compile.bin"
        build = step("aot_compile", "aot_compile_build", "cache-aot-build", artifact=str(fn_path))
        builds.append(build)
        for row, cache in (("aot_compile", "cache-aot-load"), ("aot_compile_warm", "cache-aot-build")):
            if row in want:
                rows[row] = (step(row, "aot_compile_load", cache, artifact=str(fn_path), sha256=build["artifact_sha256"])
                             if build.get("artifact_sha256") else row_of_failed_build(row, build))
    if "aoti" in want:
        pkg = workdir / "model.pt2"
        build = step("aoti", "aoti_build", "cache-aoti-build", artifact=str(pkg))
        builds.append(build)
        rows["aoti"] = (step("aoti", "aoti_load", "cache-aoti-load", artifact=str(pkg), sha256=build["artifact_sha256"])
                        if build.get("artifact_sha256") else row_of_failed_build("aoti", build))
    ordered = [rows[r] for r in ROWS if r in rows and (r in want)]
    if owned:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return {"config": {**base, "rows": list(opts.rows)}, "rows": ordered, "builds": builds}


# guard types torch cannot write into an aot_compile package (CheckFunctionManager's list)
UNSERIALIZABLE_GUARDS = ("ID_MATCH", "FUNCTION_MATCH", "CLASS_MATCH", "MODULE_MATCH", "CLOSURE_MATCH", "WEAKREF_ALIVE")


def serializable_guards(dropped: dict[str, int]) -> Callable[[list[Any]], list[bool]]:
    """A `guard_filter_fn` that keeps every guard a package can hold and counts the rest by type.

    Why: Dynamo guards a transformers model on object identity (ID_MATCH on its config and
    helper functions), and `save_compiled_function` refuses such guards ("ID_MATCH guard
    cannot be serialized"). Dropping them is what an aot_compile user does for a model whose
    code is fixed; the load rows then check the artifact against eager and on a wrong shape,
    and the row records which guards were dropped."""
    try:
        from torch._dynamo.guards import CheckFunctionManager

        unsupported = tuple(getattr(CheckFunctionManager, "UNSUPPORTED_SERIALIZATION_GUARD_TYPES", UNSERIALIZABLE_GUARDS))
    except ImportError:
        unsupported = UNSERIALIZABLE_GUARDS

    def keep(entries: list[Any]) -> list[bool]:
        flags = []
        for entry in entries:  # a guard can be unserializable through a type it derives from
            types = (entry.guard_type, *(getattr(entry, "derived_guard_types", None) or ()))
            bad = next((t for t in types if t in unsupported), None)
            if bad:
                dropped[bad] = dropped.get(bad, 0) + 1
            flags.append(bad is None)
        return flags

    return keep


def row_of_failed_build(row: str, build: dict[str, Any]) -> dict[str, Any]:
    """The load row of a build that produced no artifact keeps the build's status
    (skipped / crashed with its signal / timeout / failed) and says it was the build."""
    status = build.get("status") if build.get("status") in ("skipped", "crashed", "timeout") else "failed"
    return {"row": row, "status": status, "signal": build.get("signal"),
            "error": f"build step {build.get('status')}: {build.get('error', '')}"}


def speedup_vs_cold(result: dict[str, Any]) -> dict[str, float]:
    """ttfr(jit_cold) / ttfr(row) for every row that has both figures."""
    by_row = {r["row"]: r for r in result["rows"]}
    cold = by_row.get("jit_cold", {}).get("ttfr_s")
    if not cold:
        return {}
    return {row: cold / r["ttfr_s"] for row, r in by_row.items() if r.get("ttfr_s")}


def coldstart_table(result: dict[str, Any]) -> Any:
    """A rich Table of the cold-start rows."""
    from rich.table import Table

    speedups = speedup_vs_cold(result)
    cfg = result["config"]
    t = Table(title=f"cold start: {cfg['workload']} ({cfg['size']}, batch {cfg['batch_size']}, {cfg['device']}, {cfg['dtype']})")
    for col in ("path", "status", "ready s", "1st call s", "TTFR s", "vs cold", "process s", "artifact",
                "cache hits/lookups", "layer hit", "saved s", "steady ms", "eager ms", "wrong shape"):
        t.add_column(col)
    for r in result["rows"]:
        size = r.get("artifact_bytes") or r.get("mega_cache_bytes")
        t.add_row(
            ROW_LABELS.get(r["row"], r["row"]), r.get("status", "?"), _fmt(r.get("ready_s")), _fmt(r.get("first_call_s")),
            _fmt(r.get("ttfr_s")), f"{speedups[r['row']]:.1f}x" if r["row"] in speedups else "-",
            _fmt(r.get("process_wall_s")), f"{size / 1024:.0f} KiB" if size else "-", cache_cell(r),
            ", ".join(layers_hit(r.get("cache_layers"))) or "-", _fmt(cache_saved_s(r.get("cache_layers"))),
            _fmt(r.get("steady_s"), 1e3), _fmt(r.get("steady_eager_s"), 1e3),
            (r.get("wrong_shape") or {}).get("outcome", "-"),
        )
    return t


def cache_cell(row: dict[str, Any]) -> str:
    """'fx 3/3, aot 3/3' per layer that was looked up; bypasses and their first reason shown."""
    parts = []
    for layer, name in (("fx_graph", "fx"), ("aot_autograd", "aot"), ("autotune", "autotune")):
        block = (row.get("cache_layers") or {}).get(layer) or {}
        looked = sum(int(block.get(k) or 0) for k in ("hits", "misses", "bypasses"))
        if looked:
            text = f"{name} {int(block.get('hits') or 0)}/{looked}"
            if block.get("bypasses"):
                reasons = block.get("bypass_reasons") or [{}]
                text += f" (bypass: {str(reasons[0].get('reason', '?'))[:60]})"
            parts.append(text)
    return ", ".join(parts) or "-"


def cache_saved_s(layers: dict[str, Any] | None) -> float | None:
    """Compile seconds the caches saved by torch's own account (FX graph layer; None when unknown)."""
    block = (layers or {}).get("fx_graph") or {}
    return block.get("saved_s") if block.get("hits") else None


def _fmt(value: float | None, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:.3f}"


