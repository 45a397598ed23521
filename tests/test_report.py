"""The HTML run report: content, escaping, charts, --baseline verdicts and the CLI."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from harness.cli.main import main
from harness.model.schema import Case, Record, Run, save_run
from harness.report.charts import MAX_BAR_ROWS, report_charts, speedup_bars
from harness.report.report import compare_for_report, grouped_reasons, render_report, write_report
from harness.testing.synthetic_history import SyntheticSpec, synthetic_run

HOSTILE_NAME = "<script>alert('name')</script>$x$"
HOSTILE_MESSAGE = "</script><img src=x onerror=\"window.__pwned=1\">"


def _run(cases: int = 6, **kw) -> Run:
    return synthetic_run(SyntheticSpec(cases=cases, **kw), night=0)


def hostile_run() -> Run:
    """A run whose workload name, reasons and exception carry markup (tests and the browser test)."""
    run = _run(cases=4)
    ok = run.records[0]
    bad_case = replace(ok.case, workload=HOSTILE_NAME)
    hostile_ok = replace(ok, case=bad_case, graph_break_reasons=[
        {"reason": HOSTILE_MESSAGE, "location": "<b>model.py</b>:3", "count": 2, "user_stack": HOSTILE_MESSAGE}],
        recompile_reasons=[{"function": "<i>f</i>", "location": "m.py:1", "reason": HOSTILE_MESSAGE}])
    failed = Record(replace(bad_case, compiler="inductor-max-autotune"), "fail_compile",
                    error={"type": "<svg onload=alert(1)>", "message": HOSTILE_MESSAGE, "traceback": HOSTILE_MESSAGE,
                           "phase": "compile"})
    run.records = [hostile_ok, failed, *run.records[1:]]
    run.label = HOSTILE_MESSAGE
    run.environment["host"] = HOSTILE_MESSAGE
    return run


def test_report_has_headline_table_charts_and_environment():
    run = _run(cases=6)
    html = render_report(run)
    assert html.count("<svg") == 4  # speedup, compile-vs-speedup, memory, latency
    for key in ("chart-speedup", "chart-compile-vs-speedup", "chart-memory", "chart-latency"):
        assert f'id="{key}"' in html
    cases_table = html.split('<table id="cases"', 1)[1].split("</table>", 1)[0]
    assert cases_table.count("<tr data-status=") == len(run.records)
    assert "samples/s" in cases_table  # throughput in the workload's unit
    assert 'id="synthetic"' in html and "SYNTHETIC" in html
    # self-contained: no CDN, no external script, stylesheet, image or font
    assert not re.search(r"""(src|href)=["']?(https?:)?//|<link |@import|url\(["']?https?:""", html)


def test_headline_counts_failures_by_status():
    run = _run(cases=6)
    run.records[0] = Record(run.records[0].case, "timeout", error={"type": "Timeout", "message": "too slow"})
    html = render_report(run)
    headline = html.split('<table id="headline"', 1)[1].split("</table>", 1)[0]
    assert "timeout: 1" in headline
    assert re.search(r"\d+%", headline)


def test_every_hostile_string_is_escaped():
    html = render_report(hostile_run(), baseline=_run(cases=4))
    # the only script blocks are ours; no payload survives as markup anywhere
    assert html.count("<script") == 1 and html.count("</script>") == 1
    assert "<img" not in html and "<svg onload" not in html and "<b>model.py" not in html
    assert "&lt;script&gt;alert(&#39;name&#39;)&lt;/script&gt;" in html
    assert "&lt;/script&gt;&lt;img src=x onerror=&#34;window.__pwned=1&#34;&gt;" in html


def test_hostile_names_in_charts_are_xml_escaped_and_dollar_is_not_mathtext():
    charts = report_charts(hostile_run().records)
    svg = "".join(c.svg for c in charts)
    assert "<script" not in svg and "&lt;script&gt;" in svg
    assert "$x$" in svg  # a dollar sign in a name stays text (mathtext off), never a parse error


def test_big_runs_cap_bar_chart_rows_and_say_so():
    chart = speedup_bars(_run(cases=2 * (MAX_BAR_ROWS + 10), compilers=("inductor",)).records)
    assert chart is not None and "showing the 60 lowest-speedup of 140 rows" in chart.note


def test_grouped_reasons_count_across_cases():
    run = _run(cases=3)
    for r in run.records:
        r.graph_break_reasons = [{"reason": "print()", "location": "m.py:4", "count": 2}]
    groups = grouped_reasons(run.records, "graph_break_reasons")
    assert len(groups) == 1 and groups[0]["count"] == 6 and len(groups[0]["cases"]) == 3


def _scale_compiled(r: Record, factor: float) -> None:
    """Make the compiled variant `factor` times faster (raw samples and summary metrics alike)."""
    r.compiled = dict(r.compiled, samples_s=[t / factor for t in r.compiled["samples_s"]])
    r.metrics = dict(r.metrics, speedup=r.metrics["speedup"] * factor, latency_s=r.metrics["latency_s"] / factor)


def _baseline_pair() -> tuple[Run, Run]:
    """Base and head from the same seed (identical records), then: one case 30% slower, one
    30% faster, one crashed, one dropped and one new."""
    base = _run(cases=6)
    head = _run(cases=6)
    head.run_id = "head"
    recs = head.records
    _scale_compiled(recs[0], 0.7)
    _scale_compiled(recs[1], 1.3)
    recs[2] = Record(recs[2].case, "crashed", error={"type": "Crash", "message": "segfault"})
    new_case = replace(recs[5].case, workload="brand-new")
    head.records = [*recs[:5], replace(recs[5], case=new_case)]
    return base, head


def test_baseline_verdicts_come_from_compare_worst_first():
    base, head = _baseline_pair()
    deltas, warnings = compare_for_report(base, head)
    verdicts = [d.verdict for d in deltas]
    assert warnings == []
    assert verdicts[0] == "regression"
    assert verdicts.index("regression") < verdicts.index("now failing") < verdicts.index("improvement")
    assert sorted(verdicts) == sorted(["regression", "improvement", "now failing", "unchanged", "unchanged",
                                       "missing", "new"])
    reg = deltas[0]
    assert reg.changes["speedup"] == pytest.approx(-0.3, abs=0.02)
    assert any(r.startswith("speedup -") and "p=" in r for r in reg.reasons)


def test_baseline_from_another_machine_renders_with_a_warning():
    base, head = _baseline_pair()
    base.environment = dict(base.environment, cpu_model="Other CPU")
    html = render_report(head, baseline=base)
    assert 'class="banner compare-warning"' in html and "Other CPU" in html


def test_report_with_baseline_colours_rows_by_verdict():
    base, head = _baseline_pair()
    html = render_report(head, baseline=base)
    deltas = html.split('<table id="deltas"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr class="(v-[a-z-]+)"', deltas)
    assert rows[0] == "v-regression" and "v-improvement" in rows and "v-now-failing" in rows
    assert re.search(r"-(29|30|31)\.\d%", deltas)


def test_cli_report_with_baseline(results_dir, tmp_path):
    base, head = _baseline_pair()
    save_run(base, results_dir / "runs" / f"{base.run_id}.json")
    save_run(head, results_dir / "runs" / "head.json")
    out = tmp_path / "r.html"
    rc = main(["report", "head", "--baseline", base.run_id, "--out", str(results_dir), "-o", str(out)])
    assert rc == 0 and 'id="deltas"' in out.read_text()
    assert main(["report", "head", "-o", str(out), "--out", str(results_dir)]) == 0
    assert 'id="deltas"' not in out.read_text()


def test_cli_report_bad_baseline_is_a_one_line_error(results_dir, tmp_path, capsys):
    save_run(_run(cases=2), results_dir / "runs" / "head.json")
    rc = main(["report", "head", "--baseline", "nope", "--out", str(results_dir), "-o", str(tmp_path / "r.html")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("compilebench: error:") and "\n" not in err


def test_write_report_is_atomic_and_returns_path(tmp_path):
    path = write_report(_run(cases=2), tmp_path / "sub" / "r.html")
    assert path.is_file() and list(path.parent.iterdir()) == [path]


def test_failed_case_without_metrics_renders():
    case = Case("w", "forward", "inductor", "cpu", "float32", 1, "tiny")
    run = Run("r", "2026-01-01T00:00:00", "", {}, {}, [Record(case, "oom", error={"type": "OOM", "message": "m"})])
    html = render_report(run)
    assert "oom" in html and html.count("<svg") == 0


@pytest.mark.slow
def test_report_from_a_real_cpu_run(results_dir, tmp_path):
    """The real path: a tiny MLP measured by the worker, then reported (CPU, ~20-40 s)."""
    out = tmp_path / "real.html"
    # spawned: for one case that costs less than starting a preloaded server (test_forkserver holds the two paths equal)
    rc = main(["run", "-w", "mlp-classic", "--scenario", "forward", "--min-time", "0.05", "--min-samples", "10",
               "--out", str(results_dir), "--no-ingest", "--report", str(out), "--no-preload"])
    assert rc == 0
    html = out.read_text()
    assert html.count("<svg") == 4 and "mlp-classic/forward/inductor/cpu" in html


def test_headline_geomean_only_over_cases_passing_on_both_sides():
    """Against a baseline where one case failed, that case leaves the geomean (named), so the
    headline moves only with cases measured on both sides."""
    import numpy as np

    from harness.report.report import headline
    from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record

    rng = np.random.default_rng(0)
    cases = [synthetic_case(i) for i in range(3)]
    head = Run("h", "2026-01-01T00:00:00+00:00", "h", dict(SYNTHETIC_ENV), {},
               [synthetic_record(c, rng, compiled_median=5e-4 / (1 + i)) for i, c in enumerate(cases)])
    base = Run("b", "2026-01-01T00:00:00+00:00", "b", dict(SYNTHETIC_ENV), {},
               [synthetic_record(cases[0], rng), synthetic_record(cases[1], rng), synthetic_record(cases[2], rng,
                                                                                                  status="fail_run")])
    alone, = headline(head)
    both, = headline(head, base)
    assert alone.geomean_cases == 3 and both.geomean_cases == 2
    assert [(e.case_id, e.reason) for e in both.geomean_excluded] == [(cases[2].case_id, "fail_run in the baseline")]
    assert both.geomean_speedup == pytest.approx((2.0 * 4.0) ** 0.5, rel=0.05)
    assert "excluded 1" in render_report(head, base)
