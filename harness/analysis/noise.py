"""A/A noise on this machine: how far apart two runs of the *same* code land, per case.

`compilebench noise --suite smoke --rounds 3` measures every case in 2 x rounds fresh
processes of the same Python (an A/B session whose sides are identical, interleaved the same
way), then reports per case and metric:
  * process spread: robust coefficient of variation of the per-process values;
  * mdc_single: the smallest change a plain base-vs-head compare (one process per side) can
    tell from noise here: the 95th percentile of |a/b - 1| over all pairs of processes;
  * mdc_ab: the same for `compilebench ab` with this many rounds (per-process medians,
    2.8 standard errors of the difference of the means of the log values);
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

from harness.analysis.compare import group_records, scalar_value, timing_samples
from harness.analysis.thresholds import ThresholdConfig
from harness.model.jsonfile import read_json
from harness.model.schema import Record, Run, RunFileError, write_json_atomic

NOISE_METRICS = ("speedup", "latency", "compile_time", "peak_memory")
NOISE_FORMAT = "compilebench-noise/1"


def process_values(records: Sequence[Record], metric: str) -> list[float]:
    """One value per process: the median of its samples (timings) or its scalar."""
    out = []
    for r in records:
        if r.status != "ok":
            continue
        if metric in ("speedup", "latency"):
            samples = timing_samples(r, metric)
            if samples is not None and samples.size:
                out.append(float(np.median(samples)))
        else:
            value = scalar_value(r, metric)
            if value is not None:
                out.append(value)
    return out


def spread(values: Sequence[float], rounds: int) -> dict[str, Any] | None:
    if len(values) < 2:
        return None
    v = np.asarray(values, dtype=float)
    med = float(np.median(v))
    if med <= 0:
        return None
    mad_cv = float(1.4826 * np.median(np.abs(v - med)) / med)
    changes = [abs(a / b - 1.0) for a, b in itertools.permutations(v, 2) if b > 0]
    logs = np.log(v[v > 0])
    sd_log = float(np.std(logs, ddof=1)) if logs.size > 1 else 0.0
    return {
        "n_processes": int(v.size),
        "median": med,
        "cv": mad_cv,
        "max_pair_change": float(max(changes)),
        "mdc_single": float(np.quantile(changes, 0.95)),
        "mdc_ab": float(math.expm1(2.8 * sd_log * math.sqrt(2.0 / max(rounds, 1)))),
    }


def analyze_noise(runs: Sequence[Run], rounds: int, config: ThresholdConfig | None = None) -> dict[str, Any]:
    """Per case and metric spread from A/A runs (every run measured the same code)."""
    config = config or ThresholdConfig()
    cases: dict[str, Any] = {}
    for case_id, records in sorted(group_records(runs).items()):
        ref = records[0].case
        thresholds = config.for_case(case_id, ref.workload, ref.suite)
        entry: dict[str, Any] = {"metrics": {}, "too_noisy": []}
        for metric in NOISE_METRICS:
            stats = spread(process_values(records, metric), rounds)
            if stats is None:
                continue
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
    return {case_id: {m: s["mdc_single"] for m, s in entry.get("metrics", {}).items()}
            for case_id, entry in data.get("cases", {}).items()}
