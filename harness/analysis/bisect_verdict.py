"""Judging one bisect probe: is the candidate env bad compared with the good reference?

The bisect search (harness.experiments.bisect) only knows good / bad / noisy; this module
turns records into that verdict with compare's own test (significance on the raw samples
and a change beyond the metric's threshold), and attaches the evidence a bug report needs:
each side's value with its 95% CI, the change, the CI of the ratio and the p-value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.analysis.compare import (
    METRICS,
    compare_case,
)
from harness.analysis.thresholds import ThresholdConfig, Thresholds
from harness.analysis.verdicts import Verdict
from harness.model.errors import UserError
from harness.model.schema import Record

BISECT_METRICS = ("latency", "speedup", "compile_time", "graph_breaks", "peak_memory", "status")
# compare's verdicts -> the search's: across torch builds, eager moving with compiled code
# ("slower (eager too)") is torch's change too, so it counts; machine drift measures again
# (and a speedup that moved because torch's eager path did: the release's change as well)
WANTED = {"worse": (Verdict.REGRESSION, Verdict.SLOWER_EAGER_TOO, Verdict.SLOWER_EAGER_TOO_NO_PROBE, Verdict.EAGER_FASTER),
          "better": (Verdict.IMPROVEMENT, Verdict.FASTER_EAGER_TOO, Verdict.EAGER_SLOWER)}
UNDECIDED = (Verdict.NOISY, Verdict.MACHINE_DRIFT)


class MetricNotMeasuredError(UserError, ValueError):
    """The bisected metric is absent from the case's records: a bisect on it cannot decide
    anything (the CLI exits 2 with the message, which names metrics the case does record)."""


def thresholds_for(record: Record, metric: str, threshold: float | None, config: ThresholdConfig | None = None) -> Thresholds:
    """The case's thresholds with --threshold, when given, replacing the bisected metric's."""
    base = (config or ThresholdConfig()).for_case(record.case_id, record.case.workload, record.case.suite)
    if threshold is None or metric == "status":
        return base
    return Thresholds({**base.values, metric: threshold}, base.alpha)


def judge(reference: Sequence[Record], candidate: Sequence[Record], metric: str, direction: str = "worse",
          threshold: float | None = None, config: ThresholdConfig | None = None) -> dict[str, Any]:
    """{"verdict": good|bad|noisy, "beyond_threshold", evidence...} for the bisect search.
    direction 'worse' hunts a regression of the metric; 'better' hunts where it improved."""
    ref, cand = list(reference), list(candidate)
    case_id = ref[0].case_id
    thresholds = thresholds_for(ref[0], metric, threshold, config)
    evidence = {"metric": metric, "reference": side_evidence(ref, metric), "candidate": side_evidence(cand, metric)}
    if metric == "status" or any(r.status != "ok" for r in cand):
        return {**evidence, **_status_verdict(ref, cand, metric, direction)}
    # bisected envs are (usually) different torch builds: a torch-bound probe must not normalise them
    result = compare_case(case_id, ref, cand, thresholds, metrics=[metric], torch_differs=True)
    m = result.metric(metric)
    if m is None:
        # judging 'good' here would walk the search to a false "no bad env" (e.g. -c eager
        # --metric compile_time: eager records no compile time): nothing can be judged at all
        raise MetricNotMeasuredError(_not_measured(case_id, metric, ref, cand))
    # a torch change that slows eager too is what a version bisect hunts: bad as well
    # (with or without a probe vouching for the machine: the search re-measures the midpoints)
    wanted = WANTED[direction]
    # undecided -> measure again: too noisy, or timed on a contended machine (its timings
    # measure the run queue: neither good nor bad)
    again = (Verdict.NOISY, Verdict.MACHINE_CONTENDED)
    verdict = "bad" if m.verdict in wanted else ("noisy" if m.verdict in again else "good")
    beyond = m.change is not None and m.threshold is not None and abs(m.change) >= float(m.threshold) and (
        (m.change > 0) == _worse_is_up(metric, direction))
    return {**evidence, "verdict": verdict, "beyond_threshold": bool(beyond), "compare_verdict": m.verdict,
            "change": m.change, "ratio_ci": list(m.ci) if m.ci else None, "p_value": m.p_value,
            "threshold": m.threshold, "note": m.note}


def _not_measured(case_id: str, metric: str, ref: list[Record], cand: list[Record]) -> str:
    side = "the reference env" if _values(ref, metric).size == 0 else "the candidate env"
    recorded = [m for m in BISECT_METRICS if m == "status" or (_values(ref, m).size and _values(cand, m).size)]
    return (f"metric {metric} was not measured for case {case_id} (nothing recorded in {side}); pick a metric "
            f"the case records, e.g. --metric {' / '.join(recorded)}")


def _worse_is_up(metric: str, direction: str) -> bool:
    up_is_bad = not METRICS[metric].higher_is_better
    return up_is_bad if direction == "worse" else not up_is_bad


def _status_verdict(ref: list[Record], cand: list[Record], metric: str, direction: str) -> dict[str, Any]:
    """A candidate that fails the case is bad for every metric (nothing left to measure);
    for --metric status with --direction better, the first env where it passes is 'bad'."""
    failed = next((r for r in cand if r.status != "ok"), None)
    ref_failed = any(r.status != "ok" for r in ref)
    transition = Verdict.NOW_FAILING if failed and not ref_failed else (Verdict.NOW_PASSING if ref_failed and not failed else None)
    wanted = Verdict.NOW_FAILING if direction == "worse" else Verdict.NOW_PASSING
    err = (failed.error or {}) if failed else {}
    note = f"{failed.status}: {err.get('type', '')}: {str(err.get('message', ''))[:200]}" if failed else "status ok"
    bad = transition == wanted
    return {"verdict": "bad" if bad else "good", "beyond_threshold": bad, "compare_verdict": transition or "unchanged",
            "note": note}


def side_evidence(records: Sequence[Record], metric: str) -> dict[str, Any]:
    """One env's measurement of the metric: value (median), 95% CI, how many samples/processes."""
    statuses = sorted({r.status for r in records})
    out: dict[str, Any] = {"processes": len(records), "status": ",".join(statuses)}
    if metric == "status":
        return out
    values = _values(records, metric)
    if values.size == 0:
        return {**out, "value": None, "ci": None, "n": 0}
    out.update(value=float(np.median(values)), n=int(values.size), ci=_median_ci(values))
    return out


def _values(records: Sequence[Record], metric: str) -> np.ndarray:
    ok = [r for r in records if r.status == "ok"]
    if metric in ("latency", "speedup"):
        groups = []
        for r in ok:
            eager = np.asarray((r.eager or {}).get("samples_s") or [], dtype=float)
            compiled = np.asarray((r.compiled or {}).get("samples_s") or [], dtype=float)
            if metric == "latency":
                groups.append(compiled if compiled.size else eager)
            elif eager.size and compiled.size:
                k = min(eager.size, compiled.size)
                groups.append(eager[:k] / compiled[:k])
        return np.concatenate(groups) if groups else np.empty(0)
    key = {"compile_time": "compile_time_s", "graph_breaks": "graph_breaks"}.get(metric)
    if key:
        vals = [(r.metrics or {}).get(key) for r in ok]
    else:  # peak_memory
        vals = [((r.compiled or r.eager) or {}).get("peak_memory_bytes") for r in ok]
    return np.asarray([float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)])


def _median_ci(values: np.ndarray, confidence: float = 0.95, n_boot: int = 1000) -> list[float] | None:
    """Percentile-bootstrap CI of the median; None for a single value (one process of a
    per-process metric such as compile time: say so rather than invent a spread)."""
    if values.size < 2:
        return None
    rng = np.random.default_rng(0)
    meds = np.median(values[rng.integers(0, values.size, size=(n_boot, values.size))], axis=1)
    low, high = np.quantile(meds, [(1 - confidence) / 2, (1 + confidence) / 2])
    return [float(low), float(high)]
