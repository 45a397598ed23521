"""The progress line's ETA (harness/report/eta.py): this run's case times and the history
store's median case times, on a fake clock-free estimator and a real store."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from harness.model.schema import Run
from harness.report.display import ProgressPrinter
from harness.report.eta import CaseTimes, EtaEstimator, case_times, fmt_eta
from harness.run.store import HistoryStore
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record


def test_no_data_no_eta_then_the_runs_own_mean():
    eta = EtaEstimator()
    assert eta.remaining_s(10) is None and fmt_eta(None) == ""
    for seconds in (2.0, 4.0, 30.0):  # a mean, not a median: a total is a sum
        eta.finished("x", seconds)
    assert eta.remaining_s(3) == pytest.approx(36.0)
    assert eta.remaining_s(0) == 0.0


def test_history_prior_over_the_cases_not_seen_scaled_to_this_machine():
    history = CaseTimes.from_medians({"a": 10.0, "b": 10.0, "big": 100.0}, {"a": "s", "b": "s", "big": "s"})
    eta = EtaEstimator(history)
    assert eta.remaining_s(3, "s") == pytest.approx(3 * 40.0)  # nothing run yet: the suite's mean
    eta.finished("a", 20.0)  # this machine is 2x slower than the history's
    assert eta.machine_ratio() == pytest.approx(2.0)
    # prior: mean of b and big (55) x 2 = 110, blended 1/6 with the run's own 20 s
    assert eta.per_case("s") == pytest.approx((1 / 6) * 20.0 + (5 / 6) * 110.0)
    eta.finished("b", 20.0)
    eta.finished("c", 20.0)  # not in history: no ratio from it
    assert eta.per_case("s") == pytest.approx(0.5 * 20.0 + 0.5 * 200.0)


def test_case_times_from_a_real_store(tmp_path):
    rng = np.random.default_rng(0)
    db = tmp_path / "history.sqlite"
    with HistoryStore(db) as store:
        for night, wall in enumerate((4.0, 6.0, 5.0)):
            records = [synthetic_record(synthetic_case(i, suite="s"), rng) for i in range(3)]
            for i, r in enumerate(records):
                r.worker = {"wall_s": wall * (2 if i == 2 else 1)}
            store.ingest(Run(f"r{night}", f"2026-01-0{night + 1}T00:00:00+00:00", "x", dict(SYNTHETIC_ENV),
                             {"suite": "s"}, records))
    times = case_times(db)
    assert times is not None
    assert times.by_case[synthetic_case(0).case_id] == pytest.approx(5.0)
    assert times.by_case[synthetic_case(2).case_id] == pytest.approx(10.0)
    assert times.suite_mean("s") == pytest.approx(20 / 3)
    assert case_times(tmp_path / "none.sqlite") is None
    (tmp_path / "junk.sqlite").write_bytes(b"not a database" * 100)
    assert case_times(tmp_path / "junk.sqlite") is None


def test_progress_lines_carry_the_eta():
    out = io.StringIO()
    printer = ProgressPrinter(Console(file=out, width=200), history=CaseTimes.from_medians({"z": 60.0}, {"z": "s"}))
    rng = np.random.default_rng(0)
    case = synthetic_case(0, suite="s")
    printer("start", case, 0, 3, None)
    printer("done", case, 0, 3, synthetic_record(case, rng))
    text = out.getvalue()
    assert "running" in text and "(ETA 3m00s)" in text  # 3 cases x the suite's 60 s before any finished
    assert "[1/3] ok" in text and "ETA " in text.splitlines()[-1]


@pytest.mark.parametrize("seconds, text", [(5, "ETA 5s"), (125, "ETA 2m05s"), (7500, "ETA 2h05m")])
def test_fmt_eta(seconds, text):
    assert fmt_eta(seconds) == text


def test_derived_cases_scale_the_remaining_time_by_the_share_that_ran_a_process():
    # `-c eager,inductor`: every other case is an eager case derived from its twin in no time;
    # counting it as a full case doubled the ETA of the hf and timm runs on the H200
    eta = EtaEstimator()
    eta.finished("inductor-a", 20.0)
    assert eta.remaining_s(10) == pytest.approx(200.0)  # nothing derived yet: every case counts
    eta.derived()
    assert eta.process_share() == pytest.approx(0.5)
    assert eta.remaining_s(10) == pytest.approx(100.0)
    eta.finished("inductor-b", 40.0)
    eta.finished("eager-c", 30.0)  # a held eager case that ran its own process counts in full
    assert eta.process_share() == pytest.approx(0.75)
    assert eta.remaining_s(4) == pytest.approx(4 * 30.0 * 0.75)
