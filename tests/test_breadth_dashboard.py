"""The dashboard at breadth: per-suite pass rate and geomean tonight vs the night before,
and the cases that started failing tonight (SYNTHETIC nights of 1,000+ cases)."""

from __future__ import annotations

import re

import pytest

from harness.report.dashboard import DashboardOptions, build_dashboard
from harness.run.store import HistoryStore
from harness.testing.synthetic_breadth import breadth_run

CASES = 1000


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("breadth-dash")
    db = folder / "history.sqlite"
    first = breadth_run(CASES, seed=4, night=0)
    ok_ids = [r.case_id for r in first.records if r.status == "ok"]
    broke = frozenset(ok_ids[:3])  # ok on night 0 and 1, fail_compile on night 2
    with HistoryStore(db) as store:
        store.ingest(first)
        store.ingest(breadth_run(CASES, seed=4, night=1))
        store.ingest(breadth_run(CASES, seed=4, night=2, failing=broke))
    result = build_dashboard(db, folder / "site", DashboardOptions(chart_reports=0))
    return result, (folder / "site" / "index.html").read_text(), broke, first


def test_started_failing_tonight_lists_exactly_the_broken_cases(site):
    _, html, broke, _ = site
    table = html.split('<table id="started-failing-table"', 1)[1].split("</table>", 1)[0]
    listed = set(re.findall(r'<td class="case"><a href="[^"]+">([^<]+)</a>', table))
    assert listed == set(broke)
    assert table.count("fail_compile") == 3 and "BackendCompilerFailed: backend=&#39;inductor&#39; raised" in table


def test_suites_table_has_tonight_and_the_night_before(site):
    _, html, broke, first = site
    table = html.split('<table id="suites"', 1)[1].split("</table>", 1)[0]
    rows = table.split("<tr data-device=")[1:]
    assert len(rows) == len({(r.case.suite, r.case.compiler) for r in first.records})
    broken_groups = {(r.case.suite, r.case.compiler) for r in first.records if r.case_id in broke}
    flagged = [r for r in rows if 'href="#started-failing"' in r]
    assert len(flagged) == len(broken_groups)
    for row in flagged:  # pass rate fell: marked bad, and the started-failing count links down
        assert re.search(r'<td data-v="[0-9.]+" class="bad">', row)


def test_no_started_failing_section_rows_on_a_steady_history(tmp_path):
    db = tmp_path / "h.sqlite"
    with HistoryStore(db) as store:
        for night in range(2):
            store.ingest(breadth_run(200, seed=5, night=night))
    build_dashboard(db, tmp_path / "site", DashboardOptions(chart_reports=0))
    html = (tmp_path / "site" / "index.html").read_text()
    assert 'id="none-started"' in html and 'id="started-failing-table"' not in html
