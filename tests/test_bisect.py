"""Bisect over environments: the search's measurement budget, noisy repeats, resume, the
judge on synthetic records, and the CLI end to end over fake interpreters."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.analysis.bisect_verdict import MetricNotMeasuredError, judge, side_evidence
from harness.cli.main import main
from harness.experiments.bisect import (
    BAD,
    GOOD,
    NOISY,
    BisectError,
    BisectState,
    default_state_path,
    open_state,
    probes_needed,
    run_bisect,
    state_key,
)
from harness.model.schema import Case
from harness.testing.synthetic import synthetic_record
from tests.fake_envs import calls, make_fake_python

CASE = Case("mlp-classic", "forward", "inductor", "cpu", "float32", 16, "tiny", "smoke")


def _envs(n):
    return [{"name": f"e{i}", "spec": f"torch==2.{i}.0"} for i in range(n)]


def _tagged(i, seed):
    record = synthetic_record(CASE, np.random.default_rng(seed))
    record.worker["env_index"] = i
    return record


def _fake_search(n, first_bad, tmp_path=None, noisy_at=(), max_repeats=2):
    """Measurements are synthetic records tagged with their env index; the judge says bad
    from `first_bad` on (None: never), noisy for `noisy_at` until it has 3 processes."""
    state = BisectState(state_key(CASE.case_id, "latency", None, "worse", _envs(n)), _envs(n),
                        path=(tmp_path / "state.json") if tmp_path else None)
    measured = []

    def measure(i):
        measured.append(i)
        return _tagged(i, len(measured))

    def decide(ref, cand):
        i = cand[0].worker["env_index"]
        if i in noisy_at and len(cand) < 3:
            return {"verdict": NOISY, "beyond_threshold": False}
        bad = first_bad is not None and i >= first_bad
        return {"verdict": BAD if bad else GOOD, "beyond_threshold": bad}

    return state, run_bisect(state, measure, decide, max_repeats=max_repeats), measured


@pytest.mark.parametrize("first_bad", [1, 2, 3, 4, 5, 6, 7, None])
def test_eight_envs_take_at_most_four_measurements(first_bad):
    state, result, measured = _fake_search(8, first_bad)
    assert len(measured) <= 4 == 1 + probes_needed(8)
    assert measured[0] == 0  # the reference is measured first
    if first_bad is None:
        assert not result["found"] and "e7" in result["message"]
    else:
        assert result["found"] and result["first_bad"] == f"e{first_bad}"
        assert result["good_neighbour"] == f"e{first_bad - 1}"
        # the evidence was measured: the first bad env and its good neighbour (or the reference)
        assert first_bad in measured and first_bad - 1 in measured


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 16, 33])
def test_measurement_budget_is_one_plus_log2(n):
    for first_bad in [*range(1, n), None]:
        _, result, measured = _fake_search(n, first_bad)
        assert len(measured) <= 1 + math.ceil(math.log2(n))
        assert result["found"] == (first_bad is not None)


def test_noisy_verdict_measures_both_sides_again():
    state, result, measured = _fake_search(8, 5, noisy_at=(4,))
    assert result["first_bad"] == "e5"
    step = state.step_for(4)
    assert step["repeats"] == 2 and step["verdict"] == GOOD and "noisy" not in step
    # two repeats: env 4 and the reference measured twice more each; the budget is 4 + 4
    assert len(measured) == 4 + 4 and measured.count(4) == 3 and measured.count(0) == 3


def test_still_noisy_is_decided_by_the_point_estimate_and_flagged():
    state, result, measured = _fake_search(8, 5, noisy_at=(4,), max_repeats=1)
    step = state.step_for(4)
    assert step["noisy"] is True and step["verdict"] == GOOD and step["repeats"] == 1


def test_resume_reuses_every_measurement(tmp_path):
    envs = _envs(8)
    key = state_key(CASE.case_id, "latency", None, "worse", envs)
    path = tmp_path / "state.json"
    state, resumed = open_state(path, key, envs)
    assert not resumed
    calls_made = []

    def measure(i):
        if len(calls_made) == 2:
            raise KeyboardInterrupt  # Ctrl-C during the third measurement
        calls_made.append(i)
        return _tagged(i, i)

    def decide(ref, cand):
        bad = cand[0].worker["env_index"] >= 3
        return {"verdict": BAD if bad else GOOD, "beyond_threshold": bad}

    with pytest.raises(KeyboardInterrupt):
        run_bisect(state, measure, decide)
    saved = json.loads(path.read_text())
    assert sum(len(v) for v in saved["measurements"].values()) == 2 and len(saved["steps"]) == 1

    state, resumed = open_state(path, key, envs)
    assert resumed and state.measurement_count() == 2
    more = []

    def measure_again(i):
        more.append(i)
        return _tagged(i, i)

    result = run_bisect(state, measure_again, decide)
    assert result["first_bad"] == "e3"
    assert len(calls_made) + len(more) <= 4 and 0 not in more  # nothing measured twice


def test_state_file_of_another_bisect_is_refused(tmp_path):
    envs = _envs(4)
    path = tmp_path / "s.json"
    open_state(path, state_key(CASE.case_id, "latency", None, "worse", envs), envs)
    with pytest.raises(BisectError, match="another bisect"):
        open_state(path, state_key(CASE.case_id, "compile_time", None, "worse", envs), envs)


def test_measurement_settings_are_part_of_the_bisect(tmp_path):
    """Records taken under --min-time 0.1 are no evidence for a bisect asked for --min-time 1."""
    envs = _envs(4)
    quick = state_key(CASE.case_id, "latency", None, "worse", envs, measure={"min_time_s": 0.1, "timeout_s": 60.0})
    longer = state_key(CASE.case_id, "latency", None, "worse", envs, measure={"min_time_s": 1.0, "timeout_s": 60.0})
    assert default_state_path(tmp_path, quick) != default_state_path(tmp_path, longer)  # the same command resumes
    path = tmp_path / "s.json"
    open_state(path, quick, envs)
    with pytest.raises(BisectError, match=r"--min-time: 0.1 there, 1.0 now") as err:
        open_state(path, longer, envs)
    assert "timeout" not in str(err.value)  # only what differs is named
    state, resumed = open_state(path, quick, envs)
    assert resumed


def test_a_state_file_from_before_the_warm_up_budget_still_resumes(tmp_path):
    """The budget joined the stop policy after bisects were saved: at 0 (its neutral value) it
    stays out of the key, so an older file is the same bisect at the same default path; a file
    that spelled the 0 out resumes too, and a real budget is another bisect, named as the flag."""
    envs = _envs(4)
    policy = {"min_time_s": 0.1, "min_samples": 5, "warmup": 3, "timeout_s": 60.0}
    before = state_key(CASE.case_id, "latency", None, "worse", envs, measure=policy)
    now = state_key(CASE.case_id, "latency", None, "worse", envs, measure={**policy, "warmup_budget_s": 0.0})
    assert now == before and default_state_path(tmp_path, now) == default_state_path(tmp_path, before)
    spelled = tmp_path / "spelled.json"
    open_state(spelled, before, envs)
    data = json.loads(spelled.read_text())
    data["key"]["measure"]["warmup_budget_s"] = 0.0  # as main wrote it from f76a0d1 to d59f9d7 (2026-12-03, 13:39-16:23 UTC)
    spelled.write_text(json.dumps(data))
    assert open_state(spelled, now, envs)[1]
    budgeted = state_key(CASE.case_id, "latency", None, "worse", envs, measure={**policy, "warmup_budget_s": 1.0})
    with pytest.raises(BisectError, match=r"--warmup-budget: None there, 1.0 now"):
        open_state(spelled, budgeted, envs)


def test_cli_bisect_resume_with_another_min_time_measures_afresh(tmp_path, capsys):
    fakes = [make_fake_python(tmp_path / "py", f"e{i}", slowdown=0.3 if i >= 1 else 0.0) for i in range(2)]
    argv = ["bisect", "-w", "mlp-classic", "--scenario", "forward", "-c", "inductor", "--metric", "latency",
            "--out", str(tmp_path / "out"), *[a for i, f in enumerate(fakes) for a in ("--env", f"e{i}={f}")]]
    assert main([*argv, "--min-time", "0"]) == 0
    measured = sum(calls(f) for f in fakes)
    assert main([*argv, "--min-time", "0"]) == 0 and sum(calls(f) for f in fakes) == measured  # resumed
    capsys.readouterr()
    assert main([*argv, "--min-time", "0.01"]) == 0
    assert sum(calls(f) for f in fakes) == 2 * measured  # another setting: measured again, not reused
    assert "resuming" not in capsys.readouterr().err
    assert len(list((tmp_path / "out" / "bisect").glob("*.json"))) == 2


def _without_compile_time(record):
    record.metrics.pop("compile_time_s", None)
    return record


def test_judge_refuses_a_metric_the_case_does_not_record():
    rng = np.random.default_rng(3)
    ref = [_without_compile_time(synthetic_record(CASE, rng))]
    cand = [_without_compile_time(synthetic_record(CASE, rng, compiled_median=9e-4))]
    with pytest.raises(MetricNotMeasuredError, match=rf"metric compile_time was not measured for case "
                                                     rf"{CASE.case_id} .*pick a metric the case records, e.g. "
                                                     rf"--metric latency / speedup"):
        judge(ref, cand, "compile_time")


def test_bisect_on_an_unrecorded_metric_stops_instead_of_finding_no_bad_env():
    state = BisectState(state_key(CASE.case_id, "compile_time", None, "worse", _envs(4)), _envs(4))
    rng = np.random.default_rng(4)
    with pytest.raises(MetricNotMeasuredError, match="compile_time was not measured"):
        run_bisect(state, lambda i: _without_compile_time(synthetic_record(CASE, rng)),
                   lambda ref, cand: judge(ref, cand, "compile_time"))
    assert state.result is None


def test_reference_that_fails_stops_with_a_clear_error():
    state = BisectState(state_key(CASE.case_id, "latency", None, "worse", _envs(4)), _envs(4))
    failing = synthetic_record(CASE, np.random.default_rng(0), status="fail_compile")
    with pytest.raises(BisectError, match="does not run the case"):
        run_bisect(state, lambda i: failing, lambda r, c: {"verdict": GOOD})


# ---------------------------------------------------------------- the judge on records

def _records(n, median, seed, **kw):
    rng = np.random.default_rng(seed)
    return [synthetic_record(CASE, rng, compiled_median=median, n=60, **kw) for _ in range(n)]


def test_judge_latency_regression_with_evidence():
    ref, cand = _records(1, 5e-4, 1), _records(1, 6e-4, 2)
    out = judge(ref, cand, "latency")
    assert out["verdict"] == BAD and out["change"] == pytest.approx(0.2, abs=0.05)
    low, high = out["candidate"]["ci"]
    assert low < out["candidate"]["value"] < high and out["candidate"]["n"] == 60
    assert out["ratio_ci"][0] > 1.0


def test_judge_same_distribution_is_good_and_better_direction_flips():
    assert judge(_records(1, 5e-4, 1), _records(1, 5e-4, 2), "latency")["verdict"] == GOOD
    faster = judge(_records(1, 5e-4, 1), _records(1, 4e-4, 2), "latency", direction="better")
    assert faster["verdict"] == BAD


def test_judge_counts_status_and_threshold():
    assert judge(_records(1, 5e-4, 1), _records(1, 5e-4, 2, graph_breaks=2), "graph_breaks")["verdict"] == BAD
    assert judge(_records(1, 5e-4, 1), _records(1, 5e-4, 2, graph_breaks=2), "graph_breaks",
                 threshold=2)["verdict"] == GOOD
    broken = judge(_records(1, 5e-4, 1), _records(1, 5e-4, 2, status="crashed"), "status")
    assert broken["verdict"] == BAD and "crashed" in broken["note"]
    assert side_evidence(_records(1, 5e-4, 3), "compile_time")["ci"] is None  # one value: no invented CI


def test_judge_noisy_when_spread_hides_the_threshold():
    ref, cand = _records(1, 5e-4, 1, spread=0.6), _records(1, 5.1e-4, 2, spread=0.6)
    assert judge(ref, cand, "latency")["verdict"] == NOISY


# ---------------------------------------------------------------- CLI over fake interpreters

def test_cli_bisect_eight_fake_envs_finds_the_injected_slowdown(tmp_path, capsys):
    """8 fake interpreters, compiled code 30% slower from e5 on: `first bad: e5` in 4
    measurements; the markdown holds both measurements with CIs; rerunning resumes."""
    fakes = [make_fake_python(tmp_path / "py", f"e{i}", slowdown=0.3 if i >= 5 else 0.0) for i in range(8)]
    state, md = tmp_path / "state.json", tmp_path / "issue.md"
    argv = ["bisect", "-w", "mlp-classic", "--scenario", "forward", "-c", "inductor", "--metric", "latency",
            "--state", str(state), "--markdown", str(md), "--out", str(tmp_path / "out"),
            *[a for i, f in enumerate(fakes) for a in ("--env", f"e{i}={f}")]]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "first bad: e5" in out.splitlines()[0] and "good neighbour: e4" in out
    data = json.loads(state.read_text())
    assert data["result"]["measurements"] == 4 and sum(calls(f) for f in fakes) == 4
    text = md.read_text()
    assert "first bad: `e5`" in text and "| first bad | `e5` |" in text and "[" in text
    assert main(argv) == 0  # resumed from the state file: no new measurement
    assert sum(calls(f) for f in fakes) == 4 and "resuming bisect" in capsys.readouterr().err


def test_cli_bisect_bad_input_is_one_line(tmp_path, capsys):
    fake = make_fake_python(tmp_path / "py", "p")
    assert main(["bisect", "-w", "mlp-classic", "--metric", "latency", "--env", f"a={fake}"]) == 2
    assert "at least two --env" in capsys.readouterr().err
    assert main(["bisect", "-w", "mlp-classic", "--scenario", "forward", "--metric", "latency", "--env", f"a={fake}",
                 "--env", f"b={tmp_path}/missing/python"]) == 2
    err = capsys.readouterr().err
    assert "no such executable" in err and len(err.strip().splitlines()) == 1
    assert main(["bisect", "-w", "mlp-classic", "--metric", "latency", "--env", f"a={fake}", "--env", f"b={fake}"]) == 2
    assert "exactly one case" in capsys.readouterr().err


def test_judge_counts_a_whole_model_slowdown_as_bad():
    """Across torch builds eager moving with the compiled code is torch's change too."""
    rng = np.random.default_rng(5)
    ref = [synthetic_record(CASE, rng, eager_median=1e-3, compiled_median=5e-4, n=60, probe_median=1e-4)]
    cand = [synthetic_record(CASE, rng, eager_median=1.4e-3, compiled_median=7e-4, n=60, probe_median=1e-4)]
    out = judge(ref, cand, "latency")
    assert out["compare_verdict"] == "slower (eager too)" and out["verdict"] == BAD
    # without a probe the search still counts it (it re-measures the midpoints anyway)
    ref = [synthetic_record(CASE, rng, eager_median=1e-3, compiled_median=5e-4, n=60)]
    cand = [synthetic_record(CASE, rng, eager_median=1.4e-3, compiled_median=7e-4, n=60)]
    out = judge(ref, cand, "latency")
    assert out["compare_verdict"] == "slower (eager too; no probe)" and out["verdict"] == BAD
