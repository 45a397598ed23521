"""Synthetic runs with known distributions, for checking the gate's statistics.

Timing samples are log-normal around a chosen median (the long right tail real timings
have) from a seeded generator, so a test knows the true change it is asking the gate to
find. Used by tests/test_compare.py and benchmarks/gate_proof.py; never by a real run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.measure.probe import CPU_PROBE_VERSION
from harness.model.schema import Case, Record, Run, error_info

SYNTHETIC_ENV: dict[str, Any] = {
    "machine": "x86_64", "cpu_model": "Synthetic CPU", "torch_version": "2.13.0+cpu", "torch_git": "abc",
    "torch_cuda": None, "torch_hip": None, "packages": {"triton": None, "pytorch-triton": None},
    "devices": {"cpu": {"type": "cpu", "name": "Synthetic CPU"}}, "host": "synthetic",
}


def synthetic_case(i: int, workload: str = "synth", suite: str = "synthetic") -> Case:
    return Case(f"{workload}{i}", "forward", "inductor", "cpu", "float32", 8, "tiny", suite)


def synthetic_record(case: Case, rng: np.random.Generator, *, eager_median: float = 1e-3,
                     compiled_median: float = 5e-4, spread: float = 0.05, n: int = 100,
                     compile_time: float = 2.0, compile_spread: float = 0.02, peak_memory: int = 100 << 20, graph_breaks: int = 0,
                     recompiles: int = 0, status: str = "ok", accuracy: str = "pass",
                     probe_median: float | None = None, probe_n: int = 20, probe_version: str = CPU_PROBE_VERSION,
                     compile_cpu: float | None = None) -> Record:
    """One record whose samples are log-normal with the given medians and log-spread;
    `probe_median`: a machine-speed probe block (set `probe_version`) whose three kernels sit around it."""
    eager = (eager_median * np.exp(rng.normal(0, spread, n))).tolist()
    compiled = (compiled_median * np.exp(rng.normal(0, spread, n))).tolist()
    metrics = {"compile_time_s": compile_time * float(np.exp(rng.normal(0, compile_spread))),
               "graph_breaks": graph_breaks, "recompiles": recompiles, "accuracy": {"status": accuracy},
               "latency_s": float(np.median(compiled)), "speedup": float(np.median(eager) / np.median(compiled))}
    if probe_median is not None:
        metrics["machine_probe"] = {"version": probe_version, "n": probe_n, "samples_s": {
            k: (probe_median * np.exp(rng.normal(0, spread, probe_n))).tolist() for k in ("gemm", "pointwise", "python")}}
    if compile_cpu is not None:
        metrics["compile_cpu_s"] = compile_cpu * float(np.exp(rng.normal(0, compile_spread)))
    error = None if status == "ok" else error_info("Synthetic", f"synthetic {status}", phase="run")
    return Record(case, status, error=error, metrics=metrics,
                  eager={"samples_s": eager, "peak_memory_bytes": peak_memory},
                  compiled={"samples_s": compiled, "peak_memory_bytes": peak_memory})


def synthetic_run(n_cases: int, seed: int, *, slowdown: float = 0.0, slow_cases: int | None = None,
                  run_id: str = "synthetic", n_samples: int = 100, spread: float = 0.05,
                  environment: dict[str, Any] | None = None) -> Run:
    """`n_cases` cases; the first `slow_cases` (default all) have compiled code `slowdown`
    (a fraction) slower than the base medians."""
    rng = np.random.default_rng(seed)
    slow_cases = n_cases if slow_cases is None else slow_cases
    records = []
    for i in range(n_cases):
        factor = 1.0 + (slowdown if i < slow_cases else 0.0)
        records.append(synthetic_record(synthetic_case(i), rng, compiled_median=5e-4 * factor, n=n_samples,
                                        spread=spread))
    return Run(run_id, "2026-01-01T00:00:00+00:00", run_id, dict(environment or SYNTHETIC_ENV), {}, records)
