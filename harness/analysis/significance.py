"""The statistics behind a timing verdict: quantiles, the minimum detectable change, the
bootstrap CI of a ratio of medians, and what the tests run on (raw samples or one median
per process).

Pure numpy/scipy on arrays of samples: nothing here knows records, metrics or verdicts.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

__all__ = ["MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST", "BOOTSTRAP_RESAMPLES", "SMALL_SAMPLE", "quantiles",
           "median_rel_se", "minimum_detectable_change", "bootstrap_ratio_of_medians", "bootstrap_ratio_cis",
           "test_units", "median_change"]


# below 4 per side a two-sided U test on process medians cannot reach p < 0.05 (3 vs 3: p >= 0.1)
MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST = 4
BOOTSTRAP_RESAMPLES = 1000
SMALL_SAMPLE = 64  # below this, bootstrap by plain resampling


def quantiles(sorted_units: np.ndarray, qs: Sequence[float]) -> list[float]:
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


def median_rel_se(sorted_units: np.ndarray) -> float:
    """Relative standard error of the median, from the IQR (robust to the timing tail)."""
    if sorted_units.size < 2:
        return math.inf
    q1, med, q3 = quantiles(sorted_units, (0.25, 0.5, 0.75))
    if med <= 0:
        return math.inf
    return 1.2533 * ((q3 - q1) / 1.349) / math.sqrt(sorted_units.size) / med


def minimum_detectable_change(base: np.ndarray, head: np.ndarray) -> float:
    """Smallest relative change a two-sided 5% test detects with 80% power, given the spread
    of both sides (2.8 standard errors of the ratio of medians)."""
    return 2.8 * math.sqrt(median_rel_se(np.sort(base)) ** 2 + median_rel_se(np.sort(head)) ** 2)


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
    point = quantiles(a, (0.5,))[0] / quantiles(b, (0.5,))[0]
    rng = np.random.default_rng(seed)
    ratios = np.sort(_resampled_medians(a, n_boot, rng) / _resampled_medians(b, n_boot, rng))
    alpha = (1 - confidence) / 2
    low, high = quantiles(ratios, (alpha, 1 - alpha))
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


def test_units(groups: Sequence[np.ndarray], per_process: bool | None = None) -> tuple[np.ndarray, str]:
    """What the test runs on: one median per process when there are enough processes (on
    both sides: pass `per_process`; a test of 4 process medians against 100 raw samples
    would compare unlike things), else the pooled raw samples of the process(es)."""
    if per_process is None:
        per_process = len(groups) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
    if per_process:
        return np.asarray([float(np.median(g)) for g in groups]), "per-process medians"
    return (groups[0] if len(groups) == 1 else np.concatenate(groups)), "raw samples"


def median_change(base: list[np.ndarray], head: list[np.ndarray]) -> float | None:
    """head/base - 1 of the values the test runs on (per-process medians or pooled samples)."""
    if not base or not head:
        return None
    per_process = min(len(base), len(head)) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
    b, _ = test_units(base, per_process)
    h, _ = test_units(head, per_process)
    bmed, hmed = float(np.median(b)), float(np.median(h))
    return hmed / bmed - 1.0 if bmed > 0 else None
