"""Generated (SYNTHETIC) nightly history, for report/dashboard benchmarks, tests and demos.

Nothing here is a measurement. Every generated run says so twice: its label starts with
"SYNTHETIC" and its environment has `synthetic: true`, and the report and the dashboard
print a banner for such data. Values are drawn from a seeded numpy generator so a given
seed always yields the same history; regressions can be injected as step changes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from harness.model.schema import Case, Record, Run

SYNTHETIC_LABEL = "SYNTHETIC generated data, not a measurement"


@dataclass(frozen=True)
class Step:
    """An injected change: from night `night` on, `metric` of matching cases is multiplied by `factor`."""

    workload: str
    night: int
    metric: str = "speedup"  # speedup | compile_time_s | compiled_peak_memory_bytes | status
    factor: float = 0.8
    compiler: str | None = None


@dataclass
class SyntheticSpec:
    cases: int = 20
    compilers: tuple[str, ...] = ("inductor", "inductor-max-autotune")
    devices: tuple[str, ...] = ("cpu",)
    suite: str = "synthetic"
    samples: int = 30
    noise: float = 0.02  # relative night-to-night noise of each metric
    steps: tuple[Step, ...] = ()
    fail_rate: float = 0.0
    seed: int = 0
    start: dt.datetime = field(default_factory=lambda: dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc))


def _base_cases(spec: SyntheticSpec) -> list[Case]:
    per = -(-spec.cases // (len(spec.compilers) * len(spec.devices)))  # ceil: then cut to exactly `cases`
    out = []
    for device in spec.devices:
        for compiler in spec.compilers:
            for i in range(per):
                out.append(Case(f"synth-{i:03d}", "forward" if i % 3 else "train", compiler, device, "float32",
                                8 * (1 + i % 4), "tiny", spec.suite))
    return out[: spec.cases]


def synthetic_run(spec: SyntheticSpec, night: int, rng: np.random.Generator | None = None) -> Run:
    """One generated night: a Run whose records look like the worker's (raw samples included)."""
    rng = rng or np.random.default_rng(spec.seed * 100_003 + night)
    when = spec.start + dt.timedelta(days=night)
    records = [_record(spec, case, night, rng) for case in _base_cases(spec)]
    return Run(
        run_id=f"{when:%Y%m%d-%H%M%S}-{spec.suite}-synth{night:04d}",
        created_at=when.isoformat(),
        label=SYNTHETIC_LABEL,
        environment={"synthetic": True, "host": "synthetic", "torch_version": "synthetic", "git_commit": f"synth{night}",
                     "packages": {"torch": "synthetic"}},
        config={"suite": spec.suite, "synthetic": True},
        records=records,
    )


def synthetic_history(spec: SyntheticSpec, nights: int) -> Iterator[Run]:
    for night in range(nights):
        yield synthetic_run(spec, night)


def _factor(spec: SyntheticSpec, case: Case, night: int, metric: str) -> float:
    f = 1.0
    for s in spec.steps:
        if s.metric == metric and s.workload == case.workload and night >= s.night and s.compiler in (None, case.compiler):
            f *= s.factor
    return f


def _record(spec: SyntheticSpec, case: Case, night: int, rng: np.random.Generator) -> Record:
    seed = sum(map(ord, case.case_id))  # stable per case: each case has its own typical values
    base_latency = 1e-4 * (1 + seed % 50)
    base_speedup = 0.8 + (seed % 17) / 10
    fails = _factor(spec, case, night, "status") != 1.0 or rng.random() < spec.fail_rate
    if fails:
        return Record.failure(case, "fail_compile", "SyntheticError", "synthetic compile failure", phase="compile",
                              traceback="SYNTHETIC")
    speedup = base_speedup * _factor(spec, case, night, "speedup") * (1 + rng.normal(0, spec.noise))
    compiled_latency = base_latency / speedup
    eager = rng.normal(base_latency, base_latency * spec.noise, spec.samples).clip(base_latency * 0.5).tolist()
    compiled = rng.normal(compiled_latency, compiled_latency * spec.noise, spec.samples).clip(compiled_latency * 0.5).tolist()
    mem_e = int(2**26 * (1 + seed % 7))
    mem_c = int(mem_e * 0.9 * _factor(spec, case, night, "compiled_peak_memory_bytes") * (1 + rng.normal(0, spec.noise / 2)))
    compile_s = (2 + seed % 9) * _factor(spec, case, night, "compile_time_s") * (1 + rng.normal(0, spec.noise))
    return Record(
        case, "ok",
        eager={"samples_s": eager, "peak_memory_bytes": mem_e, "memory_kind": "synthetic", "inner_loops": 1},
        compiled={"samples_s": compiled, "peak_memory_bytes": mem_c, "memory_kind": "synthetic", "inner_loops": 1},
        metrics={
            "speedup": speedup, "speedup_ci_low": speedup * 0.97, "speedup_ci_high": speedup * 1.03,
            "latency_s": compiled_latency, "throughput": case.batch_size / compiled_latency, "throughput_unit": "samples/s",
            "compile_time_s": compile_s,
            "compile_breakdown_s": {"dynamo": compile_s * 0.2, "aot_autograd": compile_s * 0.3, "inductor": compile_s * 0.5},
            "compression_ratio": mem_e / mem_c, "graph_breaks": seed % 3, "unique_graph_breaks": seed % 3, "graphs": 1 + seed % 3,
            "recompiles": 0, "accuracy": {"status": "pass"},
        },
    )
