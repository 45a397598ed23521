"""Compare two sets of runs case by case and decide, per metric, whether head regressed.

A verdict needs two things (a gate that cries wolf gets switched off, one that misses 5%
lets it ship):
  * significance from the raw samples: a two-sided Mann-Whitney U test (scipy) AND a
    bootstrap confidence interval on the ratio of medians (head / base) that excludes 1;
  * an effect beyond the metric's threshold (harness/analysis/thresholds.py).

What a "sample" is depends on how many processes measured the case. One process per side
(a plain `run`): the raw per-call samples, which capture in-process noise only; the
threshold absorbs the process-to-process part, and `compilebench noise` measures it. Four
or more processes per side (`compilebench ab`, 8 rounds by default, or folders of repeated runs): one
median per process, so the test sees the process-to-process noise itself.

Speedup is judged on paired per-round ratios eager_i / compiled_i: the worker interleaves
eager and compiled round by round, so machine drift (a noisy neighbour, clock changes) hits
both halves of a pair alike and cancels in the ratio.

Latency has two controls. The machine-speed probe (harness/measure/probe.py: fixed kernels
timed in every worker between the case's rounds) says how fast the machine was in each
process: when it moved, each process's samples are divided by its probe score, so the
machine's drift is normalised out and the verdict says so (`machine drift` when nothing is
left). Eager, in the same processes, says whether the change is the compiled code's alone:
probe steady (or normalised) and eager moved with latency -> `slower (eager too)`, a real
change in torch or the model, which fails the gate unless `whole_model = "warn"`. With no
usable probe (none recorded, too few samples, or a torch-bound probe across two torch
builds, which would divide the torch change under test out) the same is `slower (eager
too; no probe)`: machine and torch look alike there, so it warns instead of failing.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from harness.analysis.thresholds import (
    COUNT_METRICS,
    DEFAULT_PROBE_MOVED,
    WHOLE_MODEL_WARN,
    ThresholdConfig,
    Thresholds,
)
from harness.analysis.verdicts import DEFAULT_FAIL_ON, VERDICT_ORDER, Verdict, worst
from harness.measure.probe import MIN_SAMPLES as MIN_PROBE_SAMPLES
from harness.measure.probe import probe_block, probe_uses_torch, relative_slowness
from harness.model.schema import Record, Run, RunFileError

# the verdict vocabulary lives in harness/analysis/verdicts.py; these names stay importable
# from here for the code and scripts that always took them from compare
REGRESSION, NOW_FAILING, MISSING, NOISY = Verdict.REGRESSION, Verdict.NOW_FAILING, Verdict.MISSING, Verdict.NOISY
IMPROVEMENT, NOW_PASSING, NEW, UNCHANGED = Verdict.IMPROVEMENT, Verdict.NOW_PASSING, Verdict.NEW, Verdict.UNCHANGED
STILL_FAILING, NOT_APPLICABLE = Verdict.STILL_FAILING, Verdict.NOT_APPLICABLE
SLOWER_EAGER_TOO, FASTER_EAGER_TOO = Verdict.SLOWER_EAGER_TOO, Verdict.FASTER_EAGER_TOO
MACHINE_DRIFT, SLOWER_EAGER_TOO_NO_PROBE = Verdict.MACHINE_DRIFT, Verdict.SLOWER_EAGER_TOO_NO_PROBE
EAGER_FASTER, EAGER_SLOWER = Verdict.EAGER_FASTER, Verdict.EAGER_SLOWER
# below 4 per side a two-sided U test on process medians cannot reach p < 0.05 (3 vs 3: p >= 0.1)
MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST = 4
BOOTSTRAP_RESAMPLES = 1000
SMALL_SAMPLE = 64  # below this, bootstrap by plain resampling
DRIFT_SHARE = 0.5  # eager moving by this share of a latency change: a whole-model change
RAN_SHARE = 0.5  # a sample whose process ran less than this share of it was descheduled
MIN_RAN_FRACTION = 0.25  # below this share of samples left, the descheduled filter stands down

# environment fields that make a comparison meaningless when they differ
HARDWARE_FIELDS = ("machine", "cpu_model", "device names")
# the torch build: a probe set that calls torch (probe_uses_torch) is trusted only when they agree
TORCH_FIELDS = ("torch_version", "torch_git", "torch_cuda", "torch_hip")
COMPILER_FIELDS = ("torch_version", "torch_git", "torch_cuda", "torch_hip", "packages.triton", "packages.pytorch-triton")


class EnvironmentMismatchError(RunFileError):
    """Base and head ran on different hardware or compiler versions (message names the field)."""


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


@dataclass
class MetricResult:
    metric: str
    verdict: Verdict
    base: float | str | None = None
    head: float | str | None = None
    change: float | None = None  # relative (head/base - 1) or, for counts, head - base
    p_value: float | None = None
    ci: tuple[float, float] | None = None  # CI of head/base
    threshold: float | int | None = None
    n_base: int = 0
    n_head: int = 0
    mdc: float | None = None  # smallest relative change this comparison can detect
    note: str = ""
    raw_change: float | None = None  # before normalising by the machine probe (None: not normalised)


@dataclass
class CaseResult:
    case_id: str
    workload: str
    suite: str
    verdict: Verdict
    status_base: str | None
    status_head: str | None
    metrics: list[MetricResult] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    error: str = ""
    # eager median change in the same processes, probe-normalised like latency (None: no eager control)
    eager_change: float | None = None
    # machine-speed probe change head vs base (+: head's machine slower; None: no probe on both sides)
    probe_change: float | None = None
    warn_only: bool = False  # a whole-model change under whole_model = "warn": shown, never failing
    # why the probe cannot tell machine drift from a real change here ('' when it can)
    probe_caveat: str = ""

    def metric(self, name: str) -> MetricResult | None:
        return next((m for m in self.metrics if m.metric == name), None)


@dataclass
class Comparison:
    base: dict[str, Any]
    head: dict[str, Any]
    cases: list[CaseResult]
    mismatches: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    thresholds_source: str = "<defaults>"

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(VERDICT_ORDER, 0)
        for c in self.cases:
            out[c.verdict] += 1
        return {k: v for k, v in out.items() if v}

    def failing(self, fail_on: Iterable[str] = DEFAULT_FAIL_ON) -> list[CaseResult]:
        wanted = set(fail_on)
        return [c for c in self.cases if c.verdict in wanted and not c.warn_only]

    def geomeans(self) -> dict[str, Any]:
        """Geometric mean of head/base per timing metric, only over cases present and ok on
        both sides (a case failing or missing on one side says nothing about the others'
        speed, and must not move the summary), with the excluded cases and why."""
        included, excluded = [], []
        for c in self.cases:
            reason = _exclusion_reason(c)
            (excluded if reason else included).append((c, reason))
        out: dict[str, Any] = {"cases": len(included), "excluded": [{"case_id": c.case_id, "reason": r}
                                                                    for c, r in excluded]}
        for name in ("latency", "speedup"):
            ratios = [m.head / m.base for c, _ in included if (m := c.metric(name)) is not None
                      and isinstance(m.base, float) and isinstance(m.head, float) and m.base > 0 and m.head > 0]
            out[name] = {"ratio": float(np.exp(np.mean(np.log(ratios)))) if ratios else None, "cases": len(ratios)}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base, "head": self.head, "counts": self.counts(), "mismatches": self.mismatches,
                "warnings": self.warnings, "thresholds": self.thresholds_source, "geomeans": _jsonable(self.geomeans()),
                "cases": [_jsonable(asdict(c)) for c in self.cases]}


def _exclusion_reason(case: CaseResult) -> str:
    """Why a case stays out of the geomeans ('' when it counts)."""
    if case.status_base is None:
        return "new: not in base"
    if case.status_head is None:
        return "missing: not in head"
    if case.status_base != "ok" or case.status_head != "ok":
        return f"status {case.status_base} -> {case.status_head}"
    return ""


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


# ---------------------------------------------------------------- sample extraction

def _dict(value: Any) -> Mapping[str, Any]:
    """A record field that should be a mapping; anything else (a damaged or foreign run
    file) reads as empty, so compare judges what it can instead of crashing."""
    return value if isinstance(value, Mapping) else {}


def _samples(block: Any) -> np.ndarray:
    """Finite, positive per-call samples of a variant block, without the descheduled ones
    (empty when there are none)."""
    values, keep = _clean(block)
    return values[keep]


def _clean(block: Any) -> tuple[np.ndarray, np.ndarray]:
    """(samples as recorded, mask of the ones to use). A sample is used when it is finite and
    positive and, where the worker recorded CPU seconds per sample, the process ran for at
    least RAN_SHARE of it: on a loaded machine a sample that spans a neighbour's time slice
    lasts 20x the call and measures the run queue, not the code. When more than
    1 - MIN_RAN_FRACTION of a variant's samples were descheduled, all valid samples are kept
    (too few left to judge from) and the spread speaks for itself."""
    raw = _dict(block).get("samples_s")
    if not isinstance(raw, (list, tuple)):
        return np.empty(0), np.zeros(0, dtype=bool)
    try:
        a = np.asarray(raw, dtype=float)  # the common case, at C speed
    except (TypeError, ValueError):
        a = np.asarray([float(v) for v in raw if isinstance(v, (int, float))], dtype=float)
        return a, np.isfinite(a) & (a > 0)
    if a.ndim != 1:
        return np.empty(0), np.zeros(0, dtype=bool)
    valid = np.isfinite(a) & (a > 0)
    ran = _ran(_dict(block).get("cpu_samples_s"), a)
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
        eager, compiled = _samples(record.eager), _samples(record.compiled)
        samples = compiled if compiled.size else eager
        return samples if samples.size else None
    # speedup: paired per-round ratios (the worker interleaves eager and compiled rounds);
    # a round is dropped when either half of it was descheduled
    (ea, ek), (ca, ck) = _clean(record.eager), _clean(record.compiled)
    n = min(ea.size, ca.size)
    if not n:
        return None
    keep = ek[:n] & ck[:n]
    return (ea[:n][keep] / ca[:n][keep]) if keep.any() else None


def scalar_value(record: Record, metric: str) -> float | None:
    """A scalar metric of a record as a finite float, or None (absent, damaged, not a number)."""
    m = _dict(record.metrics)
    if metric == "compile_time":
        value = m.get("compile_time_s")
    elif metric == "peak_memory":
        value = _dict(record.compiled or record.eager).get("peak_memory_bytes")
    elif metric == "compile_host_memory":
        value = m.get("compile_peak_rss_bytes")
    else:
        value = m.get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _accuracy(record: Record) -> str | None:
    status = _dict(_dict(record.metrics).get("accuracy")).get("status")
    return status if isinstance(status, str) else None


# ---------------------------------------------------------------- statistics

def _quantiles(sorted_units: np.ndarray, qs: Sequence[float]) -> list[float]:
    """numpy's default (linear) quantiles of an already sorted array, without numpy's
    per-call overhead: compare computes thousands of them."""
    n = sorted_units.size
    out = []
    for q in qs:
        pos = q * (n - 1)
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        out.append(float(sorted_units[lo] + (sorted_units[hi] - sorted_units[lo]) * (pos - lo)))
    return out


def _median_rel_se(sorted_units: np.ndarray) -> float:
    """Relative standard error of the median, from the IQR (robust to the timing tail)."""
    if sorted_units.size < 2:
        return math.inf
    q1, med, q3 = _quantiles(sorted_units, (0.25, 0.5, 0.75))
    if med <= 0:
        return math.inf
    return 1.2533 * ((q3 - q1) / 1.349) / math.sqrt(sorted_units.size) / med


def minimum_detectable_change(base: np.ndarray, head: np.ndarray) -> float:
    """Smallest relative change a two-sided 5% test detects with 80% power, given the spread
    of both sides (2.8 standard errors of the ratio of medians)."""
    return 2.8 * math.sqrt(_median_rel_se(np.sort(base)) ** 2 + _median_rel_se(np.sort(head)) ** 2)


@functools.lru_cache(maxsize=512)
def _median_cdf(n: int) -> np.ndarray:
    """Exact bootstrap distribution of the median, as a CDF over the sorted samples:
    P(median of a resample <= j-th smallest sample). The resample size r is n, or n - 1 when
    n is even so the median is one order statistic; a resample's m-th smallest is <= x_(j)
    iff at least m of its r draws are, i.e. P(Binom(r, j/n) >= m)."""
    from scipy.stats import binom

    r = n if n % 2 else n - 1
    m = (r + 1) // 2
    cdf = binom.sf(m - 1, r, np.arange(1, n + 1) / n)
    return cdf / cdf[-1]


def bootstrap_ratio_of_medians(numerator: np.ndarray, denominator: np.ndarray, confidence: float = 0.95,
                               n_boot: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
    """(point, low, high) percentile-bootstrap CI of median(numerator) / median(denominator).

    Same answer as resampling both sets and taking medians (stats.ratio_of_medians_ci), but
    each side's resampled median is drawn from its exact distribution (`_median_cdf`), so a
    thousand resamples cost microseconds instead of milliseconds: the gate decides 1,000
    cases in well under the 2 s budget even when every case changed."""
    a, b = np.sort(numerator), np.sort(denominator)
    point = _quantiles(a, (0.5,))[0] / _quantiles(b, (0.5,))[0]
    rng = np.random.default_rng(seed)
    ratios = np.sort(_resampled_medians(a, n_boot, rng) / _resampled_medians(b, n_boot, rng))
    alpha = (1 - confidence) / 2
    low, high = _quantiles(ratios, (alpha, 1 - alpha))
    return float(point), low, high


def _resampled_medians(sorted_samples: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of n_boot bootstrap resamples. Small sets are resampled outright (cheap, and
    exact for even sizes, where the median averages two order statistics); large ones draw
    the median from its exact distribution."""
    n = sorted_samples.size
    if n <= SMALL_SAMPLE:
        return np.median(sorted_samples[rng.integers(0, n, size=(n_boot, n))], axis=1)
    idx = np.minimum(np.searchsorted(_median_cdf(n), rng.random(n_boot)), n - 1)
    return sorted_samples[idx]


def _units(groups: Sequence[np.ndarray], per_process: bool | None = None) -> tuple[np.ndarray, str]:
    """What the test runs on: one median per process when there are enough processes (on
    both sides: pass `per_process`; a test of 4 process medians against 100 raw samples
    would compare unlike things), else the pooled raw samples of the process(es)."""
    if per_process is None:
        per_process = len(groups) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
    if per_process:
        return np.asarray([float(np.median(g)) for g in groups]), "per-process medians"
    return (groups[0] if len(groups) == 1 else np.concatenate(groups)), "raw samples"


def _is_bad(change: float, metric: Metric) -> bool:
    return change < 0 if metric.higher_is_better else change > 0


@dataclass
class _Pending:
    """A change beyond its threshold, waiting for its significance tests (run in batches:
    scipy's U test costs about the same for one pair of arrays as for a thousand)."""

    result: MetricResult
    metric: Metric
    base: np.ndarray
    head: np.ndarray
    alpha: float


def _timing_result(metric: Metric, base_groups: list[np.ndarray], head_groups: list[np.ndarray],
                   thresholds: Thresholds) -> tuple[MetricResult, _Pending | None]:
    threshold = thresholds.get(metric.name)
    per_process = min(len(base_groups), len(head_groups)) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
    base, unit_kind = _units(base_groups, per_process)
    head, _ = _units(head_groups, per_process)
    sb, sh = np.sort(base), np.sort(head)
    bmed, hmed = _quantiles(sb, (0.5,))[0], _quantiles(sh, (0.5,))[0]
    result = MetricResult(metric.name, Verdict.UNCHANGED, bmed, hmed, threshold=threshold, n_base=base.size,
                          n_head=head.size, note=unit_kind)
    if bmed <= 0 or base.size < 2 or head.size < 2:
        result.verdict, result.note = Verdict.NOT_APPLICABLE, "too few samples to test"
        return result, None
    result.change = hmed / bmed - 1.0
    result.mdc = 2.8 * math.sqrt(_median_rel_se(sb) ** 2 + _median_rel_se(sh) ** 2)
    if threshold is not None and abs(result.change) >= threshold:
        return result, _Pending(result, metric, base, head, thresholds.alpha)
    if threshold is not None and result.mdc > threshold:
        result.verdict = Verdict.NOISY
        result.note = f"{unit_kind}; spread too high to judge: detects {result.mdc:.1%}, threshold {threshold:.1%}"
    return result, None


def _resolve(pending: Sequence[_Pending]) -> None:
    """Run the U tests and, where significant, the bootstrap CIs, batched by sample sizes
    (numpy and scipy cost about the same for one pair of arrays as for a thousand); set
    each pending result's verdict."""
    from scipy.stats import mannwhitneyu

    groups: dict[tuple[int, int], list[_Pending]] = {}
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


def bootstrap_ratio_cis(numerators: Sequence[np.ndarray], denominators: Sequence[np.ndarray],
                        confidence: float = 0.95, n_boot: int = BOOTSTRAP_RESAMPLES,
                        seed: int = 0) -> list[tuple[float, float]]:
    """`bootstrap_ratio_of_medians` for many pairs of equal sizes at once: (low, high) each."""
    nn, nd = numerators[0].size, denominators[0].size
    if min(nn, nd) <= SMALL_SAMPLE:
        return [bootstrap_ratio_of_medians(a, b, confidence, n_boot, seed)[1:] for a, b in zip(numerators,
                                                                                               denominators, strict=True)]
    rng = np.random.default_rng(seed)
    a, b = np.sort(np.stack(numerators), axis=1), np.sort(np.stack(denominators), axis=1)
    k = a.shape[0]
    ia = np.minimum(np.searchsorted(_median_cdf(nn), rng.random((k, n_boot))), nn - 1)
    ib = np.minimum(np.searchsorted(_median_cdf(nd), rng.random((k, n_boot))), nd - 1)
    ratios = np.take_along_axis(a, ia, axis=1) / np.take_along_axis(b, ib, axis=1)
    alpha = (1 - confidence) / 2
    lows, highs = np.quantile(ratios, [alpha, 1 - alpha], axis=1)
    return list(zip(lows.tolist(), highs.tolist(), strict=True))


def _decide(p: _Pending, ci: tuple[float, float]) -> None:
    r = p.result
    low, high = ci
    r.ci = (low, high)
    if low > 1.0 or high < 1.0:
        r.verdict = Verdict.REGRESSION if _is_bad(r.change or 0.0, p.metric) else Verdict.IMPROVEMENT
    else:
        r.verdict, r.note = Verdict.NOISY, f"{r.note}; U test significant but the CI includes no change"


def _scalar_result(metric: Metric, base_vals: list[float], head_vals: list[float],
                   thresholds: Thresholds) -> tuple[MetricResult, _Pending | None]:
    """One value per process (compile time, peak memory): tested like timings once both
    sides have enough processes, else judged by the threshold alone (and said so)."""
    threshold = thresholds.get(metric.name)
    if len(base_vals) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST and len(head_vals) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST:
        return _timing_result(metric, [np.asarray([v]) for v in base_vals], [np.asarray([v]) for v in head_vals],
                              thresholds)
    b, h = _quantiles(np.sort(base_vals), (0.5,))[0], _quantiles(np.sort(head_vals), (0.5,))[0]
    result = MetricResult(metric.name, Verdict.UNCHANGED, b, h, threshold=threshold, n_base=len(base_vals),
                          n_head=len(head_vals), note="one value per process: threshold only")
    if b <= 0:
        result.verdict = Verdict.NOT_APPLICABLE if h <= 0 else Verdict.UNCHANGED
        return result, None
    result.change = h / b - 1.0
    if threshold is not None and abs(result.change) >= threshold:
        result.verdict = Verdict.REGRESSION if _is_bad(result.change, metric) else Verdict.IMPROVEMENT
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
    b = {_accuracy(r) for r in base} - {None}
    h = {_accuracy(r) for r in head} - {None}
    if not b or not h:
        return None
    bs, hs = ("fail" if "fail" in b else "pass"), ("fail" if "fail" in h else "pass")
    verdict = Verdict.UNCHANGED
    if bs == "pass" and hs == "fail":
        verdict = Verdict.REGRESSION
    elif bs == "fail" and hs == "pass":
        verdict = Verdict.IMPROVEMENT
    return MetricResult("accuracy", verdict, bs, hs, n_base=len(base), n_head=len(head), note="pass -> fail regresses")


# ---------------------------------------------------------------- per case

def _status(records: list[Record]) -> str:
    """The case's status on one side: ok only when every process measured it ok."""
    return next((r.status for r in records if r.status != "ok"), "ok")


Judged = tuple[MetricResult | None, "_Pending | None"]


@dataclass(frozen=True)
class _MachineProbe:
    """Per-process machine slowness of one case (1: as fast as base's average machine),
    and whether compare divides the case's timings by it."""

    base: list[float]
    head: list[float]
    change: float  # geometric mean of head factors / that of base - 1 (+: head's machine slower)
    normalise: bool
    version: str = ""
    # the set calls torch and the sides' torch builds differ: it times the change under test
    # too, so it is never divided out (a slower torch would pass as machine drift)
    torch_bound: bool = False

    def factors(self, side: str) -> list[float]:
        return self.base if side == "base" else self.head


def probe_factors(records: Sequence[Record], n_base: int) -> tuple[list[float], str] | None:
    """Per process, how much slower its machine was than the first `n_base` processes'
    average (harness/measure/probe.py's relative_slowness), and the probe set's version;
    None unless every process carries a usable probe of one version."""
    blocks = [probe_block(_dict(r.metrics)) for r in records]
    if any(b is None for b in blocks) or len({b.get("version") for b in blocks if b is not None}) != 1:
        return None
    factors = relative_slowness(blocks, n_base)  # type: ignore[arg-type]
    return None if factors is None else (factors, str(blocks[0].get("version")))  # type: ignore[union-attr]


def _machine_probe(base: list[Record], head: list[Record], thresholds: Thresholds,
                   torch_differs: bool = False) -> _MachineProbe | None:
    """The case's probe, when every process on both sides carries one of the same version.
    One process per side: normalise only when the probe moved by the `probe` threshold (its
    own noise would otherwise leak into a steady comparison). Per-process tests normalise
    always: each process's own drift comes out, and the test still sees what is left.
    A probe set that calls torch (the GPU set) never normalises across differing torch
    builds (`torch_differs`): it would divide the torch change under test out."""
    moved_at = thresholds.get("probe")
    if moved_at is None and not thresholds.enabled("probe"):
        return None
    found = probe_factors([*base, *head], len(base))
    if found is None:
        return None
    factors, version = found
    bs, hs = factors[:len(base)], factors[len(base):]
    change = math.exp(float(np.mean(np.log(hs)) - np.mean(np.log(bs)))) - 1.0
    if torch_differs and probe_uses_torch(version):
        return _MachineProbe(bs, hs, change, False, version, torch_bound=True)
    per_process = min(len(base), len(head)) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
    return _MachineProbe(bs, hs, change, per_process or abs(change) >= float(moved_at or 0.0), version)


def _groups(records: list[Record], metric: str, factors: list[float] | None) -> list[np.ndarray]:
    """Per-process timing samples, divided by each process's probe factor when given."""
    out = []
    for i, r in enumerate(records):
        samples = timing_samples(r, metric)
        if samples is not None and samples.size:
            out.append(samples / factors[i] if factors else samples)
    return out


def _median_change(base: list[np.ndarray], head: list[np.ndarray]) -> float | None:
    """head/base - 1 of the values the test runs on (per-process medians or pooled samples)."""
    if not base or not head:
        return None
    per_process = min(len(base), len(head)) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
    b, _ = _units(base, per_process)
    h, _ = _units(head, per_process)
    bmed, hmed = float(np.median(b)), float(np.median(h))
    return hmed / bmed - 1.0 if bmed > 0 else None


def _latency_result(metric: Metric, base: list[Record], head: list[Record], thresholds: Thresholds,
                    probe: _MachineProbe | None) -> Judged:
    """Latency on probe-normalised samples when the machine moved; the raw change is kept."""
    if probe is None or not probe.normalise:
        bg, hg = _groups(base, metric.name, None), _groups(head, metric.name, None)
        if not bg or not hg:
            return None, None
        result, pending = _timing_result(metric, bg, hg, thresholds)
        if probe is not None and probe.torch_bound:
            result.note = f"{result.note}; {_torch_bound_note(probe)}"
        return result, pending
    bg, hg = _groups(base, metric.name, probe.factors("base")), _groups(head, metric.name, probe.factors("head"))
    if not bg or not hg or len(bg) != len(base) or len(hg) != len(head):
        return None, None
    result, pending = _timing_result(metric, bg, hg, thresholds)
    result.raw_change = _median_change(_groups(base, metric.name, None), _groups(head, metric.name, None))
    result.note = f"{result.note}; normalised by the machine probe ({probe.change:+.1%})"
    return result, pending


def _torch_bound_note(probe: _MachineProbe) -> str:
    return (f"not normalised: probe set {probe.version} runs on torch and base and head torch builds differ "
            f"(probe {probe.change:+.1%}: machine or torch)")


def _metric_result(metric: Metric, base: list[Record], head: list[Record], thresholds: Thresholds,
                   probe: _MachineProbe | None = None) -> Judged:
    if metric.name == "latency":
        return _latency_result(metric, base, head, thresholds, probe)
    if metric.kind == "timing":
        bg = [s for s in (timing_samples(r, metric.name) for r in base) if s is not None and s.size]
        hg = [s for s in (timing_samples(r, metric.name) for r in head) if s is not None and s.size]
        return _timing_result(metric, bg, hg, thresholds) if bg and hg else (None, None)
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


def _compile_time_result(metric: Metric, base: list[Record], head: list[Record], thresholds: Thresholds) -> Judged:
    """Cold compile time, on the compile's CPU seconds when the case ran on the CPU and every
    process recorded them: on a shared machine wall time also counts the waits for a core
    (docs/GATING.md, "Cold compile time", has the A/A spreads of both), CPU seconds count the
    compile's work. On other devices, wall seconds: `compile_cpu_s` counts only waited-for
    children, and the Triton compiles of a GPU case run in Inductor's long-lived compile-worker
    pool, which is never waited for, so it would gate on a partial, varying share of the work."""
    on_cpu = all(r.case.device.split(":")[0] == "cpu" for r in (*base, *head))
    if judges_compile_cpu_seconds([*base, *head]):
        cpu_b = [_cpu_compile(r) for r in base]
        cpu_h = [_cpu_compile(r) for r in head]
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


def judges_compile_cpu_seconds(records: Sequence[Record]) -> bool:
    """Whether compile time is judged on the compile's CPU seconds for these records: CPU
    cases where every process recorded them (else wall seconds; see _compile_time_result).
    `compilebench noise` measures the same quantity the gate judges."""
    return bool(records) and all(r.case.device.split(":")[0] == "cpu" and _cpu_compile(r) is not None
                                 for r in records)


def compile_time_value(record: Record, cpu_seconds: bool) -> float | None:
    return _cpu_compile(record) if cpu_seconds else scalar_value(record, "compile_time")


def _cpu_compile(record: Record) -> float | None:
    value = _dict(record.metrics).get("compile_cpu_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def _judge_case(case_id: str, base: list[Record], head: list[Record], thresholds: Thresholds,
                metrics: Sequence[str] | None, torch_differs: bool = False) -> tuple[CaseResult, list[_Pending]]:
    ref = (head or base)[0].case
    result = CaseResult(case_id, ref.workload, ref.suite, Verdict.UNCHANGED, None, None)
    if not base:
        result.verdict, result.status_head = Verdict.NEW, _status(head)
        return result, []
    if not head:
        result.verdict, result.status_base = Verdict.MISSING, _status(base)
        return result, []
    result.status_base, result.status_head = _status(base), _status(head)
    if result.status_base == "ok" and result.status_head != "ok" and thresholds.enabled("status"):
        result.verdict = Verdict.NOW_FAILING
        err = next((r.error for r in head if r.status != "ok" and r.error), None) or {}
        result.error = f"{err.get('type', '')}: {err.get('message', '')}"[:300]
        return result, []
    if result.status_base != "ok":
        result.verdict = Verdict.STILL_FAILING if result.status_head != "ok" else Verdict.NOW_PASSING
        return result, []
    if result.status_head != "ok":  # status gating switched off: nothing to measure
        return result, []
    probe = _machine_probe(base, head, thresholds, torch_differs)
    result.probe_change = probe.change if probe else None
    if probe is None:
        result.probe_caveat = ("no usable machine probe (none recorded, probe off, "
                              f"or under {MIN_PROBE_SAMPLES} samples per kernel)")
    elif probe.torch_bound:
        result.probe_caveat = _torch_bound_note(probe)
    pending = []
    for name in metrics or METRICS:
        if not thresholds.enabled(name):
            continue
        mr, p = _metric_result(METRICS[name], base, head, thresholds, probe)
        if mr is not None:
            result.metrics.append(mr)
        if p is not None:
            pending.append(p)
    result.eager_change = _eager_change(base, head, probe)
    return result, pending


def _eager_change(base: list[Record], head: list[Record], probe: _MachineProbe | None) -> float | None:
    """How much eager moved between base and head, measured like latency (same processes,
    same probe normalisation). In a compiled case eager is the control that tells a
    compiled-only change from a whole-model one; in an eager-only case (`-c eager`, no
    compiled block) eager is what latency measured, so any change there is eager's."""
    compiled = [bool(_samples(r.compiled).size) for r in base + head]
    if any(compiled) and not all(compiled):
        return None
    factors = (probe.factors("base"), probe.factors("head")) if probe and probe.normalise else (None, None)
    b = [s / factors[0][i] if factors[0] else s for i, s in enumerate(_samples(r.eager) for r in base)]
    h = [s / factors[1][i] if factors[1] else s for i, s in enumerate(_samples(r.eager) for r in head)]
    if any(x.size < 2 for x in b + h):
        return None
    return _median_change(b, h)


def _attribute_latency(result: CaseResult, probe_moved_at: float) -> None:
    """Name what moved. A latency change beyond the threshold that the probe, having moved
    by `probe_moved_at` or more, normalised away is `machine drift`. A latency verdict whose
    size eager matched (same direction, at least half as large) is a whole-model change:
    `slower (eager too)` / `faster (eager too)` when the probe says the machine held (or was
    normalised); `slower (eager too; no probe)` (warn only) when nothing says so."""
    latency, eager = result.metric("latency"), result.eager_change
    if latency is None or latency.change is None:
        return
    probe_steady = result.probe_change is not None and abs(result.probe_change) < probe_moved_at
    if _drift_explains(latency, result.probe_change, probe_steady):
        latency.verdict = Verdict.MACHINE_DRIFT
        said = (f"machine drift: probe {result.probe_change:+.1%}, latency {latency.raw_change:+.1%} before "
                f"normalising, {latency.change:+.1%} after")
        latency.note = f"{latency.note}; {said}"
        result.flags.append(f"latency: {said}")
        return
    if latency.verdict not in (Verdict.REGRESSION, Verdict.IMPROVEMENT) or eager is None:
        return
    if eager * latency.change > 0 and abs(eager) >= DRIFT_SHARE * abs(latency.change):
        # a torch-bound probe across torch builds still vouches for the machine when it held
        # still (neither the machine nor torch moved its kernels); when it moved, it cannot
        unknown = result.probe_change is None or (bool(result.probe_caveat) and not probe_steady)
        if unknown:
            latency.verdict = Verdict.SLOWER_EAGER_TOO_NO_PROBE if latency.verdict == Verdict.REGRESSION else Verdict.FASTER_EAGER_TOO
            seen = f"{result.probe_caveat}: machine drift or a real change in torch or the model"
        elif probe_steady:
            latency.verdict = Verdict.SLOWER_EAGER_TOO if latency.verdict == Verdict.REGRESSION else Verdict.FASTER_EAGER_TOO
            seen = f"machine probe steady ({result.probe_change:+.1%}): a real change in torch or the model"
        else:
            latency.verdict = Verdict.SLOWER_EAGER_TOO if latency.verdict == Verdict.REGRESSION else Verdict.FASTER_EAGER_TOO
            seen = f"after normalising machine drift (probe {result.probe_change:+.1%}): a real change in torch or the model"
        latency.note = f"{latency.note}; eager moved {eager:+.1%} too, {seen}"
        result.flags.append(f"latency {latency.change:+.1%}: eager moved {eager:+.1%} too, {seen}")


def _drift_explains(latency: MetricResult, probe_change: float | None, probe_steady: bool) -> bool:
    """Latency moved beyond its threshold before normalising, nothing beyond it is left after,
    and the probe moved the same way by its own threshold: the machine's change, not the code's.
    A change still beyond the threshold after normalising (undecided: noisy) is not drift."""
    if latency.raw_change is None or latency.threshold is None or probe_change is None or probe_steady:
        return False
    threshold = float(latency.threshold)
    return (latency.verdict in (Verdict.UNCHANGED, Verdict.NOISY) and abs(latency.raw_change) >= threshold
            and abs(latency.change or 0.0) < threshold and probe_change * latency.raw_change > 0)


def _attribute_speedup(result: CaseResult) -> None:
    """Speedup (eager / compiled, paired per round) changed significantly while the compiled
    code's latency held still: eager moved, so the compiler did not regress (a faster torch
    eager path lowers the speedup of an unchanged compiled model). `eager faster` / `eager
    slower`, which do not fail the gate by default; the note keeps every number."""
    speedup, latency, eager = result.metric("speedup"), result.metric("latency"), result.eager_change
    if speedup is None or speedup.verdict not in (Verdict.REGRESSION, Verdict.IMPROVEMENT) or speedup.change is None:
        return
    if latency is None or latency.verdict not in (Verdict.UNCHANGED, Verdict.MACHINE_DRIFT) or eager is None:
        return
    # speedup = eager / compiled: down with eager faster (both changes negative), up with eager
    # slower. Eager must carry the move: beyond the speedup threshold itself and over half of
    # it, with compiled latency under half (a compiled +5% with eager's own noise at -3% is
    # still the compiler's)
    move = abs(speedup.change)
    if eager * speedup.change <= 0 or abs(eager) < max(DRIFT_SHARE * move, float(speedup.threshold or 0.0)):
        return
    if abs(latency.change or 0.0) >= DRIFT_SHARE * move:
        return
    speedup.verdict = Verdict.EAGER_FASTER if eager < 0 else Verdict.EAGER_SLOWER
    said = (f"speedup {speedup.change:+.1%} because eager moved {eager:+.1%}; compiled latency held "
            f"({(latency.change or 0.0):+.1%}): a change in torch's eager path or the model, not the compiled code")
    speedup.note = f"{speedup.note}; {said}"
    result.flags.append(said)


def _finish_case(result: CaseResult, thresholds: Thresholds | None = None) -> None:
    moved_at = thresholds.get("probe") if thresholds is not None else None
    _attribute_latency(result, float(moved_at) if moved_at is not None else DEFAULT_PROBE_MOVED)
    _attribute_speedup(result)
    if result.metrics:
        result.verdict = worst(m.verdict for m in result.metrics) or Verdict.UNCHANGED
    if result.verdict == Verdict.SLOWER_EAGER_TOO and thresholds is not None and thresholds.whole_model == WHOLE_MODEL_WARN:
        result.warn_only = True
        result.flags.append("whole-model change (eager too): warn only (whole_model = \"warn\"), the gate does not fail on it")


def compare_case(case_id: str, base: list[Record], head: list[Record], thresholds: Thresholds,
                 metrics: Sequence[str] | None = None, torch_differs: bool = False) -> CaseResult:
    """Verdicts for one case from its base and head records (one record per process).
    `torch_differs`: the sides ran different torch builds (records do not carry their run's
    environment; compare_runs works it out itself)."""
    result, pending = _judge_case(case_id, base, head, thresholds, metrics, torch_differs)
    _resolve(pending)
    _finish_case(result, thresholds)
    return result


# ---------------------------------------------------------------- whole runs

def group_records(runs: Sequence[Run]) -> dict[str, list[Record]]:
    """case_id -> records from every run (several when a case was measured in several
    processes: ab rounds, repeated runs)."""
    out: dict[str, list[Record]] = {}
    for run in runs:
        for record in run.records:
            out.setdefault(record.case_id, []).append(record)
    return out


def _env_field(env: Mapping[str, Any], name: str) -> Any:
    if name == "device names":
        devices = _dict(env.get("devices"))
        return sorted(str(d.get("name")) for d in devices.values() if isinstance(d, Mapping) and d.get("name")) or None
    value: Any = env
    for part in name.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def environment_mismatches(base: Sequence[Run], head: Sequence[Run],
                           fields: Sequence[str] = HARDWARE_FIELDS + COMPILER_FIELDS) -> list[str]:
    """Fields that differ between the runs (also within one side), as 'field: base vs head'."""
    out = []
    for name in fields:
        bvals = {repr(_env_field(r.environment, name)) for r in base}
        hvals = {repr(_env_field(r.environment, name)) for r in head}
        if bvals != hvals or len(bvals) > 1 or len(hvals) > 1:
            out.append(f"{name}: base {' / '.join(sorted(bvals))} vs head {' / '.join(sorted(hvals))}")
    return out


def describe_side(runs: Sequence[Run]) -> dict[str, Any]:
    env = runs[0].environment if runs else {}
    return {"run_ids": [r.run_id for r in runs], "labels": sorted({r.label for r in runs if r.label}),
            "torch": env.get("torch_version"), "cpu_model": env.get("cpu_model"),
            "git_commit": env.get("git_commit"), "host": env.get("host")}


NoiseTable = Mapping[str, Mapping[str, float]]  # case_id -> metric -> minimum detectable change


def compare_runs(base: Sequence[Run], head: Sequence[Run], config: ThresholdConfig | None = None, *,
                 metrics: Sequence[str] | None = None, allow_mismatch: bool = False,
                 ignore_fields: Sequence[str] = (), noise: NoiseTable | None = None) -> Comparison:
    """Join base and head on case_id and decide every case. Raises EnvironmentMismatchError
    when hardware or compiler versions differ, unless allow_mismatch (then it warns)."""
    if not base or not head:
        raise RunFileError("compare needs at least one base run and one head run")
    for name in metrics or ():
        if name not in METRICS:
            raise RunFileError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")
    config = config or ThresholdConfig()
    fields = [f for f in HARDWARE_FIELDS + COMPILER_FIELDS if f not in ignore_fields]
    mismatches = environment_mismatches(base, head, fields)
    warnings: list[str] = []
    if mismatches and not allow_mismatch:
        raise EnvironmentMismatchError(
            "base and head differ in " + "; ".join(mismatches) + " (pass --allow-mismatch to compare anyway)")
    if mismatches:
        warnings.append("COMPARING ACROSS DIFFERENT ENVIRONMENTS: " + "; ".join(mismatches))
    torch_differs = bool(environment_mismatches(base, head, TORCH_FIELDS))
    bmap, hmap = group_records(base), group_records(head)
    ids = sorted(set(bmap) | set(hmap))
    cases, pending, case_thresholds = [], [], []
    for case_id in ids:
        ref = (hmap.get(case_id) or bmap[case_id])[0].case
        thresholds = config.for_case(case_id, ref.workload, ref.suite)
        result, waiting = _judge_case(case_id, bmap.get(case_id, []), hmap.get(case_id, []), thresholds, metrics,
                                      torch_differs)
        cases.append(result)
        case_thresholds.append(thresholds)
        pending.extend(waiting)
    _resolve(pending)
    for result, thresholds in zip(cases, case_thresholds, strict=True):
        single = min(len(bmap.get(result.case_id, [])), len(hmap.get(result.case_id, []))) \
            < MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
        if single:  # per-process tests already see the noise between processes
            _apply_noise_band(result, noise or {})
        _finish_case(result, thresholds)
        _flag_noise(result, noise or {})
    cases.sort(key=lambda c: (Verdict(c.verdict).rank, c.case_id))
    return Comparison(describe_side(base), describe_side(head), cases, mismatches, warnings, config.source)


def _apply_noise_band(result: CaseResult, noise: NoiseTable) -> None:
    """With one process per side the tests see only the noise inside each process; how far
    two processes of the same code land apart is what `compilebench noise` measured on this
    machine (mdc_single: the 95th percentile of A/A changes). A timing change inside that band
    cannot be told from process-to-process noise, so it is `noisy`, not a verdict; beyond the
    band the tests decide as usual. Called for cases with under 4 processes a side."""
    measured = noise.get(result.case_id, {})
    for m in result.metrics:
        band = measured.get(m.metric)
        if band is None or METRICS[m.metric].kind != "timing" or m.change is None:
            continue
        if m.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT) and abs(m.change) < band:
            m.verdict = Verdict.NOISY
            m.note = (f"{m.note}; {m.change:+.1%} is inside this machine's A/A band between single processes "
                      f"(compilebench noise: {band:.1%}): run more processes (ab, 4+ rounds) to decide")


def _flag_noise(result: CaseResult, noise: NoiseTable) -> None:
    """Flag metrics whose measured A/A spread (compilebench noise) or in-comparison spread
    exceeds the threshold: a verdict there is a coin toss."""
    measured = noise.get(result.case_id, {})
    for m in result.metrics:
        threshold = m.threshold if isinstance(m.threshold, float) else None
        mdc = measured.get(m.metric)
        if threshold is not None and mdc is not None and mdc > threshold:
            result.flags.append(f"too noisy to judge: {m.metric}: A/A noise on this machine detects only {mdc:.1%} "
                                f"> threshold {threshold:.1%}")
        elif m.verdict == Verdict.NOISY:
            result.flags.append(f"too noisy to judge: {m.metric}: {m.note}")
