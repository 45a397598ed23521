"""A/A noise on this machine: how far apart two runs of the *same* code land, per case.

`compilebench noise --suite smoke --rounds 3` measures every case in 2 x rounds fresh
processes of the same Python (an A/B session whose sides are identical, interleaved the same
way), then reports per case and metric:
  * process spread: robust coefficient of variation of the per-process values;
  * mdc_single: the smallest change a plain base-vs-head compare (one process per side) can
    tell from noise here: the 95th percentile of |a/b - 1| over all pairs of processes;
  * mdc_ab: the same for `compilebench ab` with this many rounds (per-process medians,
    2.8 standard errors of the difference of the means of the log values).
Each is measured on the value compare judges: latency as compare would normalise it by the
machine probe (a pair whose probe moved by the `probe` threshold: divided; per-process tests:
always), cold compile time in CPU seconds where compare judges those (CPU cases).
and flags cases whose mdc_single exceeds the gate threshold. `compare --noise FILE` uses the
file to flag verdicts on such cases as too noisy to judge.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.analysis.compare import group_records
from harness.analysis.metrics import (
    compile_time_value,
    judges_compile_cpu_seconds,
    scalar_value,
    timing_samples,
)
from harness.analysis.probe_norm import probe_factors
from harness.analysis.thresholds import DEFAULT_PROBE_MOVED, ThresholdConfig
from harness.model.errors import UserError
from harness.model.jsonfile import read_json
from harness.model.schema import Record, Run, RunFileError, write_json_atomic

NOISE_METRICS = ("speedup", "latency", "compile_time", "peak_memory")
# the fewest A/A rounds (2 processes each) whose figures mean something: 6 processes give 15
# pairs for mdc_single's 95th percentile (2 processes: one pair, the "percentile" is that one
# change) and 5 degrees of freedom for mdc_ab's standard deviation (relative error of an sd
# ~1/sqrt(2 dof): 32% at 5, 71% at 1); `noise --rounds 1` claimed a 0.6% detectable change
# from two processes
MIN_ROUNDS = 3
NOISE_FORMAT = "compilebench-noise/1"


def process_values(records: Sequence[Record], metric: str) -> list[float]:
    """One value per process: the median of its samples (timings) or its scalar (compile
    time: CPU seconds where compare judges those)."""
    ok = [r for r in records if r.status == "ok"]
    cpu_compile = metric == "compile_time" and judges_compile_cpu_seconds(ok)
    out = []
    for r in ok:
        if metric in ("speedup", "latency"):
            samples = timing_samples(r, metric)
            if samples is not None and samples.size:
                out.append(float(np.median(samples)))
        else:
            value = compile_time_value(r, cpu_compile) if metric == "compile_time" else scalar_value(r, metric)
            if value is not None:
                out.append(value)
    return out


def _latency_factors(records: Sequence[Record], n_values: int) -> list[float] | None:
    """The probe factors of the ok processes, lined up with process_values' latencies (None
    when some process lacks a probe or a latency: nothing to line them up with)."""
    ok = [r for r in records if r.status == "ok"]
    found = probe_factors(ok, len(ok)) if len(ok) >= 2 else None
    return found[0] if found is not None and len(found[0]) == n_values else None


def judged_pair_changes(values: Sequence[float], factors: Sequence[float] | None, moved_at: float) -> list[float]:
    """|a/b - 1| over all ordered pairs of processes, as a one-process-per-side compare would
    judge them: divided by the probe factors when the probe moved by `moved_at` between the two."""
    out = []
    for (a, fa), (b, fb) in itertools.permutations(zip(values, factors or [1.0] * len(values), strict=True), 2):
        if b <= 0:
            continue
        if factors is not None and abs(fa / fb - 1.0) >= moved_at:
            a, b = a / fa, b / fb
        out.append(abs(a / b - 1.0))
    return out


def spread(values: Sequence[float], rounds: int, factors: Sequence[float] | None = None,
           moved_at: float = DEFAULT_PROBE_MOVED) -> dict[str, Any] | None:
    """Spread of per-process values; with `factors` (latency), mdc_single and max_pair_change
    on the pairs as compare judges them and mdc_ab on the normalised values (per-process
    tests always normalise)."""
    if len(values) < 2:
        return None
    v = np.asarray(values, dtype=float)
    med = float(np.median(v))
    if med <= 0:
        return None
    mad_cv = float(1.4826 * np.median(np.abs(v - med)) / med)
    changes = judged_pair_changes(values, factors, moved_at)
    judged = v / np.asarray(factors) if factors is not None else v
    logs = np.log(judged[judged > 0])
    sd_log = float(np.std(logs, ddof=1)) if logs.size > 1 else 0.0
    return {
        "n_processes": int(v.size),
        "median": med,
        "cv": mad_cv,
        "max_pair_change": float(max(changes)),
        "mdc_single": float(np.quantile(changes, 0.95)),
        "mdc_ab": float(math.expm1(2.8 * sd_log * math.sqrt(2.0 / max(rounds, 1)))),
    }


class NoiseInputError(UserError, ValueError):
    """Too few A/A rounds or runs for the noise statistics; the message names the minimum."""


def check_rounds(rounds: int, what: str = "--rounds") -> None:
    if rounds < MIN_ROUNDS:
        raise NoiseInputError(f"noise needs {what} >= {MIN_ROUNDS} ({2 * MIN_ROUNDS} processes a case: 15 pairs for the "
                              f"95th-percentile A/A change), got {rounds}; pass --rounds {MIN_ROUNDS} or more")


def analyze_noise(runs: Sequence[Run], rounds: int, config: ThresholdConfig | None = None) -> dict[str, Any]:
    """Per case and metric spread from A/A runs (every run measured the same code)."""
    check_rounds(rounds, "rounds")
    config = config or ThresholdConfig()
    cases: dict[str, Any] = {}
    for case_id, records in sorted(group_records(runs).items()):
        ref = records[0].case
        thresholds = config.for_case(case_id, ref.workload, ref.suite)
        entry: dict[str, Any] = {"metrics": {}, "too_noisy": []}
        moved_at = thresholds.get("probe")
        for metric in NOISE_METRICS:
            values = process_values(records, metric)
            factors = _latency_factors(records, len(values)) if metric == "latency" and moved_at is not None else None
            stats = spread(values, rounds, factors, float(moved_at or DEFAULT_PROBE_MOVED))
            if stats is None:
                continue
            if factors is not None:
                stats["normalised_by_probe"] = True
            threshold = thresholds.get(metric)
            stats["threshold"] = threshold
            entry["metrics"][metric] = stats
            if isinstance(threshold, float) and stats["mdc_single"] > threshold:
                entry["too_noisy"].append(metric)
        entry["statuses"] = sorted({r.status for r in records})
        cases[case_id] = entry
    env = runs[0].environment if runs else {}
    return {"format": NOISE_FORMAT, "host": env.get("host"), "cpu_model": env.get("cpu_model"),
            "torch": env.get("torch_version"), "rounds": rounds, "run_ids": [r.run_id for r in runs], "cases": cases}


def save_noise(data: dict[str, Any], path: str | Path) -> Path:
    return write_json_atomic(path, data)


def load_noise_table(path: str | Path) -> dict[str, dict[str, float]]:
    """case_id -> metric -> mdc_single, for compare's too-noisy flags."""
    data = read_json(path, RunFileError, "noise file", f"write one with `compilebench noise -o {path}`")
    if not isinstance(data, dict) or data.get("format") != NOISE_FORMAT:
        raise RunFileError(f"{path}: not a compilebench noise file (format {NOISE_FORMAT!r} expected)")
    cases = data.get("cases", {})
    if not isinstance(cases, dict):
        raise RunFileError(f"{path}: 'cases' is {type(cases).__name__}, not a mapping of case ids; "
                           f"write the file again with `compilebench noise -o {path}`")
    table: dict[str, dict[str, float]] = {}
    for case_id, entry in cases.items():
        metrics = entry.get("metrics", {}) if isinstance(entry, dict) else None
        if not isinstance(metrics, dict):
            raise RunFileError(f"{path}: case {case_id!r} has no 'metrics' mapping; write the file again with "
                               f"`compilebench noise -o {path}`")
        for metric, stats in metrics.items():
            mdc = stats.get("mdc_single") if isinstance(stats, dict) else None
            if not isinstance(mdc, (int, float)) or isinstance(mdc, bool):
                raise RunFileError(f"{path}: case {case_id!r} metric {metric!r} has no numeric 'mdc_single'; "
                                   f"write the file again with `compilebench noise -o {path}`")
            table.setdefault(case_id, {})[metric] = float(mdc)
    return table
