"""Statistics over raw samples: summaries and a bootstrap CI on the speedup.

Speedup is the ratio of medians (eager / compiled): medians resist the long right tail
that timing always has. Its confidence interval comes from resampling both sample sets,
so a report can show "1.42x [1.38, 1.47]" instead of a bare number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def summarize(samples: Sequence[float]) -> dict[str, Any]:
    """Median, mean, spread and percentiles of raw samples (empty input gives n=0)."""
    if len(samples) == 0:
        return {"n": 0}
    a = np.asarray(samples, dtype=float)
    median = float(np.median(a))
    q1, q3 = np.percentile(a, [25, 75])
    return {
        "n": int(a.size),
        "median": median,
        "mean": float(a.mean()),
        "stdev": float(a.std(ddof=1)) if a.size > 1 else 0.0,
        "min": float(a.min()),
        "max": float(a.max()),
        "p10": float(np.percentile(a, 10)),
        "p90": float(np.percentile(a, 90)),
        "iqr": float(q3 - q1),
        # robust relative spread: IQR over median (a CV that outliers cannot inflate)
        "rel_iqr": float((q3 - q1) / median) if median > 0 else None,
    }


def ratio_of_medians_ci(
    numerator: Sequence[float],
    denominator: Sequence[float],
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float] | None:
    """(point, low, high) for median(numerator)/median(denominator), percentile bootstrap.
    Deterministic for a given seed so the same run always renders the same interval."""
    if len(numerator) == 0 or len(denominator) == 0:
        return None
    a = np.asarray(numerator, dtype=float)
    b = np.asarray(denominator, dtype=float)
    point = float(np.median(a) / np.median(b)) if np.median(b) > 0 else float("nan")
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, a.size, size=(n_boot, a.size))
    ib = rng.integers(0, b.size, size=(n_boot, b.size))
    ratios = np.median(a[ia], axis=1) / np.median(b[ib], axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(ratios, [alpha, 1 - alpha])
    return point, float(low), float(high)


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and np.isfinite(v)]
    if not vals:
        return None
    return float(np.exp(np.mean(np.log(vals))))
