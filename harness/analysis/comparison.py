"""What a comparison returns: per-metric and per-case results, and the whole Comparison
(counts, failing cases, geomeans, JSON form)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from harness.analysis.verdicts import DEFAULT_FAIL_ON, VERDICT_ORDER, Outcome, Verdict, worst

__all__ = ["MetricResult", "CaseResult", "Comparison", "GateDecision"]


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
    # shown, never failing (nor stopping the gate): a whole-model change under whole_model = "warn",
    # a missing case under missing = "warn", a contended one under contended = "warn"
    warn_only: bool = False
    # fails the gate whatever --fail-on says: a still-failing case under still_failing = "fail"
    # (the thresholds file's key, any layer, or --still-failing fail)
    fails_by_policy: bool = False
    # why the probe cannot tell machine drift from a real change here ('' when it can)
    probe_caveat: str = ""
    # records judged on each side, one per process (base, head); None: not judged (status, missing)
    processes: tuple[int, int] | None = None
    # the verdict of the failing set that failed it (its own, or a metric's: --fail-on "machine
    # drift" fails a case whose latency drifted though its speedup reads worse, `noisy`); set by failing()
    failed_on: Verdict | None = None
    # per side: processes, how many the worker marked contended, the largest cpu_wait_fraction
    # and the threads (None: no record on either side measured contention)
    contention: dict[str, dict[str, Any]] | None = None

    def metric(self, name: str) -> MetricResult | None:
        return next((m for m in self.metrics if m.metric == name), None)

    @property
    def in_both(self) -> bool:
        return self.status_base is not None and self.status_head is not None

    @property
    def timed_contended(self) -> bool:
        """Whether either side's timings were taken on a contended machine (they measure the
        run queue: kept out of every geomean)."""
        return bool(self.contention) and any(side.get("contended") for side in self.contention.values())

    @property
    def judged(self) -> bool:
        """Whether the comparison said anything about this case: a status change, or a metric
        measured on both sides (a case failing on both sides, or ok without samples, is not)."""
        if not self.in_both or self.verdict == Verdict.STILL_FAILING:
            return False
        if self.verdict in (Verdict.NOW_FAILING, Verdict.NOW_PASSING):
            return True
        return any(m.verdict != Verdict.NOT_APPLICABLE for m in self.metrics)


@dataclass(frozen=True)
class GateDecision:
    """What a gate does with a comparison: FAIL (exit 1), CANNOT_JUDGE (exit 3) or PASS
    (exit 0), the one line that says why, and the cases behind it."""

    outcome: Outcome
    reason: str
    failing: list[CaseResult]
    unjudged: list[CaseResult]  # cases whose verdict cannot judge (contended), not warn-only


@dataclass
class Comparison:
    base: dict[str, Any]
    head: dict[str, Any]
    cases: list[CaseResult]
    mismatches: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    thresholds_source: str = "<defaults>"

    def counts(self) -> dict[str, int]:
        return _count(self.cases)

    def failing(self, fail_on: Iterable[str] = DEFAULT_FAIL_ON) -> list[CaseResult]:
        """The cases that fail the gate: a verdict of `fail_on` on the case or on any of its
        metrics (a case's verdict is its worst metric's, which may be a warn-only one), or a
        policy (still_failing = "fail"); never a warn-only case. Sets each one's `failed_on`."""
        wanted = set(fail_on)
        out = []
        for c in self.cases:
            if c.warn_only:
                continue
            hits = [v for v in (c.verdict, *(m.verdict for m in c.metrics)) if v in wanted]
            if hits or c.fails_by_policy:
                c.failed_on = worst(hits) if hits else Verdict(c.verdict)
                out.append(c)
        return out

    def decide(self, failing: list[CaseResult] | None = None) -> GateDecision:
        """The gate's answer. Loud on anything it could not judge, quiet only when it really
        compared: no case in both runs, or none judged, or a contended case -> CANNOT_JUDGE;
        a failing verdict (`failing`, default: the default --fail-on) -> FAIL, which beats
        a contended case elsewhere (a real regression is an answer)."""
        failing = self.failing() if failing is None else failing
        failing_ids = {id(c) for c in failing}
        unjudged = [c for c in self.cases if Verdict(c.verdict).outcome is Outcome.CANNOT_JUDGE and not c.warn_only
                    and id(c) not in failing_ids]
        n_base = sum(1 for c in self.cases if c.status_base is not None)
        n_head = sum(1 for c in self.cases if c.status_head is not None)
        common = [c for c in self.cases if c.in_both]
        if not common:
            return GateDecision(Outcome.CANNOT_JUDGE, f"nothing compared: base and head share no case; base has {n_base}, "
                                f"head has {n_head}", failing, unjudged)
        if failing:
            # worded by the verdicts that fail (--fail-on may name any, e.g. machine contended)
            kinds = ", ".join(f"{n} {v}" for v, n in _count(failing, key=lambda c: c.failed_on or c.verdict).items())
            return GateDecision(Outcome.FAIL, f"{len(failing)} case(s) failed the gate ({kinds})", failing, unjudged)
        if unjudged:
            kinds = _count(unjudged)
            if list(kinds) == [Verdict.MACHINE_CONTENDED]:
                reason = f"machine contended: cannot judge {len(unjudged)} case(s)"
            else:
                reason = f"cannot judge {len(unjudged)} case(s) ({', '.join(f'{n} {v}' for v, n in kinds.items())})"
            return GateDecision(Outcome.CANNOT_JUDGE, reason, failing, unjudged)
        if not any(c.judged for c in common):
            kinds = ", ".join(f"{n} {v}" for v, n in _count(common).items())
            return GateDecision(Outcome.CANNOT_JUDGE, f"nothing judged: none of the {len(common)} case(s) in both runs "
                                f"has a status change or a metric measured on both sides ({kinds})", failing, unjudged)
        still = sum(1 for c in common if c.verdict == Verdict.STILL_FAILING and id(c) not in failing_ids)
        # verdicts that fail by default but not under this gate's --fail-on: not "no regression"
        spared = _count(c for c in common if Verdict(c.verdict).outcome is Outcome.FAIL and not c.warn_only)
        reason = ("no verdict of the failing set (--fail-on), though " + ", ".join(f"{n} {v}" for v, n in spared.items())
                  if spared else "no regression")
        # a failure that was there in base is not this change's, but the line says it is there
        reason = f"{reason}; {still} case(s) still failing, as in base" if still else reason
        return GateDecision(Outcome.PASS, reason, failing, unjudged)

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


def _count(cases: Iterable[CaseResult], key: Callable[[CaseResult], str] = lambda c: c.verdict) -> dict[str, int]:
    """Verdict (`key`: the case's own by default) -> cases with it, worst first, verdicts no case has left out."""
    out = dict.fromkeys(VERDICT_ORDER, 0)
    for c in cases:
        out[key(c)] += 1
    return {k: v for k, v in out.items() if v}


def _exclusion_reason(case: CaseResult) -> str:
    """Why a case stays out of the geomeans ('' when it counts)."""
    if case.status_base is None:
        return "new: not in base"
    if case.status_head is None:
        return "missing: not in head"
    if case.status_base != "ok" or case.status_head != "ok":
        return f"status {case.status_base} -> {case.status_head}"
    if case.timed_contended:
        return "machine contended: its timings measure the run queue"
    return ""


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj
