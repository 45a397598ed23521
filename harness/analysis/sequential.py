"""When `compilebench ab` may stop measuring a case: a group-sequential rule on per-process values.

`ab --rounds R` runs R processes per side. Most cases of most PRs do not change, and a big
regression is plain after a few rounds, so measuring every case R times is mostly waste.
The rule looks after each round from `min_rounds` (4: the per-process test's floor) to R-1
and stops a case whose verdict is already decided; whatever reaches round R is decided by
the gate exactly as with fixed rounds. What it looks at, per gated metric that compare tests one
value per process on (latency, speedup, cold compile time, peak memory, compile host
memory), is the log of one value per process (the process's median sample; compile
seconds; bytes), base vs head:

- **changed**: Welch's t test of the log values is significant at `interim_alpha` (0.001,
  a Haybittle-Peto boundary: so strict that all interim looks together add at most
  (R - min_rounds) x 0.001 to the A/A false-failure rate) *and* the median change is
  beyond the metric's threshold, as the gate requires;
- **unchanged**: the two one-sided tests (TOST) put the change inside +-threshold at level
  `beta / interim looks` per look (Bonferroni over the looks), and the median change is
  inside it too: the chance of stopping "unchanged" when the true change is at the
  threshold is at most `beta` (default 0.05) whatever the number of looks.

A "changed" stop also needs the gate's own test to be able to confirm it at this many
processes: the two-sided U test's smallest p at k vs k is 2 / C(2k, k) (0.029 at 4, 0.0079
at 5, 0.0022 at 6), so under a thresholds file's stricter `alpha` the rule waits for the
round where compare can reach it. A case stops when every gated metric is decided; a metric
that some process lacks (no valid samples, no compile time) keeps the case measuring, and
one that no process has is not judged (compare does not judge it either). Graph breaks,
recompiles and accuracy are judged by compare on every round measured (the worst one): a
case stops early only while all its processes, both sides, agree on them, so a side that
differs is measured to the last round; a count that would first change in a round the case
did not run cannot be seen (docs/GATING.md says so). A case whose status is not ok on either
side in any round never stops early (a failure is data, and a flaky one needs every round),
nor one with a process timed on a contended machine (harness/measure/contention.py: the
gate cannot judge its timings; the rule does not either).
Nothing here replaces the gate: the verdict of a stopped case is compare's, on the rounds
measured, so the table, the verdict vocabulary and the exit code are the usual ones.

`operating_characteristics` simulates the design on log-normal per-process values (A/A
false-failure rate, detection rate and mean processes per side, against fixed rounds on the
same simulated sessions); tests/test_sequential.py checks the rates it promises, and
benchmarks/gate_sequential.py replays real ab sessions through it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from harness.analysis.metrics import (
    METRICS,
    accuracy_status,
    compile_time_value,
    judges_compile_cpu_seconds,
    scalar_value,
    timing_samples,
)
from harness.analysis.probe_norm import machine_probe
from harness.analysis.significance import MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
from harness.analysis.thresholds import DEFAULT_ALPHA, ThresholdConfig
from harness.measure.contention import is_contended
from harness.model.schema import Case, Record

__all__ = ["SEQUENTIAL_METRICS", "AGREEING_METRICS", "SequentialDesign", "Look", "look", "case_values",
           "smallest_u_p", "case_decision", "stop_rule", "fixed_decision", "operating_characteristics"]

SEQUENTIAL_METRICS = ("latency", "speedup", "compile_time", "peak_memory", "compile_host_memory")
AGREEING_METRICS = ("graph_breaks", "recompiles", "accuracy")  # a case stops only while every process agrees
CHANGED, UNCHANGED = "changed", "unchanged"


@dataclass(frozen=True)
class SequentialDesign:
    max_rounds: int = 8
    min_rounds: int = MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
    alpha: float = DEFAULT_ALPHA  # the gate's own level, used at the last round (by compare)
    interim_alpha: float = 0.001  # Haybittle-Peto: the "changed" boundary at every interim look
    beta: float = 0.05  # total chance of an "unchanged" stop when the true change is at the threshold

    @property
    def interim_looks(self) -> list[int]:
        """Rounds after which the rule may stop a case (never after the last: the gate decides)."""
        return list(range(self.min_rounds, self.max_rounds))

    @property
    def tost_level(self) -> float:
        looks = len(self.interim_looks)
        return self.beta / looks if looks else self.beta

    def describe(self) -> dict[str, float | int | str]:
        return {"rule": "group-sequential: Haybittle-Peto changed boundary, TOST unchanged boundary",
                "max_rounds": self.max_rounds, "min_rounds": self.min_rounds, "alpha": self.alpha,
                "interim_alpha": self.interim_alpha, "beta": self.beta, "tost_level_per_look": self.tost_level}


@dataclass(frozen=True)
class Look:
    """One metric at one look: the decision (changed / unchanged / None: keep measuring)."""

    decision: str | None
    change: float  # head/base - 1 of the medians of the per-process values
    p_value: float
    ci: tuple[float, float]  # the TOST interval of the change


def _welch(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(mean difference, its standard error, Welch-Satterthwaite degrees of freedom)."""
    vx, vy = np.var(x, ddof=1) / x.size, np.var(y, ddof=1) / y.size
    se = math.sqrt(vx + vy)
    if se == 0.0:
        return float(np.mean(x) - np.mean(y)), 0.0, float(x.size + y.size - 2)
    df = (vx + vy) ** 2 / (vx ** 2 / (x.size - 1) + vy ** 2 / (y.size - 1))
    return float(np.mean(x) - np.mean(y)), se, df


def look(base: Sequence[float], head: Sequence[float], threshold: float, design: SequentialDesign) -> Look:
    """Decide one metric from one value per process on each side (all positive)."""
    from scipy.stats import t as student_t

    b, h = np.log(np.asarray(base, dtype=float)), np.log(np.asarray(head, dtype=float))
    change = float(np.exp(np.median(h) - np.median(b)) - 1.0)
    diff, se, df = _welch(h, b)
    if se == 0.0:  # identical values on each side (a deterministic quantity): the change is exact
        p = 0.0 if diff != 0.0 else 1.0
        ci = (math.expm1(diff), math.expm1(diff))
    else:
        p = float(2 * student_t.sf(abs(diff) / se, df))
        q = float(student_t.ppf(1 - design.tost_level, df))
        ci = (math.expm1(diff - q * se), math.expm1(diff + q * se))
    if p < design.interim_alpha and abs(change) >= threshold:
        return Look(CHANGED, change, p, ci)
    if -threshold < ci[0] and ci[1] < threshold and abs(change) < threshold:
        return Look(UNCHANGED, change, p, ci)
    return Look(None, change, p, ci)


def case_values(records: Sequence[Record], metric: str, factors: Sequence[float] | None = None,
                cpu_seconds: bool | None = None) -> list[float | None]:
    """One value per process of `metric`, as the gate's per-process test sees it (latency
    divided by each process's machine-probe factor when given, as compare does; compile time
    on CPU seconds when `cpu_seconds`, decided over both sides as compare decides it), None
    where a process lacks a valid one."""
    if cpu_seconds is None:
        cpu_seconds = judges_compile_cpu_seconds(list(records)) if metric == "compile_time" else False
    values: list[float | None] = []
    for i, r in enumerate(records):
        if metric == "compile_time":
            value = compile_time_value(r, cpu_seconds)
        elif METRICS[metric].kind == "scalar":
            value = scalar_value(r, metric)
        else:
            samples = timing_samples(r, metric)
            value = float(np.median(samples)) if samples is not None and samples.size else None
            if value is not None and factors and metric == "latency":
                value /= factors[i]
        values.append(value if value is not None and value > 0 else None)
    return values


def smallest_u_p(n_base: int, n_head: int) -> float:
    """The smallest two-sided p the gate's Mann-Whitney U test can give at these sizes (every
    head value beyond every base value, no ties): 2 / C(n_base + n_head, n_base)."""
    return min(1.0, 2.0 / math.comb(n_base + n_head, n_base))


def _agree(records: Sequence[Record], metric: str) -> bool:
    """Every process, both sides, reports the same value of a count or the accuracy status."""
    values = {accuracy_status(r) if metric == "accuracy" else scalar_value(r, metric) for r in records}
    return len(values) <= 1


def case_decision(base: Sequence[Record], head: Sequence[Record], config: ThresholdConfig,
                  design: SequentialDesign, metrics: Sequence[str] | None = None,
                  torch_differs: bool = True) -> str | None:
    """Why the case is decided after len(base) rounds ('latency unchanged +0.4% [-2.1%,
    +2.9%]; ...'), or None to keep measuring. `torch_differs`: the sides run different torch
    builds, so a probe that runs on torch is not trusted to normalise latency (compare's rule;
    True, raw latency, when the caller does not know)."""
    rounds = min(len(base), len(head))
    if rounds not in design.interim_looks:
        return None
    if any(r.status != "ok" or is_contended(r.metrics) for r in (*base, *head)):
        return None
    case = base[0].case
    thresholds = config.for_case(case.case_id, case.workload, case.suite)
    gated = [m for m in (metrics or METRICS) if m in METRICS and thresholds.enabled(m)]
    if any(m in AGREEING_METRICS and not _agree([*base, *head], m) for m in gated):
        return None
    probe = machine_probe(list(base), list(head), thresholds, torch_differs=torch_differs)
    normalise = probe is not None and probe.normalise
    cpu_seconds = judges_compile_cpu_seconds([*base, *head])
    reasons = []
    for metric in gated:
        threshold = thresholds.get(metric)
        if metric not in SEQUENTIAL_METRICS or threshold is None:
            continue
        bv = case_values(base, metric, probe.factors("base") if normalise else None, cpu_seconds)
        hv = case_values(head, metric, probe.factors("head") if normalise else None, cpu_seconds)
        if all(v is None for v in (*bv, *hv)):
            continue  # no process has it: compare does not judge it either
        if any(v is None for v in (*bv, *hv)):
            return None  # some process lacks it: the gate would judge fewer processes; keep measuring
        result = look(bv, hv, float(threshold), design)
        if result.decision is None or (result.decision == CHANGED
                                       and smallest_u_p(len(bv), len(hv)) >= thresholds.alpha):
            return None
        reasons.append(f"{metric} {result.decision} {result.change:+.1%} "
                       f"[{result.ci[0]:+.1%}, {result.ci[1]:+.1%}] p={result.p_value:.2g}")
    return "; ".join(reasons) or None


StopRule = Callable[..., "str | None"]  # (case, base records, head records, rounds, torch_differs=...)


def stop_rule(config: ThresholdConfig | None = None, design: SequentialDesign | None = None,
              metrics: Sequence[str] | None = None) -> StopRule:
    """The callable `ab` asks after each round: (case, base records, head records, rounds done,
    torch_differs) -> why the case is decided, or None to keep measuring."""
    config = config or ThresholdConfig()
    design = design or SequentialDesign(alpha=config.alpha)

    def decide(case: Case, base: list[Record], head: list[Record], rounds: int, torch_differs: bool = True) -> str | None:
        return case_decision(base, head, config, design, metrics, torch_differs)

    return decide


def fixed_decision(base: np.ndarray, head: np.ndarray, threshold: float, alpha: float) -> bool:
    """The gate's per-process test at the last round, for simulations: a change beyond the
    threshold, confirmed by a two-sided U test at `alpha` (compare also asks its bootstrap CI
    to exclude no change, which rarely disagrees with the U test). True: the gate fails."""
    from scipy.stats import mannwhitneyu

    change = float(np.median(head) / np.median(base) - 1.0)
    if change < threshold:  # only slower fails (latency: higher is worse)
        return False
    return float(mannwhitneyu(head, base, alternative="two-sided").pvalue) < alpha


def operating_characteristics(design: SequentialDesign, change: float, sigma: float, sessions: int,
                              seed: int, threshold: float = 0.05) -> dict[str, float]:
    """Simulated sessions of one case (per-process values log-normal with log-sd `sigma`, head
    `change` slower): how often the gate fails with fixed rounds and with the sequential rule
    on the same sessions, and the mean processes per side each needs. Synthetic, not measured."""
    rng = np.random.default_rng(seed)
    n = design.max_rounds
    base = np.exp(rng.normal(0.0, sigma, (sessions, n)))
    head = np.exp(rng.normal(math.log1p(change), sigma, (sessions, n)))
    fixed_fail = seq_fail = 0
    processes = 0
    for b, h in zip(base, head, strict=True):
        fixed = fixed_decision(b, h, threshold, design.alpha)
        fixed_fail += fixed
        for k in design.interim_looks:
            decided = look(b[:k], h[:k], threshold, design).decision
            if decided is not None:
                processes += k
                seq_fail += fixed_decision(b[:k], h[:k], threshold, design.alpha) if decided == CHANGED else False
                break
        else:
            processes += n
            seq_fail += fixed
    return {"change": change, "sigma": sigma, "sessions": sessions, "fixed_fail_rate": fixed_fail / sessions,
            "sequential_fail_rate": seq_fail / sessions, "fixed_processes": float(n),
            "sequential_processes": processes / sessions}
