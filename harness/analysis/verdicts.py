"""The verdict vocabulary of compare: one type, each verdict with its class and its rank.

A verdict names what was seen (docs/GATING.md has the table). Its class says what a gate
does with it by default:

* ``Outcome.FAIL``: the thing judged got worse; the gate exits 1.
* ``Outcome.WARN``: shown, never failing by default (undecided, or not the compiler's change).
* ``Outcome.PASS``: nothing to act on.
* ``Outcome.CANNOT_JUDGE``: the comparison cannot say (the machine was contended); the gate
  exits 3, neither passing nor failing.

`--fail-on` (and the thresholds file's policy keys) can move a verdict between the first two
for one gate; the class here is the default. Members are declared worst first: the
declaration order is the severity order of the markdown report and of `worst`.

`Verdict` is a ``str`` enum whose values are the words the JSON, the markdown and `--fail-on`
have always used, so ``Verdict.REGRESSION == "regression"`` and files written before it still
read the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

__all__ = ["Outcome", "Verdict", "VERDICT_ORDER", "DEFAULT_FAIL_ON", "worst", "parse_verdict"]


class Outcome(str, Enum):
    """What a verdict does to a gate by default."""

    FAIL = "fail"
    WARN = "warn"
    PASS = "pass"
    CANNOT_JUDGE = "cannot judge"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Verdict(str, Enum):
    """A case's or a metric's verdict; declared worst first (the severity order)."""

    # the compiled code changed (eager held still)
    REGRESSION = "regression"
    # eager changed with it on a steady (or normalised) machine: torch or the model
    SLOWER_EAGER_TOO = "slower (eager too)"
    NOW_FAILING = "now failing"
    MISSING = "missing"
    # the machine was contended while the case was timed (its threads waited for a core): the
    # timings measure the run queue, neither a regression nor a pass (exit 3 by default)
    MACHINE_CONTENDED = "machine contended"
    # eager slowed with the compiled code but no usable probe says whether the machine held
    # still: machine drift and a real whole-model change look alike (no comma in the name:
    # --fail-on is a comma list)
    SLOWER_EAGER_TOO_NO_PROBE = "slower (eager too; no probe)"
    # the spread makes a change of the threshold's size undecidable
    NOISY = "noisy"
    # the change was the machine's (probe), nothing left after normalising
    MACHINE_DRIFT = "machine drift"
    # speedup moved because eager did, the compiled code's latency holding still
    EAGER_FASTER = "eager faster"
    EAGER_SLOWER = "eager slower"
    IMPROVEMENT = "improvement"
    FASTER_EAGER_TOO = "faster (eager too)"
    NOW_PASSING = "now passing"
    NEW = "new"
    STILL_FAILING = "still failing"
    UNCHANGED = "unchanged"
    NOT_APPLICABLE = "n/a"

    def __str__(self) -> str:  # the word, not "Verdict.REGRESSION", in f-strings and tables
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def outcome(self) -> Outcome:
        """The verdict's default class: FAIL, WARN or PASS."""
        return OUTCOMES[self]

    @property
    def fails(self) -> bool:
        return self.outcome is Outcome.FAIL

    @property
    def warns(self) -> bool:
        return self.outcome is Outcome.WARN

    @property
    def passes(self) -> bool:
        return self.outcome is Outcome.PASS

    @property
    def rank(self) -> int:
        """Severity: 0 is the worst."""
        return VERDICT_ORDER.index(self)


OUTCOMES: dict[Verdict, Outcome] = {
    Verdict.REGRESSION: Outcome.FAIL,
    Verdict.SLOWER_EAGER_TOO: Outcome.FAIL,
    Verdict.NOW_FAILING: Outcome.FAIL,
    Verdict.MISSING: Outcome.FAIL,
    Verdict.MACHINE_CONTENDED: Outcome.CANNOT_JUDGE,
    Verdict.SLOWER_EAGER_TOO_NO_PROBE: Outcome.WARN,
    Verdict.NOISY: Outcome.WARN,
    Verdict.MACHINE_DRIFT: Outcome.WARN,
    Verdict.EAGER_FASTER: Outcome.WARN,
    Verdict.EAGER_SLOWER: Outcome.WARN,
    Verdict.IMPROVEMENT: Outcome.PASS,
    Verdict.FASTER_EAGER_TOO: Outcome.PASS,
    Verdict.NOW_PASSING: Outcome.PASS,
    Verdict.NEW: Outcome.PASS,
    Verdict.STILL_FAILING: Outcome.PASS,
    Verdict.UNCHANGED: Outcome.PASS,
    Verdict.NOT_APPLICABLE: Outcome.PASS,
}

VERDICT_ORDER: tuple[Verdict, ...] = tuple(Verdict)
DEFAULT_FAIL_ON: tuple[Verdict, ...] = tuple(v for v in Verdict if v.fails)


def worst(verdicts: Iterable[Verdict | str]) -> Verdict | None:
    """The most severe of `verdicts`, `n/a` left out (None when nothing else is there)."""
    ranked = [Verdict(v) for v in verdicts if v != Verdict.NOT_APPLICABLE]
    return min(ranked, key=lambda v: v.rank) if ranked else None


def parse_verdict(text: str) -> Verdict | None:
    """A verdict from how a user types it (`now_failing`, `now-failing`, `Now Failing`); None
    when it names none."""
    word = text.strip().lower().replace("_", " ").replace("-", " ")
    try:
        return Verdict(word)
    except ValueError:
        return None
