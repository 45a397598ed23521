"""The report at breadth in headless Chromium: suite and family filters and the probe flag
on a SYNTHETIC 1,200-case run (the timing of the same page: benchmarks/breadth_scale.py)."""

from __future__ import annotations

import pytest

from harness.analysis.breadth import family_of
from harness.report.report import CASE_PAGE, write_report
from harness.testing.synthetic_breadth import breadth_run

pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e .[test])")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

from tests.test_browser import _load, _visible_rows, browser  # noqa: E402,F401  (the fixture)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    run = breadth_run(1200, seed=3)
    return run, write_report(run, tmp_path_factory.mktemp("breadth") / "report.html")


def test_suite_and_family_filters_combine(browser, big):  # noqa: F811
    run, page = big
    assert _load(browser, page) == []
    bar = browser.find_element(By.CSS_SELECTOR, ".filters[data-target='#cases tbody tr']")
    Select(bar.find_element(By.CSS_SELECTOR, "select[data-key=suite]")).select_by_visible_text("timm")
    timm = [r for r in run.records if r.case.suite == "timm"]
    assert len(timm) == 300 > CASE_PAGE  # a page of them shows until "show all"
    assert bar.find_element(By.CLASS_NAME, "count").text == f"{CASE_PAGE} of 1200 shown (300 match)"
    assert len(_visible_rows(browser, "cases")) == CASE_PAGE
    bar.find_element(By.CSS_SELECTOR, "button.show-all").click()
    assert bar.find_element(By.CLASS_NAME, "count").text == "300 of 1200 shown"
    assert not bar.find_element(By.CSS_SELECTOR, "button.show-all").is_displayed()
    Select(bar.find_element(By.CSS_SELECTOR, "select[data-key=family]")).select_by_visible_text("resnet")
    resnet = [r for r in timm if family_of(r) == "resnet"]
    rows = _visible_rows(browser, "cases")
    assert len(rows) == len(resnet) > 0
    assert {r.get_attribute("data-family") for r in rows} == {"resnet"}
    Select(bar.find_element(By.CSS_SELECTOR, "select[data-key=status]")).select_by_visible_text("fail_compile")
    both = [r for r in resnet if r.status == "fail_compile"]
    assert bar.find_element(By.CLASS_NAME, "count").text == f"{len(both)} of 1200 shown"


def test_the_first_page_follows_a_sort(browser, big):  # noqa: F811
    _, page = big
    _load(browser, page)
    assert len(_visible_rows(browser, "cases")) == CASE_PAGE
    browser.find_element(By.XPATH, "//table[@id='cases']//th[starts-with(., 'speedup')]").click()
    shown = browser.execute_script(
        "return Array.from(document.querySelectorAll('#cases tbody tr:not(.hidden) td:nth-child(3)'))"
        ".map(c => c.dataset.v).filter(v => v).map(parseFloat)")
    every = browser.execute_script(
        "return Array.from(document.querySelectorAll('#cases tbody tr td:nth-child(3)'))"
        ".map(c => c.dataset.v).filter(v => v).map(parseFloat)")
    assert shown == sorted(every)[:len(shown)] and len(shown) == CASE_PAGE  # the slowest 250 show
    browser.find_element(By.XPATH, "//table[@id='cases']//th[starts-with(., 'speedup')]").click()
    first = browser.execute_script("return document.querySelector('#cases tbody tr:not(.hidden) td:nth-child(3)').dataset.v")
    assert float(first) == max(every)  # descending: numbers first, the failed cases' blanks last


def test_probe_outliers_are_flagged_in_the_page(browser, big):  # noqa: F811
    run, page = big
    _load(browser, page)
    flagged = browser.find_elements(By.CSS_SELECTOR, "#cases td.probe-flag")
    assert len(flagged) == sum(1 for r in run.records[:5] if r.status == "ok") > 0
    assert browser.find_element(By.ID, "probe-flagged").is_displayed()
