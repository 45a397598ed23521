"""How long the rest of a run will take, for the progress line.

A case's wall time (process start to record, `record.worker.wall_s`) varies by two orders
of magnitude across a zoo (a tiny MLP: seconds; an 8B LLM: minutes), so the estimate per
remaining case is a mean, not a median (a total is a sum), taken from two sources:

- this run's finished cases (their mean wall time), and
- where the history store has them, earlier runs' median wall time per case: the mean over
  the cases of this suite is the prior for a case not seen yet, scaled by how much faster or
  slower this run's finished cases were than their own history (another machine, a loaded box).

With neither there is no ETA; with only this run, the run's mean; with history, the scaled
prior (the mean over the suite's cases not finished yet), blended with the run's own mean,
which gets up to half the weight once 3 cases have finished.
Eager cases derived from their compiled twins (harness/run/twins.py) run no process: the
remaining count is scaled by the share of finished cases that ran one.
"""

from __future__ import annotations

import sqlite3
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

HISTORY_ROWS = 20_000  # the latest records read from the store: enough for every case of a big suite a few times
WARM_CASES = 3  # finished cases of this run before its own mean gets a full say


@dataclass
class CaseTimes:
    """Earlier runs' median wall seconds per case id, grouped by suite."""

    by_case: dict[str, float] = field(default_factory=dict)
    suites: dict[str, dict[str, float]] = field(default_factory=dict)  # suite -> case id -> seconds

    @classmethod
    def from_medians(cls, by_case: Mapping[str, float], suite_of: Mapping[str, str]) -> CaseTimes:
        suites: dict[str, dict[str, float]] = defaultdict(dict)
        for case_id, seconds in by_case.items():
            suites[suite_of.get(case_id, "")][case_id] = seconds
        return cls(dict(by_case), dict(suites))

    def suite_mean(self, suite: str, exclude: set[str] | frozenset[str] = frozenset()) -> float | None:
        """Mean over the suite's cases not in `exclude` (all of them when none is left)."""
        cases = self.suites.get(suite) or {}
        left = [v for c, v in cases.items() if c not in exclude] or list(cases.values())
        return sum(left) / len(left) if left else None


def case_times(db: str | Path) -> CaseTimes | None:
    """Median wall time per case from the history store's latest records; None without a
    store or when it cannot be read (an ETA is never worth failing a run over: the run
    checks the store itself)."""
    path = Path(db)
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
        try:
            rows = conn.execute(
                "SELECT case_id, suite, json_extract(record_json, '$.worker.wall_s') FROM records "
                "ORDER BY rowid DESC LIMIT ?", (HISTORY_ROWS,)).fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    seconds: dict[str, list[float]] = defaultdict(list)
    suites: dict[str, str] = {}
    for case_id, suite, wall in rows:
        if isinstance(wall, (int, float)) and wall > 0:
            seconds[case_id].append(float(wall))
            suites[case_id] = suite or ""
    if not seconds:
        return None
    return CaseTimes.from_medians({c: statistics.median(v) for c, v in seconds.items()}, suites)


@dataclass
class EtaEstimator:
    """Feed it each finished case's wall time; ask it for the seconds left."""

    history: CaseTimes | None = None
    durations: list[float] = field(default_factory=list)
    ratios: list[tuple[float, float]] = field(default_factory=list)  # (this run, history) per case seen in both
    seen: set[str] = field(default_factory=set)
    derived_cases: int = 0  # finished without a process (an eager case derived from its twin)

    def derived(self) -> None:
        self.derived_cases += 1

    def process_share(self) -> float:
        """The share of finished cases that ran a process (1 before any): an `-c eager,inductor`
        run derives about half of its cases, which take no time."""
        done = len(self.durations) + self.derived_cases
        return len(self.durations) / done if done else 1.0

    def finished(self, case_id: str, seconds: float) -> None:
        self.durations.append(seconds)
        self.seen.add(case_id)
        past = self.history.by_case.get(case_id) if self.history else None
        if past:
            self.ratios.append((seconds, past))

    def machine_ratio(self) -> float:
        """This run's time over history's for the cases both have (1 without any)."""
        if not self.ratios:
            return 1.0
        return sum(a for a, _ in self.ratios) / sum(b for _, b in self.ratios)

    def per_case(self, suite: str) -> float | None:
        """Expected wall seconds of one remaining case of `suite`: history's mean over the
        suite's cases not finished yet (scaled to this run's speed), blended with this run's
        own mean, which gets up to half the weight once WARM_CASES cases have finished."""
        own = sum(self.durations) / len(self.durations) if self.durations else None
        prior = self.history.suite_mean(suite, self.seen) if self.history else None
        if prior is None:
            return own
        prior *= self.machine_ratio()
        if own is None:
            return prior
        weight = 0.5 * min(len(self.durations), WARM_CASES) / WARM_CASES
        return weight * own + (1 - weight) * prior

    def remaining_s(self, remaining_cases: int, suite: str = "", parallel: int = 1) -> float | None:
        """`parallel`: cases run at once (`--gpus`: one per GPU), never more than remain."""
        if remaining_cases <= 0:
            return 0.0
        per = self.per_case(suite)
        lanes = max(1, min(parallel, remaining_cases))
        return None if per is None else per * remaining_cases * self.process_share() / lanes


def fmt_eta(seconds: float | None) -> str:
    """'ETA 14m20s' / 'ETA 2h05m' / '' when unknown."""
    if seconds is None:
        return ""
    s = int(round(seconds))
    if s < 60:
        return f"ETA {s}s"
    if s < 3600:
        return f"ETA {s // 60}m{s % 60:02d}s"
    return f"ETA {s // 3600}h{s % 3600 // 60:02d}m"
