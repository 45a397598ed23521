"""A case timed on a contended machine is `machine contended: cannot judge`, not a regression.

The records carry what the worker measured (harness/measure/contention.py, ci-measure's
side): `metrics["contention"] = {"contended": bool, "cpu_wait_fraction": float, "threads":
int}`. These tests build that dict on synthetic records, the way a CPU hog taking every
core makes them: the head's samples 25x slower, eager too, the single-threaded probe
barely moved."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.analysis.compare import compare_case, compare_runs
from harness.analysis.thresholds import ThresholdConfig, config_from_dict
from harness.analysis.verdicts import Outcome, Verdict
from harness.cli.main import main
from harness.model.schema import Run, save_run
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record


def _contention(record, contended: bool, wait: float, threads: int = 2):
    record.metrics["contention"] = {"contended": contended, "cpu_wait_fraction": wait, "threads": threads}
    return record


def _aa_next_to_a_hog(seed: int = 3, **head_kwargs):
    """An A/A pair: base quiet, head measured next to a CPU hog (+2,460% latency, eager too,
    probe -20%: it is single-threaded and the case ran 2 threads)."""
    rng = np.random.default_rng(seed)
    case = synthetic_case(0)
    base = _contention(synthetic_record(case, rng, probe_median=1e-4), False, 0.01)
    slow = 25.6
    head = synthetic_record(case, rng, eager_median=1e-3 * slow, compiled_median=5e-4 * slow, probe_median=0.8e-4,
                            **head_kwargs)
    return case, base, _contention(head, True, 0.62)


def _run(run_id, records):
    return Run(run_id, "2026-01-01T00:00:00+00:00", run_id, dict(SYNTHETIC_ENV), {}, list(records))


def _save(tmp_path, run_id, records) -> str:
    save_run(_run(run_id, records), tmp_path / f"{run_id}.json")
    return str(tmp_path / f"{run_id}.json")


def test_the_contended_aa_pair_was_a_regression_without_the_record():
    """The same numbers without a contention record: what the gate said before (exit 1)."""
    case, base, head = _aa_next_to_a_hog()
    del base.metrics["contention"], head.metrics["contention"]
    result = compare_case(case.case_id, [base], [head], ThresholdConfig().for_case(case.case_id))
    assert Verdict(result.verdict).fails


def test_contended_timing_is_cannot_judge_not_a_regression():
    case, base, head = _aa_next_to_a_hog()
    result = compare_case(case.case_id, [base], [head], ThresholdConfig().for_case(case.case_id))
    assert result.verdict == Verdict.MACHINE_CONTENDED
    assert Verdict.MACHINE_CONTENDED.outcome is Outcome.CANNOT_JUDGE and not Verdict.MACHINE_CONTENDED.fails
    latency = result.metric("latency")
    assert latency.verdict == Verdict.MACHINE_CONTENDED and result.metric("speedup").verdict == Verdict.MACHINE_CONTENDED
    # the note keeps what it would have read and why it cannot judge
    assert "machine contended: cannot judge" in latency.note and "head: 1 of 1 process(es)" in latency.note
    assert "62%" in latency.note and "would read slower (eager too)" in latency.note
    assert result.contention["head"]["contended"] == 1 and result.contention["base"]["contended"] == 0
    # deterministic metrics are still judged: a contended machine does not change graph breaks
    assert result.metric("graph_breaks").verdict == Verdict.UNCHANGED


def test_contention_on_either_side_counts():
    case, base, head = _aa_next_to_a_hog()
    _contention(base, True, 0.4)
    _contention(head, False, 0.0)
    result = compare_case(case.case_id, [base], [head], ThresholdConfig().for_case(case.case_id))
    assert result.verdict == Verdict.MACHINE_CONTENDED and "base: 1 of 1 process(es)" in result.metric("latency").note


def test_an_unchanged_case_on_a_contended_machine_cannot_be_judged_either():
    """Contention can hide a regression as well as fake one: a steady reading proves nothing."""
    rng = np.random.default_rng(4)
    case = synthetic_case(0)
    base = synthetic_record(case, rng)
    head = _contention(synthetic_record(case, rng), True, 0.3)
    result = compare_case(case.case_id, [base], [head], ThresholdConfig().for_case(case.case_id))
    assert result.metric("latency").verdict == Verdict.MACHINE_CONTENDED
    assert "would read unchanged" in result.metric("latency").note


def test_a_real_count_regression_on_a_contended_machine_still_fails():
    case, base, head = _aa_next_to_a_hog(graph_breaks=2)
    cmp = compare_runs([_run("b", [base])], [_run("h", [head])])
    assert cmp.cases[0].verdict == Verdict.REGRESSION and cmp.decide().outcome is Outcome.FAIL


def test_gate_exits_3_on_a_contended_pair_and_says_why(tmp_path, capsys):
    _, base, head = _aa_next_to_a_hog()
    b, h = _save(tmp_path, "b", [base]), _save(tmp_path, "h", [head])
    md, js = tmp_path / "gate.md", tmp_path / "gate.json"
    assert main(["gate", b, h, "--markdown", str(md), "--json-file", str(js)]) == 3
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == ["compilebench: error: machine contended: cannot judge 1 case(s)"]
    assert "machine contended" in captured.out and "regression" not in captured.out.split("geomean")[0]
    text = md.read_text()
    assert "### Machine contended: cannot judge (1)" in text and "62%" in text
    data = json.loads(js.read_text())
    assert data["outcome"] == "cannot judge" and data["failed"] == [] and data["contended"] == [base.case_id]


@pytest.mark.parametrize("how", [["--contended", "warn"], ["--thresholds", "{toml}"]])
def test_contended_can_be_made_to_warn(tmp_path, capsys, how):
    _, base, head = _aa_next_to_a_hog()
    toml = tmp_path / "t.toml"
    toml.write_text('[defaults]\ncontended = "warn"\n')
    argv = ["compare", _save(tmp_path, "b", [base]), _save(tmp_path, "h", [head]),
            *[a.format(toml=toml) for a in how]]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "warn-only" in out and "machine contended" in out


def test_contended_policy_is_validated():
    from harness.analysis.thresholds import ThresholdConfigError

    with pytest.raises(ThresholdConfigError, match='not a contended policy; use "cannot-judge" \\(default\\) or "warn"'):
        config_from_dict({"defaults": {"contended": "fail"}})


def test_records_without_or_with_a_damaged_contention_block_are_judged_as_before():
    rng = np.random.default_rng(5)
    case = synthetic_case(0)
    base = synthetic_record(case, rng)
    head = synthetic_record(case, rng, compiled_median=5e-4 * 1.3)
    head.metrics["contention"] = "yes"  # a foreign or damaged file
    result = compare_case(case.case_id, [base], [head], ThresholdConfig().for_case(case.case_id))
    assert result.verdict == Verdict.REGRESSION and result.contention is None


def test_bisect_measures_a_contended_midpoint_again():
    """bisect must not call a contended environment 'good' (nor 'bad'): it re-measures."""
    from harness.analysis.bisect_verdict import judge

    _, base, head = _aa_next_to_a_hog()
    out = judge([base], [head], "latency")
    assert out["verdict"] == "noisy" and out["compare_verdict"] == Verdict.MACHINE_CONTENDED


def test_failing_on_machine_contended_headlines_that_verdict_not_a_regression(tmp_path, capsys):
    _, base, head = _aa_next_to_a_hog()
    b, h = _save(tmp_path, "b", [base]), _save(tmp_path, "h", [head])
    assert main(["gate", b, h, "--fail-on", "machine contended"]) == 1
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("FAIL")]
    assert line.startswith("FAIL: 1 case(s) failed the gate (1 machine contended)"), line
    assert "regressed" not in line and "missing" not in line
