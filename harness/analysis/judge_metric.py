"""One metric of one case, base records against head records: its MetricResult.

Timing metrics (and scalars with 4+ processes a side) need a change beyond the threshold, a
significant two-sided Mann-Whitney U test and a bootstrap CI of head/base that excludes 1.
The tests are deferred (`PendingTest`) and run in batches by `resolve_pending`: scipy's U
test costs about the same for one pair of arrays as for a thousand. Counts are judged
exactly against the allowed increase, accuracy pass -> fail, one value per process by the
threshold alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.analysis.comparison import MetricResult
from harness.analysis.metrics import (
    Metric,
    accuracy_status,
    compile_cpu_seconds,
    is_worse,
    judges_compile_cpu_seconds,
    scalar_value,
    timing_samples,
)
from harness.analysis.probe_norm import MachineProbe, normalised_groups, torch_bound_note
from harness.analysis.significance import (
    MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST,
    bootstrap_ratio_cis,
    median_change,
    median_rel_se,
    quantiles,
    test_units,
)
from harness.analysis.thresholds import COUNT_METRICS, Thresholds
from harness.analysis.verdicts import Verdict
from harness.model.schema import Record

__all__ = ["Judged", "PendingTest", "judge_metric", "timing_result", "resolve_pending"]


Judged = tuple[MetricResult | None, "PendingTest | None"]


@dataclass
class PendingTest:
    """A change beyond its threshold, waiting for its significance tests (run in batches:
    scipy's U test costs about the same for one pair of arrays as for a thousand)."""

    result: MetricResult
    metric: Metric
    base: np.ndarray
    head: np.ndarray
    alpha: float


def judge_metric(metric: Metric, base: list[Record], head: list[Record], thresholds: Thresholds,
                   probe: MachineProbe | None = None) -> Judged:
    if metric.name == "latency":
        return _latency_result(metric, base, head, thresholds, probe)
    if metric.kind == "timing":
        bg = [s for s in (timing_samples(r, metric.name) for r in base) if s is not None and s.size]
        hg = [s for s in (timing_samples(r, metric.name) for r in head) if s is not None and s.size]
        return timing_result(metric, bg, hg, thresholds) if bg and hg else (None, None)
    if metric.kind == "exact":
        return _accuracy_result(base, head), None
    if metric.name == "compile_time":
        return _compile_time_result(metric, base, head, thresholds)
    bv = [v for v in (scalar_value(r, metric.name) for r in base) if v is not None]
    hv = [v for v in (scalar_value(r, metric.name) for r in head) if v is not None]
    if not bv or not hv:
        return None, None
    if metric.name in COUNT_METRICS:
        return _count_result(metric, bv, hv, thresholds), None
    return _scalar_result(metric, bv, hv, thresholds)


def timing_result(metric: Metric, base_groups: list[np.ndarray], head_groups: list[np.ndarray],
                   thresholds: Thresholds) -> tuple[MetricResult, PendingTest | None]:
    threshold = thresholds.get(metric.name)
    per_process = min(len(base_groups), len(head_groups)) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
    base, unit_kind = test_units(base_groups, per_process)
    head, _ = test_units(head_groups, per_process)
    sb, sh = np.sort(base), np.sort(head)
    bmed, hmed = quantiles(sb, (0.5,))[0], quantiles(sh, (0.5,))[0]
    result = MetricResult(metric.name, Verdict.UNCHANGED, bmed, hmed, threshold=threshold, n_base=base.size,
                          n_head=head.size, note=unit_kind)
    if bmed <= 0 or base.size < 2 or head.size < 2:
        result.verdict, result.note = Verdict.NOT_APPLICABLE, "too few samples to test"
        return result, None
    result.change = hmed / bmed - 1.0
    result.mdc = 2.8 * math.sqrt(median_rel_se(sb) ** 2 + median_rel_se(sh) ** 2)
    if threshold is not None and abs(result.change) >= threshold:
        return result, PendingTest(result, metric, base, head, thresholds.alpha)
    if threshold is not None and result.mdc > threshold:
        result.verdict = Verdict.NOISY
        result.note = f"{unit_kind}; spread too high to judge: detects {result.mdc:.1%}, threshold {threshold:.1%}"
    return result, None


def resolve_pending(pending: Sequence[PendingTest]) -> None:
    """Run the U tests and, where significant, the bootstrap CIs, batched by sample sizes
    (numpy and scipy cost about the same for one pair of arrays as for a thousand); set
    each pending result's verdict."""
    from scipy.stats import mannwhitneyu

    groups: dict[tuple[int, int], list[PendingTest]] = {}
    for p in pending:
        groups.setdefault((p.base.size, p.head.size), []).append(p)
    for items in groups.values():
        pvalues = np.atleast_1d(mannwhitneyu(np.stack([p.head for p in items]), np.stack([p.base for p in items]),
                                             alternative="two-sided", axis=1).pvalue)
        significant = []
        for p, pvalue in zip(items, pvalues, strict=True):
            p.result.p_value = float(pvalue)
            if pvalue < p.alpha:
                significant.append(p)
            else:  # beyond the threshold but not confirmed: undecided, whatever the mdc said
                r = p.result
                r.verdict = Verdict.NOISY
                r.note = f"{r.note}; change not significant (U test p={pvalue:.2g})"
        for alpha in sorted({p.alpha for p in significant}):
            batch = [p for p in significant if p.alpha == alpha]
            cis = bootstrap_ratio_cis([p.head for p in batch], [p.base for p in batch], confidence=1 - alpha)
            for p, ci in zip(batch, cis, strict=True):
                _decide(p, ci)


def _decide(p: PendingTest, ci: tuple[float, float]) -> None:
    r = p.result
    low, high = ci
    r.ci = (low, high)
    if low > 1.0 or high < 1.0:
        r.verdict = Verdict.REGRESSION if is_worse(r.change or 0.0, p.metric) else Verdict.IMPROVEMENT
    else:
        r.verdict, r.note = Verdict.NOISY, f"{r.note}; U test significant but the CI includes no change"


def _scalar_result(metric: Metric, base_vals: list[float], head_vals: list[float],
                   thresholds: Thresholds) -> tuple[MetricResult, PendingTest | None]:
    """One value per process (compile time, peak memory): tested like timings once both
    sides have enough processes, else judged by the threshold alone (and said so)."""
    threshold = thresholds.get(metric.name)
    if len(base_vals) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST and len(head_vals) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST:
        return timing_result(metric, [np.asarray([v]) for v in base_vals], [np.asarray([v]) for v in head_vals],
                              thresholds)
    b, h = quantiles(np.sort(base_vals), (0.5,))[0], quantiles(np.sort(head_vals), (0.5,))[0]
    result = MetricResult(metric.name, Verdict.UNCHANGED, b, h, threshold=threshold, n_base=len(base_vals),
                          n_head=len(head_vals), note="one value per process: threshold only")
    if b <= 0:
        result.verdict = Verdict.NOT_APPLICABLE if h <= 0 else Verdict.UNCHANGED
        return result, None
    result.change = h / b - 1.0
    if threshold is not None and abs(result.change) >= threshold:
        result.verdict = Verdict.REGRESSION if is_worse(result.change, metric) else Verdict.IMPROVEMENT
    return result, None


def _count_result(metric: Metric, base_vals: list[float], head_vals: list[float], thresholds: Thresholds) -> MetricResult:
    allowed = thresholds.get(metric.name)
    b, h = max(base_vals), max(head_vals)  # deterministic; max so one bad round shows
    result = MetricResult(metric.name, Verdict.UNCHANGED, b, h, change=h - b, threshold=allowed,
                          n_base=len(base_vals), n_head=len(head_vals))
    if h - b > (allowed if allowed is not None else 0):
        result.verdict = Verdict.REGRESSION
    elif h < b:
        result.verdict = Verdict.IMPROVEMENT
    return result


def _accuracy_result(base: list[Record], head: list[Record]) -> MetricResult | None:
    b = {accuracy_status(r) for r in base} - {None}
    h = {accuracy_status(r) for r in head} - {None}
    if not b or not h:
        return None
    bs, hs = ("fail" if "fail" in b else "pass"), ("fail" if "fail" in h else "pass")
    verdict = Verdict.UNCHANGED
    if bs == "pass" and hs == "fail":
        verdict = Verdict.REGRESSION
    elif bs == "fail" and hs == "pass":
        verdict = Verdict.IMPROVEMENT
    return MetricResult("accuracy", verdict, bs, hs, n_base=len(base), n_head=len(head), note="pass -> fail regresses")


def _latency_result(metric: Metric, base: list[Record], head: list[Record], thresholds: Thresholds,
                    probe: MachineProbe | None) -> Judged:
    """Latency on probe-normalised samples when the machine moved; the raw change is kept."""
    if probe is None or not probe.normalise:
        bg, hg = normalised_groups(base, metric.name, None), normalised_groups(head, metric.name, None)
        if not bg or not hg:
            return None, None
        result, pending = timing_result(metric, bg, hg, thresholds)
        if probe is not None and probe.torch_bound:
            result.note = f"{result.note}; {torch_bound_note(probe)}"
        return _note_left_out(result, base, bg, head, hg), pending
    # each process's own factor (groups keep the records' order; one without samples is left out
    # on both paths alike: until 2026-12-03 it dropped latency here, unflagged)
    bg, hg = normalised_groups(base, metric.name, probe.factors("base")), normalised_groups(head, metric.name, probe.factors("head"))
    if not bg or not hg:
        return None, None
    result, pending = timing_result(metric, bg, hg, thresholds)
    result.raw_change = median_change(normalised_groups(base, metric.name, None), normalised_groups(head, metric.name, None))
    result.note = f"{result.note}; normalised by the machine probe ({probe.change:+.1%})"
    return _note_left_out(result, base, bg, head, hg), pending


def _note_left_out(result: MetricResult, base: list[Record], bg: list, head: list[Record], hg: list) -> MetricResult:
    """Say which side judged fewer processes than it has: those without timing samples."""
    gaps = [f"{len(records) - len(groups)} of {len(records)} {side} processes" for side, records, groups
            in (("base", base, bg), ("head", head, hg)) if len(groups) < len(records)]
    if gaps:
        result.note = f"{result.note}; {' and '.join(gaps)} had no samples: judged without them"
    return result


def _compile_time_result(metric: Metric, base: list[Record], head: list[Record], thresholds: Thresholds) -> Judged:
    """Cold compile time, on the compile's CPU seconds when the case ran on the CPU and every
    process recorded them: on a shared machine wall time also counts the waits for a core
    (docs/GATING.md, "Cold compile time", has the A/A spreads of both), CPU seconds count the
    compile's work. On other devices, wall seconds: `compile_cpu_s` counts only waited-for
    children, and the Triton compiles of a GPU case run in Inductor's long-lived compile-worker
    pool, which is never waited for, so it would gate on a partial, varying share of the work."""
    on_cpu = all(r.case.device.split(":")[0] == "cpu" for r in (*base, *head))
    if judges_compile_cpu_seconds([*base, *head]):
        cpu_b = [compile_cpu_seconds(r) for r in base]
        cpu_h = [compile_cpu_seconds(r) for r in head]
        result, pending = _scalar_result(metric, cpu_b, cpu_h, thresholds)  # type: ignore[arg-type]
        result.note = f"CPU seconds of the compile; {result.note}"
        return result, pending
    bv = [v for v in (scalar_value(r, metric.name) for r in base) if v is not None]
    hv = [v for v in (scalar_value(r, metric.name) for r in head) if v is not None]
    if not bv or not hv:
        return None, None
    result, pending = _scalar_result(metric, bv, hv, thresholds)
    why = "" if on_cpu else (" (not CPU seconds on a non-CPU device: they miss the compiles in "
                             "Inductor's compile-worker pool)")
    result.note = f"wall seconds{why}; {result.note}"
    return result, pending
