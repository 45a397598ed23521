"""Shape sweep: how a compiled model copes with changing inputs.

One fresh process per dynamic-shape policy (`static` = dynamic=False, `automatic` =
dynamic=None, `dynamic` = dynamic=True, `mark_dynamic` = automatic plus
`torch._dynamo.mark_dynamic(x, 0)` on every input), each calling the same compiled model
on a sequence of batch sizes, then optionally on another dtype and another device
(triggers that recompile under every policy). Per policy: recompile count with Dynamo's
guard-failure reasons, total compile time across the sweep, first-call and steady latency
per shape, and whether `recompile_limit` was hit (Dynamo then silently runs eager).

Each policy is a worker task (`run_policy_task`) through the one isolation path
(harness.run.runner.run_task), from a preloaded worker when one is open; `compilebench sweep`.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POLICIES: dict[str, bool | None] = {"static": False, "automatic": None, "dynamic": True, "mark_dynamic": None}
LIMIT_LOGGER = "torch._dynamo.convert_frame"


@dataclass
class SweepOptions:
    workload: str = "mlp-deep"
    size: str = "tiny"
    device: str = "cpu"
    dtype: str = "float32"
    batch_sizes: Sequence[int] = (2, 4, 8, 16)
    policies: Sequence[str] = tuple(POLICIES)
    backend: str = "inductor"
    triggers: Sequence[str] = ()  # "dtype", "device"
    recompile_limit: int | None = None  # None: torch's default (8)
    steady_calls: int = 10
    warmup: int = 3  # untimed calls per point before its steady-state samples (run's StopPolicy.warmup)
    workload_files: Sequence[str] = ()
    override_workloads: bool = False  # a workload file may replace a built-in of the same name (as in run)
    timeout_s: float = 600.0


def expected_recompiles(policy: str, batch_sizes: Sequence[int]) -> int | None:
    """What each policy implies for a sweep over distinct batch sizes (None: no fixed rule).
    static: one compile per distinct shape; automatic: the second shape recompiles once
    with the dimension dynamic, then nothing; dynamic / mark_dynamic: no recompile."""
    distinct = len(dict.fromkeys(batch_sizes))
    return {"static": distinct - 1, "automatic": min(distinct - 1, 1), "dynamic": 0, "mark_dynamic": 0}.get(policy)


class _LimitCapture:
    """Catches Dynamo's 'hit config.recompile_limit' warning (the only signal of the silent
    fallback to eager)."""

    def __init__(self) -> None:
        import logging

        self.hits: list[str] = []
        capture = self

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                msg = record.getMessage()
                if "recompile_limit" in msg or "cache_size_limit" in msg:
                    capture.hits.append(msg.splitlines()[0][:300])

        self.handler = Handler()
        logging.getLogger(LIMIT_LOGGER).addHandler(self.handler)


def _inputs(step: dict[str, Any], batch: int, dtype: Any, device: str) -> tuple[tuple, dict]:
    import torch

    from harness.model.workloads import WorkloadContext, get_workload

    torch.manual_seed(0)
    built = get_workload(step["workload"]).build(
        WorkloadContext(device=device, dtype=dtype, batch_size=batch, size=step["size"]))
    return tuple(built.args), dict(built.kwargs)


def _points(step: dict[str, Any]) -> list[dict[str, Any]]:
    """The sweep: each batch size, then the dtype / device triggers on the last batch size."""
    import torch

    points = [{"batch_size": b, "dtype": step["dtype"], "device": step["device"], "trigger": "shape"}
              for b in step["batch_sizes"]]
    last = step["batch_sizes"][-1]
    if "dtype" in step["triggers"]:
        other = "float64" if step["dtype"] != "float64" else "float32"
        points.append({"batch_size": last, "dtype": other, "device": step["device"], "trigger": "dtype"})
    if "device" in step["triggers"]:
        other_dev = "cpu" if step["device"] != "cpu" else ("cuda" if torch.cuda.is_available() else None)
        if other_dev:
            points.append({"batch_size": last, "dtype": step["dtype"], "device": other_dev, "trigger": "device"})
    return points


def run_policy(step: dict[str, Any]) -> dict[str, Any]:
    """One policy's sweep in this process."""
    import torch

    from harness.experiments.lifecycle import steady_medians
    from harness.measure.compile_metrics import CompileObserver
    from harness.measure.devices import parse_device
    from harness.model.workloads import WorkloadContext, get_workload, import_workloads

    import_workloads(step)
    from harness.measure.capabilities import recompile_limit, set_recompile_limit

    if step.get("recompile_limit") is not None:
        set_recompile_limit(int(step["recompile_limit"]))
    policy = step["policy"]
    torch.manual_seed(0)
    model = get_workload(step["workload"]).build(WorkloadContext(
        device=step["device"], dtype=getattr(torch, step["dtype"]), batch_size=step["batch_sizes"][0], size=step["size"])).model
    model.eval()
    compiled = torch.compile(model, backend=step["backend"], dynamic=POLICIES[policy])
    observer = CompileObserver().start()
    limit = _LimitCapture()
    result: dict[str, Any] = {"policy": policy, "dynamic": POLICIES[policy], "points": [], "status": "ok"}
    skipped = [t for t in step["triggers"] if t not in {p["trigger"] for p in _points(step)}]
    if skipped:
        result["notes"] = [f"trigger {t!r} skipped: no second device here" for t in skipped]
    for point in _points(step):
        dtype = getattr(torch, point["dtype"])
        model.to(device=point["device"], dtype=dtype)
        args, kwargs = _inputs(step, point["batch_size"], dtype, point["device"])
        if policy == "mark_dynamic":
            for a in args:
                if isinstance(a, torch.Tensor):
                    torch._dynamo.mark_dynamic(a, 0)
        before = observer.snapshot()
        device = parse_device(point["device"])
        with torch.no_grad():
            device.synchronize()
            start = time.perf_counter()
            out = compiled(*args, **kwargs)
            device.synchronize()
            first = time.perf_counter() - start
            ref = model(*args, **kwargs)
            steady = steady_medians({"compiled": functools.partial(compiled, *args, **kwargs)}, device, step["steady_calls"],
                                    step.get("warmup", 3))
        after = observer.snapshot()
        result["points"].append({
            **point, "first_call_s": first, "steady_s": steady["compiled"],
            "recompiled": after["recompiles"] > before["recompiles"],
            "compile_s": after["compile_breakdown_s"]["total"] - before["compile_breakdown_s"]["total"],
            "max_abs_err": float((out.float() - ref.float()).abs().max()) if isinstance(out, torch.Tensor) else None,
        })
    snap = observer.snapshot()
    result.update({
        "recompiles": snap["recompiles"], "recompile_reasons": snap["recompile_reasons"],
        "compile_time_total_s": snap["compile_breakdown_s"]["total"], "compiled_frames": snap["compiled_frames"],
        "recompile_limit": recompile_limit(),
        "recompile_limit_hit": bool(limit.hits), "recompile_limit_messages": limit.hits,
        "expected_recompiles": expected_recompiles(policy, step["batch_sizes"]) if not step["triggers"] else None,
    })
    return result


def run_policy_task(step: dict[str, Any]) -> dict[str, Any]:
    """The worker task (harness/measure/spec.py) of one policy: a failed policy is a result, not a crash."""
    try:
        return run_policy(step)
    except Exception as exc:  # noqa: BLE001 - a failed policy is a result, not a crash
        import traceback

        return {"policy": step["policy"], "status": "failed", "error": f"{type(exc).__name__}: {exc}"[:2000],
                "traceback": traceback.format_exc()[-8000:]}


def sweep(opts: SweepOptions) -> dict[str, Any]:
    """Every policy in its own fresh process (own empty Inductor cache)."""
    from harness.measure.spec import WorkerSpec
    from harness.model.workloads import get_workload
    from harness.run.forkserver import preloaded_workers
    from harness.run.runner import load_registries, run_task, workload_modules

    load_registries(opts.workload_files, opts.override_workloads)
    get_workload(opts.workload)
    bad = [p for p in opts.policies if p not in POLICIES]
    if bad:
        raise ValueError(f"unknown shape policy {bad}; policies are {', '.join(POLICIES)}")
    bad = [t for t in opts.triggers if t not in ("dtype", "device")]
    if bad:
        raise ValueError(f"unknown trigger {bad}; triggers are dtype, device")
    base = {"workload": opts.workload, "size": opts.size, "device": opts.device, "dtype": opts.dtype,
            "batch_sizes": list(opts.batch_sizes), "backend": opts.backend, "triggers": list(opts.triggers),
            "recompile_limit": opts.recompile_limit, "steady_calls": opts.steady_calls, "warmup": opts.warmup,
            "workload_modules": workload_modules(), "workload_files": [str(Path(p).resolve()) for p in opts.workload_files]}
    results = []
    with tempfile.TemporaryDirectory(prefix="cb-sweep-") as tmp, preloaded_workers():
        for policy in opts.policies:
            # the one worker path (harness.run.runner.run_task): new session, killpg on timeout,
            # escaped-child sweep, a preloaded worker when one is open; each policy its own cold cache
            spec = WorkerSpec(task="harness.experiments.shapes:run_policy_task", payload={**base, "policy": policy})
            outcome = run_task(spec, opts.timeout_s, Path(tmp) / f"cache-{policy}", workdir=Path(tmp), name=policy)
            result = outcome.result()
            if result is None:
                why = f"timed out after {opts.timeout_s:g}s" if outcome.timed_out else \
                    f"worker exited with code {outcome.returncode}: {outcome.logs.get('stderr', '')[-2000:]}"
                result = {"policy": policy, "status": "timeout" if outcome.timed_out else "crashed", "error": why}
            result["worker"] = {"wall_s": round(outcome.wall_s, 3), **outcome.start}
            results.append(result)
    return {"config": base, "policies": results}


def sweep_table(result: dict[str, Any]) -> Any:
    from rich.table import Table

    cfg = result["config"]
    t = Table(title=f"shape sweep: {cfg['workload']} batch sizes {cfg['batch_sizes']} triggers {cfg['triggers'] or '-'}")
    for col in ("policy", "status", "recompiles", "expected", "compile s (total)", "limit hit", "per point: trigger/batch "
                "first ms -> steady ms", "first recompile reason"):
        t.add_column(col)
    for r in result["policies"]:
        points = "; ".join(f"{p['trigger'][0]}{p['batch_size']} {p['first_call_s'] * 1e3:.0f}->{(p['steady_s'] or 0) * 1e3:.2f}"
                           for p in r.get("points", []))
        reasons = r.get("recompile_reasons") or []
        t.add_row(r["policy"], r.get("status", "?"), str(r.get("recompiles", "-")), str(r.get("expected_recompiles", "-")),
                  f"{r.get('compile_time_total_s', 0):.2f}", str(r.get("recompile_limit_hit", "-")), points,
                  (reasons[0]["reason"][:80] if reasons else r.get("error", "")[:80]))
    return t


