"""The report and the dashboard in a real browser: headless Chromium driven by Selenium.

Pages load from file:// with no console errors, charts and tables are there, sorting and
filtering work, nothing from a hostile name executes, a phone-sized window has no page-wide
horizontal scroll, and screenshots are written (to $COMPILEBENCH_SCREENSHOTS when set, so a
person can look at them; else to the test's temp folder).

Needs Debian's `chromium` and `chromium-driver` (.ci/run installs them) and pip `selenium`;
without them every test here is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from harness.report.dashboard import DashboardOptions, build_dashboard
from harness.report.report import write_report
from harness.run.store import HistoryStore
from harness.testing.synthetic_history import Step, SyntheticSpec, synthetic_history, synthetic_run

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e .[test])")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

from tests.test_report import _baseline_pair, hostile_run  # noqa: E402

CHROME_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--allow-file-access-from-files")


def _binaries() -> tuple[str | None, str | None]:
    browser = os.environ.get("CHROMIUM_PATH") or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    return browser, shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium, chromedriver = _binaries()
    if not chromium or not chromedriver:
        pytest.skip("headless Chromium not found (apt-get install -y chromium chromium-driver; .ci/run does this)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.binary_location = chromium
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("COMPILEBENCH_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    base, head = _baseline_pair()
    head.records.extend(synthetic_run(SyntheticSpec(cases=12, seed=4), 0).records[6:])
    report = write_report(head, root / "report.html", baseline=base)
    hostile = write_report(hostile_run(), root / "hostile.html")
    db = root / "history.sqlite"
    spec = SyntheticSpec(cases=8, steps=(Step("synth-001", 20, "speedup", 0.7),))
    with HistoryStore(db) as store:
        for run in synthetic_history(spec, 24):
            last = run.records[-1]
            run.records[-1] = replace(last, case=replace(last.case, workload="</script><img src=x onerror=alert(1)>"))
            store.ingest(run)
    build_dashboard(db, root / "site", DashboardOptions(chart_reports=1))
    return {"report": report, "hostile": hostile, "site": root / "site"}


def _load(driver, path: Path, width: int = 1280, height: int = 1600) -> list[dict]:
    driver.set_window_size(width, height)
    driver.get(path.resolve().as_uri())
    driver.get_log("browser")  # drop anything older than this page
    driver.refresh()
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def _visible_rows(driver, table_id: str):
    return [r for r in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr") if r.is_displayed()]


def _screenshot(driver, shots: Path, name: str) -> Path:
    path = shots / name
    assert driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def test_report_loads_with_charts_and_no_console_errors(browser, pages, shots):
    assert _load(browser, pages["report"]) == []
    assert browser.title.startswith("compilebench report")
    assert len(browser.find_elements(By.CSS_SELECTOR, "figure.chart svg")) == 4
    assert len(_visible_rows(browser, "cases")) == 12
    first_delta = browser.find_element(By.CSS_SELECTOR, "#deltas tbody tr")
    assert first_delta.get_attribute("data-verdict") == "regression"
    _screenshot(browser, shots, "report.png")


def test_report_table_sorts_by_speedup(browser, pages):
    _load(browser, pages["report"])
    header = browser.find_element(By.XPATH, "//table[@id='cases']//th[starts-with(., 'speedup')]")

    def speedups() -> list[float]:
        return [float(v) for v in browser.execute_script(
            "return Array.from(document.querySelectorAll('#cases tbody tr td:nth-child(3)')).map(c => c.dataset.v)")
            if v]

    header.click()
    assert header.get_attribute("aria-sort") == "ascending"
    ascending = speedups()
    assert len(ascending) >= 10 and ascending == sorted(ascending)
    header.click()
    assert speedups() == sorted(ascending, reverse=True)


def test_report_filters_by_status_and_text(browser, pages):
    _load(browser, pages["report"])
    bar = browser.find_element(By.CSS_SELECTOR, ".filters[data-target='#cases tbody tr']")
    Select(bar.find_element(By.CSS_SELECTOR, "select[data-key=status]")).select_by_visible_text("crashed")
    rows = _visible_rows(browser, "cases")
    assert len(rows) == 1 and rows[0].get_attribute("data-status") == "crashed"
    assert bar.find_element(By.CLASS_NAME, "count").text == "1 of 12 shown"
    Select(bar.find_element(By.CSS_SELECTOR, "select[data-key=status]")).select_by_visible_text("all statuses")
    bar.find_element(By.CSS_SELECTOR, "input[type=search]").send_keys("brand-new")
    rows = _visible_rows(browser, "cases")
    assert len(rows) == 1 and rows[0].text.startswith("brand-new/")


def test_hostile_strings_do_not_execute(browser, pages, shots):
    assert _load(browser, pages["hostile"]) == []
    assert browser.execute_script("return window.__pwned === undefined")
    assert browser.find_elements(By.CSS_SELECTOR, "img") == []
    assert "<script>alert('name')</script>" in browser.find_element(By.ID, "cases").text
    _screenshot(browser, shots, "hostile.png")


def test_dashboard_index_draws_charts_filters_and_links(browser, pages, shots):
    site = pages["site"]
    assert _load(browser, site / "index.html") == []
    assert browser.find_element(By.ID, "synthetic").is_displayed()
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.ts")) == 8
    assert browser.find_elements(By.CSS_SELECTOR, "svg.ts circle.alert"), "the injected step shows as alert points"
    _screenshot(browser, shots, "dashboard.png")
    bar = browser.find_element(By.ID, "filters")
    bar.find_element(By.CSS_SELECTOR, "input[type=search]").send_keys("synth-001")
    assert [r.text.split()[0] for r in _visible_rows(browser, "workloads")] == ["synth-001"]
    _load(browser, site / "index.html")
    bar = browser.find_element(By.ID, "filters")
    Select(bar.find_element(By.CSS_SELECTOR, "select[data-key=compiler]")).select_by_visible_text("inductor")
    cards = [c for c in browser.find_elements(By.CSS_SELECTOR, "section.card") if c.is_displayed()]
    assert [c.get_attribute("data-compiler") for c in cards] == ["inductor"]
    chart = cards[0].find_element(By.CSS_SELECTOR, "svg.ts")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", chart)
    # chromedriver cannot target an SVG <circle> itself: click the chart at the latest point's position
    dx, dy = browser.execute_script(
        "const c = arguments[0].querySelectorAll('a circle'), p = c[c.length - 1].getBoundingClientRect(),"
        " s = arguments[0].getBoundingClientRect();"
        "return [p.x + p.width / 2 - (s.x + s.width / 2), p.y + p.height / 2 - (s.y + s.height / 2)];", chart)
    ActionChains(browser).move_to_element_with_offset(chart, round(dx), round(dy)).click().perform()
    assert browser.title.startswith("compilebench report") and "/runs/" in browser.current_url
    assert browser.find_elements(By.CSS_SELECTOR, "figure.chart svg")  # the latest night's report has charts


def test_dashboard_regressions_and_workload_pages(browser, pages, shots):
    site = pages["site"]
    assert _load(browser, site / "regressions.html") == []
    rows = _visible_rows(browser, "regressions")
    assert any("synth-001/" in r.text for r in rows)
    _screenshot(browser, shots, "regressions.png")
    workload = next((site / "workloads").glob("synth-001-*.html"))
    assert _load(browser, workload) == []
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.ts")) == 2 * 10  # two cases x every metric
    hostile_page = next(p for p in (site / "workloads").glob("*.html") if "img" in p.name)
    assert _load(browser, hostile_page) == [] and browser.find_elements(By.CSS_SELECTOR, "img") == []


@pytest.mark.parametrize("page", ["index.html", "regressions.html", "report"])
def test_phone_sized_screen_has_no_page_wide_horizontal_scroll(browser, pages, shots, page):
    path = pages["report"] if page == "report" else pages["site"] / page
    assert _load(browser, path, width=390, height=844) == []
    overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, f"{page} is {overflow}px wider than a phone screen"
    _screenshot(browser, shots, f"phone-{page.replace('.html', '')}.png")
