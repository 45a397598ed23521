"""pytest-benchmark interchange: export compilebench runs as pytest-benchmark JSON (so
`pytest-benchmark compare a.json b.json` works on them) and ingest pytest-benchmark JSON
(from `pytest suites/test_bench_smoke.py --benchmark-json=out.json`, or any suite) as runs.

Export writes one benchmark per variant of each case (`<case_id>[compiled]`,
`<case_id>[eager]`) with the raw samples in `stats.data` and the compile metrics in
`extra_info`. Import rebuilds records from benchmarks the compilebench pytest plugin wrote
(`extra_info.compilebench_case`) exactly, and from foreign benchmarks as cases of workload
= the test name; raw samples come from `stats.data` (pytest's `--benchmark-save-data`);
without them only the summary survives and compare can judge no timing for that case.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import platform
from pathlib import Path
from typing import Any

import numpy as np

from harness.model.jsonfile import read_json
from harness.model.schema import Case, Record, Run, RunFileError, write_json_atomic
from harness.model.stats import summarize

PYTEST_BENCHMARK_VERSION = "5.1.0"  # the JSON layout written (5.x reads it)
EXTRA_KEYS = ("compile_time_s", "graph_breaks", "unique_graph_breaks", "recompiles", "graphs", "speedup",
              "speedup_ci_low", "speedup_ci_high", "latency_s", "throughput", "throughput_unit")


class PytestBenchmarkFileError(RunFileError):
    """A pytest-benchmark JSON file that cannot be ingested."""


def pytest_stats(samples: list[float]) -> dict[str, Any]:
    """pytest-benchmark's `stats` block for raw per-call samples (seconds)."""
    a = np.asarray(samples, dtype=float)
    q1, median, q3 = (float(x) for x in np.percentile(a, [25, 50, 75]))
    iqr = q3 - q1
    mean = float(a.mean())
    stddev = float(a.std(ddof=1)) if a.size > 1 else 0.0
    low, high = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    return {
        "min": float(a.min()), "max": float(a.max()), "mean": mean, "stddev": stddev, "rounds": int(a.size),
        "median": median, "iqr": iqr, "q1": q1, "q3": q3,
        "iqr_outliers": int(((a < low) | (a > high)).sum()),
        "stddev_outliers": int((np.abs(a - mean) > stddev).sum()),
        "outliers": f"{int((np.abs(a - mean) > stddev).sum())};{int(((a < low) | (a > high)).sum())}",
        "ld15iqr": float(a[a >= low].min()), "hd15iqr": float(a[a <= high].max()),
        "ops": 1.0 / mean if mean > 0 else 0.0, "total": float(a.sum()), "data": a.tolist(), "iterations": 1,
    }


def extra_info(record: Record, variant: str) -> dict[str, Any]:
    m = record.metrics or {}
    info = {k: m.get(k) for k in EXTRA_KEYS if m.get(k) is not None}
    info.update({"compilebench_case": record.case.to_dict(), "compilebench_variant": variant,
                 "status": record.status, "accuracy": (m.get("accuracy") or {}).get("status")})
    return info


def export_run(run: Run) -> dict[str, Any]:
    env = run.environment
    benchmarks = []
    for record in run.records:
        for variant in ("compiled", "eager"):
            block = getattr(record, variant) or {}
            samples = block.get("samples_s") or []
            if not samples:
                continue
            benchmarks.append({
                "group": record.case_id, "name": f"{record.case_id}[{variant}]",
                "fullname": f"compilebench::{record.case_id}[{variant}]", "params": {"variant": variant},
                "param": variant, "extra_info": extra_info(record, variant),
                "options": {"disable_gc": False, "timer": "perf_counter", "min_rounds": len(samples),
                            "max_time": None, "min_time": None, "warmup": True},
                "stats": pytest_stats(samples),
            })
    return {
        "machine_info": {"node": env.get("host"), "processor": env.get("cpu_model"), "machine": env.get("machine"),
                         "python_implementation": platform.python_implementation(),
                         "python_version": env.get("python"), "system": platform.system(),
                         "release": platform.release(), "cpu": {"brand_raw": env.get("cpu_model")},
                         "compilebench_environment": env},
        "commit_info": {"id": env.get("git_commit"), "dirty": str(env.get("git_commit", "")).endswith("-dirty"),
                        "project": "compilebench", "branch": None},
        "benchmarks": benchmarks,
        "datetime": run.created_at,
        "version": PYTEST_BENCHMARK_VERSION,
        "compilebench_run_id": run.run_id,
    }


def write_export(run: Run, path: str | Path) -> Path:
    return write_json_atomic(path, export_run(run))


def _environment(data: dict[str, Any]) -> dict[str, Any]:
    info = data.get("machine_info") or {}
    if isinstance(info.get("compilebench_environment"), dict):
        return dict(info["compilebench_environment"])
    cpu = (info.get("cpu") or {}).get("brand_raw") or info.get("processor")
    return {"host": info.get("node"), "cpu_model": cpu, "machine": info.get("machine"),
            "python": info.get("python_version"), "git_commit": (data.get("commit_info") or {}).get("id"),
            "torch_version": (data.get("compilebench") or {}).get("torch_version"), "source": "pytest-benchmark"}


def _foreign_case(bench: dict[str, Any]) -> Case:
    name = str(bench.get("name") or bench.get("fullname") or "benchmark")
    return Case(name, "pytest", "unknown", "cpu", "float32", 1, "tiny", "pytest-benchmark")


def import_data(data: Any, source: str) -> Run:
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise PytestBenchmarkFileError(f"{source}: not a pytest-benchmark JSON file (no 'benchmarks' list); "
                                       "write one with `pytest --benchmark-json FILE`")
    records: dict[str, Record] = {}
    for i, bench in enumerate(data["benchmarks"]):
        try:
            info = bench.get("extra_info") or {}
            stats = bench["stats"]
            samples = [float(x) for x in stats.get("data") or []] or [float(stats["median"])]
            variant = info.get("compilebench_variant", "compiled")
            case = Case.from_dict(info["compilebench_case"]) if "compilebench_case" in info else _foreign_case(bench)
        except (KeyError, TypeError, ValueError) as exc:
            raise PytestBenchmarkFileError(f"{source}: benchmarks[{i}] is malformed ({type(exc).__name__}: {exc})") from None
        record = records.get(case.case_id) or Record(case, str(info.get("status", "ok")))
        if record.status not in ("ok", "fail_accuracy", "fail_compile", "fail_run", "oom", "timeout", "crashed", "skipped"):
            record.status = "ok"
        setattr(record, variant if variant in ("eager", "compiled") else "compiled",
                {"samples_s": samples, "summary": summarize(samples), "first_call_s": None, "inner_loops": 1})
        record.metrics.update({k: info[k] for k in EXTRA_KEYS if k in info})
        if info.get("accuracy"):
            record.metrics["accuracy"] = {"status": info["accuracy"]}
        records[case.case_id] = record
    for record in records.values():
        measured = record.compiled or record.eager or {}
        record.metrics.setdefault("latency_s", (measured.get("summary") or {}).get("median"))
    created = str(data.get("datetime") or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    run_id = str(data.get("compilebench_run_id") or _foreign_run_id(data, created))
    return Run(run_id, created, "pytest-benchmark", _environment(data),
               {"suite": None, "source": source, "imported_from": "pytest-benchmark"}, list(records.values()))


def _foreign_run_id(data: dict[str, Any], created: str) -> str:
    """A run id for a file pytest-benchmark wrote: its time stamp (so `latest` orders it) and a
    hash of its content, so every night's `bench.json` is a run of its own (the file's name,
    the same each night, made each import overwrite the last one's run file and history rows)
    while importing one file twice stays one run."""
    try:
        stamp = _dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
        if stamp.tzinfo is not None:
            stamp = stamp.astimezone(_dt.timezone.utc)
    except ValueError:
        stamp = _dt.datetime.now(_dt.timezone.utc)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:6]
    return f"{stamp.strftime('%Y%m%d-%H%M%S')}-pytest-benchmark-{digest}"


def import_file(path: str | Path) -> Run:
    data = read_json(path, PytestBenchmarkFileError, "pytest-benchmark JSON file",
                     "write one with `pytest --benchmark-json FILE`")
    return import_data(data, str(path))
