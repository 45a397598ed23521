"""The verdict vocabulary: one enum, each verdict's default class, the severity order."""

from __future__ import annotations

import json

import pytest

from harness.analysis.verdicts import DEFAULT_FAIL_ON, VERDICT_ORDER, Outcome, Verdict, parse_verdict, worst

# the contract docs/GATING.md's verdict table states: what each verdict does to a gate by default
EXPECTED_CLASS = {
    "regression": Outcome.FAIL,
    "slower (eager too)": Outcome.FAIL,
    "now failing": Outcome.FAIL,
    "missing": Outcome.FAIL,
    "machine contended": Outcome.CANNOT_JUDGE,
    "slower (eager too; no probe)": Outcome.WARN,
    "noisy": Outcome.WARN,
    "machine drift": Outcome.WARN,
    "eager faster": Outcome.WARN,
    "eager slower": Outcome.WARN,
    "improvement": Outcome.PASS,
    "faster (eager too)": Outcome.PASS,
    "now passing": Outcome.PASS,
    "new": Outcome.PASS,
    "still failing": Outcome.PASS,
    "unchanged": Outcome.PASS,
    "n/a": Outcome.PASS,
}


def test_every_verdict_has_its_documented_class():
    assert {v.value: v.outcome for v in Verdict} == EXPECTED_CLASS
    for v in Verdict:
        assert [v.fails, v.warns, v.passes, v.outcome is Outcome.CANNOT_JUDGE].count(True) == 1
    assert set(DEFAULT_FAIL_ON) == {v for v in Verdict if v.outcome is Outcome.FAIL}


def test_verdicts_are_the_words_files_always_used():
    """JSON, markdown and --fail-on keep their strings: the enum is a str."""
    assert Verdict.REGRESSION == "regression" and f"{Verdict.SLOWER_EAGER_TOO}" == "slower (eager too)"
    assert json.loads(json.dumps({"v": Verdict.NOW_FAILING, Verdict.NOISY: 1})) == {"v": "now failing", "noisy": 1}
    assert Verdict("machine drift") is Verdict.MACHINE_DRIFT
    assert all("," not in v.value for v in Verdict)  # --fail-on is a comma list


def test_severity_order_is_the_declaration_order_and_worst_uses_it():
    assert VERDICT_ORDER[0] is Verdict.REGRESSION and VERDICT_ORDER[-1] is Verdict.NOT_APPLICABLE
    assert [v.rank for v in VERDICT_ORDER] == list(range(len(VERDICT_ORDER)))
    # every failing verdict outranks every cannot-judge one, those every warning one, and
    # those every passing one
    ranks = {o: [v.rank for v in Verdict if v.outcome is o] for o in Outcome}
    assert max(ranks[Outcome.FAIL]) < min(ranks[Outcome.CANNOT_JUDGE]) <= max(ranks[Outcome.CANNOT_JUDGE]) \
        < min(ranks[Outcome.WARN])
    assert max(ranks[Outcome.WARN]) < min(r for r in ranks[Outcome.PASS])
    assert worst([Verdict.UNCHANGED, "noisy", Verdict.IMPROVEMENT]) is Verdict.NOISY
    assert worst([Verdict.NOT_APPLICABLE]) is None and worst([]) is None


@pytest.mark.parametrize("typed, verdict", [("now_failing", Verdict.NOW_FAILING), ("Machine-Drift", Verdict.MACHINE_DRIFT),
                                            (" n/a ", Verdict.NOT_APPLICABLE), ("regressed", None)])
def test_parse_verdict_accepts_how_users_type_them(typed, verdict):
    assert parse_verdict(typed) is verdict
