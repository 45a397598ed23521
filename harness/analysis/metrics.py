"""The metric table of compare, and what a record yields for each metric.

`METRICS` names every metric compare judges (its unit, direction and kind); the functions
here read a record's samples or value for one of them, leaving out what cannot be trusted
(non-finite or non-positive samples, samples the process was descheduled through, a damaged
field of a foreign run file). Judging them is harness/analysis/judge_metric.py's job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.model.schema import Record

__all__ = ["RAN_SHARE", "MIN_RAN_FRACTION", "Metric", "METRICS", "as_mapping", "clean_samples", "samples_and_mask",
           "timing_samples", "scalar_value", "accuracy_status", "is_worse", "judges_compile_cpu_seconds",
           "compile_time_value", "compile_cpu_seconds"]


RAN_SHARE = 0.5  # a sample whose process ran less than this share of it was descheduled
MIN_RAN_FRACTION = 0.25  # below this share of samples left, the descheduled filter stands down


@dataclass(frozen=True)
class Metric:
    name: str  # also the threshold key
    unit: str
    higher_is_better: bool
    kind: str  # "timing" (raw samples), "scalar" (one value per process), "count", "exact"


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("speedup", "x", True, "timing"),
    Metric("latency", "s", False, "timing"),
    Metric("compile_time", "s", False, "scalar"),
    Metric("peak_memory", "B", False, "scalar"),
    Metric("compile_host_memory", "B", False, "scalar"),  # worker's peak RSS while compiling
    Metric("graph_breaks", "", False, "count"),
    Metric("recompiles", "", False, "count"),
    Metric("accuracy", "", True, "exact"),
)}


def as_mapping(value: Any) -> Mapping[str, Any]:
    """A record field that should be a mapping; anything else (a damaged or foreign run
    file) reads as empty, so compare judges what it can instead of crashing."""
    return value if isinstance(value, Mapping) else {}


def clean_samples(block: Any) -> np.ndarray:
    """Finite, positive per-call samples of a variant block, without the descheduled ones
    (empty when there are none)."""
    values, keep = samples_and_mask(block)
    return values[keep]


def _as_float(value: float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond a float's range: not a sample
        return math.nan


def samples_and_mask(block: Any) -> tuple[np.ndarray, np.ndarray]:
    """(samples as recorded, mask of the ones to use). A sample is used when it is finite and
    positive and, where the worker recorded CPU seconds per sample, the process ran for at
    least RAN_SHARE of it: on a loaded machine a sample that spans a neighbour's time slice
    lasts 20x the call and measures the run queue, not the code. When more than
    1 - MIN_RAN_FRACTION of a variant's samples were descheduled, all valid samples are kept
    (too few left to judge from) and the spread speaks for itself."""
    raw = as_mapping(block).get("samples_s")
    if not isinstance(raw, (list, tuple)):
        return np.empty(0), np.zeros(0, dtype=bool)
    try:
        a = np.asarray(raw, dtype=float)  # the common case, at C speed
    except (TypeError, ValueError, OverflowError):  # a damaged field reads as its usable samples only
        a = np.asarray([_as_float(v) for v in raw if isinstance(v, (int, float)) and not isinstance(v, bool)],
                       dtype=float)
        return a, np.isfinite(a) & (a > 0)
    if a.ndim != 1:
        return np.empty(0), np.zeros(0, dtype=bool)
    valid = np.isfinite(a) & (a > 0)
    ran = _ran(as_mapping(block).get("cpu_samples_s"), a)
    if ran is not None:
        keep = valid & ran
        if keep.sum() >= max(2, MIN_RAN_FRACTION * valid.sum()):
            return a, keep
    return a, valid


def _ran(cpu_raw: Any, wall: np.ndarray) -> np.ndarray | None:
    """Per sample: did the process run for at least RAN_SHARE of it (None: not recorded)."""
    if not isinstance(cpu_raw, (list, tuple)) or len(cpu_raw) != wall.size:
        return None
    try:
        cpu = np.asarray(cpu_raw, dtype=float)
    except (TypeError, ValueError):
        return None
    with np.errstate(invalid="ignore"):
        return np.isfinite(cpu) & (cpu >= RAN_SHARE * wall)


def timing_samples(record: Record, metric: str) -> np.ndarray | None:
    """Per-round samples behind a timing metric (latency: the measured variant's; speedup: paired ratios)."""
    if metric == "latency":
        eager, compiled = clean_samples(record.eager), clean_samples(record.compiled)
        samples = compiled if compiled.size else eager
        return samples if samples.size else None
    # speedup: paired per-round ratios (the worker interleaves eager and compiled rounds);
    # a round is dropped when either half of it was descheduled
    (ea, ek), (ca, ck) = samples_and_mask(record.eager), samples_and_mask(record.compiled)
    n = min(ea.size, ca.size)
    if not n:
        return None
    keep = ek[:n] & ck[:n]
    return (ea[:n][keep] / ca[:n][keep]) if keep.any() else None


def scalar_value(record: Record, metric: str) -> float | None:
    """A scalar metric of a record as a finite float, or None (absent, damaged, not a number)."""
    m = as_mapping(record.metrics)
    if metric == "compile_time":
        value = m.get("compile_time_s")
    elif metric == "peak_memory":
        value = as_mapping(record.compiled or record.eager).get("peak_memory_bytes")
    elif metric == "compile_host_memory":
        value = m.get("compile_peak_rss_bytes")
    else:
        value = m.get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def accuracy_status(record: Record) -> str | None:
    status = as_mapping(as_mapping(record.metrics).get("accuracy")).get("status")
    return status if isinstance(status, str) else None


def is_worse(change: float, metric: Metric) -> bool:
    return change < 0 if metric.higher_is_better else change > 0


def judges_compile_cpu_seconds(records: Sequence[Record]) -> bool:
    """Whether compile time is judged on the compile's CPU seconds for these records: CPU
    cases where every process recorded them (else wall seconds; see _compile_time_result).
    `compilebench noise` measures the same quantity the gate judges."""
    return bool(records) and all(r.case.device.split(":")[0] == "cpu" and compile_cpu_seconds(r) is not None
                                 for r in records)


def compile_time_value(record: Record, cpu_seconds: bool) -> float | None:
    return compile_cpu_seconds(record) if cpu_seconds else scalar_value(record, "compile_time")


def compile_cpu_seconds(record: Record) -> float | None:
    value = as_mapping(record.metrics).get("compile_cpu_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)
