"""The nightly dashboard: regression detection, change points, the static site and its CLI."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest

from harness.cli.main import main
from harness.report.dashboard import DashboardOptions, build_dashboard, change_points, detect
from harness.run.store import HistoryStore
from harness.testing.synthetic_history import Step, SyntheticSpec, synthetic_history, synthetic_run

NIGHTS = 30


def _noisy(n: int = 40, level: float = 1.5, noise: float = 0.01, seed: int = 0) -> list[float]:
    return list(level * (1 + np.random.default_rng(seed).normal(0, noise, n)))


def test_flat_noisy_series_never_alerts():
    for seed in range(20):
        flags = detect(_noisy(seed=seed), higher_is_better=True, rel_tol=0.05)
        assert not any(flags.alerts) and not flags.open


def test_step_down_opens_a_regression_at_the_first_bad_night():
    values = _noisy()
    values[30:] = [v * 0.8 for v in values[30:]]
    flags = detect(values, higher_is_better=True, rel_tol=0.05)
    assert flags.open and flags.first_bad == 30
    assert all(flags.violations[30:]) and not any(flags.violations[:30])
    assert flags.baseline[39] == pytest.approx(1.5, rel=0.03)  # violating nights never pull the baseline down


def test_one_bad_night_is_a_violation_but_not_an_alert():
    values = _noisy()
    values[35] *= 0.7
    flags = detect(values, higher_is_better=True, rel_tol=0.05)
    assert flags.violations[35] and not any(flags.alerts) and not flags.open


def test_two_bad_nights_at_the_end_alert_and_a_recovery_closes_it():
    values = _noisy()
    values[38:] = [v * 0.8 for v in values[38:]]
    flags = detect(values, higher_is_better=True, rel_tol=0.05)
    assert flags.open and flags.first_bad == 38
    recovered = detect(values + [1.5], higher_is_better=True, rel_tol=0.05)
    assert not recovered.open and recovered.alerts[38] and recovered.alerts[39]


def test_direction_and_gaps():
    values: list[float | None] = _noisy(level=10.0)
    values[36:] = [v * 1.3 for v in values[36:]]  # compile time up: bad for a lower-is-better metric
    values[37] = None  # a night without the case
    up = detect(values, higher_is_better=False, rel_tol=0.15)
    assert up.open and up.first_bad == 36
    assert not detect(values, higher_is_better=True, rel_tol=0.15).open  # the same rise is fine for speedup


def test_consecutive_option():
    values = _noisy()
    values[38:] = [v * 0.8 for v in values[38:]]
    assert not detect(values, True, 0.05, DashboardOptions(consecutive=3)).open


def test_change_points_find_the_step_and_ignore_noise():
    values = _noisy(n=60, noise=0.02)
    values[40:] = [v * 0.8 for v in values[40:]]
    assert change_points(values, 0.05) == [40]
    assert change_points(_noisy(n=60, noise=0.02, seed=3), 0.05) == []


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """30 synthetic nights x 8 cases with three injected regressions and one hostile workload name."""
    root = tmp_path_factory.mktemp("dash")
    db = root / "history.sqlite"
    spec = SyntheticSpec(cases=8, steps=(Step("synth-001", NIGHTS - 5, "speedup", 0.7),
                                         Step("synth-002", NIGHTS - 2, "status", 0.0),
                                         Step("synth-003", 12, "compile_time_s", 1.5, compiler="inductor")))
    with HistoryStore(db) as store:
        for run in synthetic_history(spec, NIGHTS):
            hostile = run.records[-1]
            run.records[-1] = replace(hostile, case=replace(hostile.case, workload="</script><img src=x onerror=alert(1)>"))
            store.ingest(run)
    out = root / "site"
    result = build_dashboard(db, out, DashboardOptions(chart_reports=1))
    return db, out, result


def _regression_rows(out) -> list[list[str]]:
    html = (out / "regressions.html").read_text()
    rows = re.findall(r"<tr data-device.*?</tr>", html, re.S)
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td.*?</td>", r, re.S)] for r in rows]


def test_site_layout_and_counts(history):
    db, out, result = history
    assert result.nights == NIGHTS and result.groups == 2 and result.workloads == 5
    assert (out / "index.html").is_file() and (out / "regressions.html").is_file()
    assert len(list((out / "workloads").glob("*.html"))) == 5
    assert len(list((out / "runs").glob("*.html"))) == NIGHTS and result.reports_rendered == NIGHTS
    index = (out / "index.html").read_text()
    assert 'id="synthetic"' in index and "SYNTHETIC" in index
    assert index.count('class="ts-host"') == 2 * 4


def test_open_regressions_name_the_injected_steps_and_their_first_bad_night(history):
    _, out, _ = history
    rows = _regression_rows(out)
    by_series = {(r[1].split(" (")[0], r[2]): r for r in rows}
    speed = [k for k in by_series if k[0].startswith("synth-001/") and k[1] == "speedup"]
    assert len(speed) == 2  # both compilers
    assert by_series[speed[0]][0] == f"2026-01-{1 + NIGHTS - 5:02d} 02:00"
    status = [k for k in by_series if k[0].startswith("synth-002/") and k[1].startswith("passing")]
    assert len(status) == 2 and by_series[status[0]][0] == f"2026-01-{1 + NIGHTS - 2:02d} 02:00"
    compile_rows = [k for k in by_series if k[0].startswith("synth-003/") and k[1] == "cold compile time"]
    assert len(compile_rows) == 1 and "/inductor/" in compile_rows[0][0]
    assert by_series[compile_rows[0]][0] == "2026-01-13 02:00"
    # nothing else at case level: the other cases are noise only
    case_rows = {k[0].split("/")[0] for k in by_series if not k[0].startswith("cpu /")}
    assert case_rows == {"synth-001", "synth-002", "synth-003"}


def test_inline_json_and_pages_escape_hostile_names(history):
    _, out, _ = history
    for page in [out / "index.html", *(out / "workloads").glob("*.html")]:
        html = page.read_text()
        assert html.count("</script>") == html.count("<script"), page  # only our own blocks close
        assert "<img" not in html, page
        match = re.search(r'<script type="application/json" id="dash-data">(.*?)</script>', html, re.S)
        if match:
            json.loads(match.group(1))  # still valid JSON after escaping


def test_points_link_to_existing_night_reports(history):
    _, out, _ = history
    data = json.loads(re.search(r'id="dash-data">(.*?)</script>', (out / "index.html").read_text(), re.S).group(1))
    for night in data["nights"]:
        assert (out / night["href"]).is_file()
    latest = (out / data["nights"][-1]["href"]).read_text()
    older = (out / data["nights"][0]["href"]).read_text()
    assert latest.count("<svg") == 4 and 'id="charts-omitted"' in older and "../index.html" in older


def test_rebuild_is_incremental(history, tmp_path):
    db, out, _ = history
    again = build_dashboard(db, out, DashboardOptions(chart_reports=1))
    assert again.reports_rendered == 0
    with HistoryStore(db) as store:
        store.ingest(synthetic_run(SyntheticSpec(cases=8), NIGHTS))
    newer = build_dashboard(db, out, DashboardOptions(chart_reports=1))
    assert newer.nights == NIGHTS + 1 and newer.reports_rendered == 1


def test_cli_dashboard(history, tmp_path, capsys):
    db, _, _ = history
    rc = main(["dashboard", "--db", str(db), "-o", str(tmp_path / "d"), "--chart-reports", "0"])
    assert rc == 0 and "open regressions" in capsys.readouterr().out
    assert (tmp_path / "d" / "index.html").is_file()


@pytest.mark.parametrize("argv_tail, needle", [
    (["--db", "{tmp}/missing.sqlite"], "no history database"),
    (["--db", "{tmp}/empty.sqlite"], "holds no runs"),
    (["--db", "{tmp}/empty.sqlite", "--window", "0"], "--window must be a positive integer"),
])
def test_cli_dashboard_errors_are_one_line(tmp_path, capsys, argv_tail, needle):
    HistoryStore(tmp_path / "empty.sqlite").close()
    argv = ["dashboard", "-o", str(tmp_path / "d")] + [a.replace("{tmp}", str(tmp_path)) for a in argv_tail]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_group_geomean_is_not_moved_by_an_unrelated_failure():
    """Night 2: case c (the fastest) fails, a and b hold -> the geomean holds (a plain
    per-night geomean would drop from 2.0x to 1.41x); night 3: a gets 21% faster -> +10%."""
    import math

    import pandas as pd

    from harness.report.dashboard import chain_linked_geomean

    rows = []
    for night, speedups in (("n1", {"a": 1.0, "b": 2.0, "c": 4.0}), ("n2", {"a": 1.0, "b": 2.0, "c": None}),
                            ("n3", {"a": 1.21, "b": 2.0, "c": None})):
        for case_id, v in speedups.items():
            rows.append({"run_id": night, "case_id": case_id, "log_speedup": math.log(v) if v else float("nan")})
    values, excluded = chain_linked_geomean(pd.DataFrame(rows), ["n1", "n2", "n3"])
    assert values[0] == pytest.approx(2.0) and values[1] == pytest.approx(2.0)
    assert values[2] == pytest.approx(2.0 * 1.1)
    assert excluded == [{"case_id": "c", "reason": "failing this night"}]


def test_workload_row_geomean_counts_only_cases_ok_in_the_latest_night():
    """A case missing from the latest night does not count with its old value, a case failing
    tonight is listed as excluded (with why), and `failing now` counts tonight's failures only."""
    from harness.report.dashboard import _workload_row

    def series(case_id, x, statuses, speedups):
        return {"case_id": case_id, "device": "cpu", "compiler": "inductor", "suite": "s", "x": x,
                "status": statuses, "metrics": {"speedup": speedups}}

    rows = [series("a", [0, 1, 2], ["ok"] * 3, [2.0, 2.0, 2.0]),
            series("b", [0, 1, 2], ["ok"] * 3, [8.0, 8.0, 8.0]),
            series("gone", [0, 1], ["ok", "ok"], [100.0, 100.0]),  # not measured tonight: its old value must not count
            series("retired", [0], ["fail"], [None]),  # failed once, long ago: not failing now
            series("broken", [0, 1, 2], ["ok", "ok", "fail"], [0.01, 0.01, None])]
    row = _workload_row("w", "w.html", rows, 0, latest_night=2)
    assert row["latest_speedup"] == pytest.approx(4.0) and row["latest_speedup_cases"] == 2
    assert {e["case_id"]: e["reason"] for e in row["latest_speedup_excluded"]} == {
        "gone": "not in the latest night", "retired": "not in the latest night", "broken": "status fail"}
    assert row["failing"] == 1
