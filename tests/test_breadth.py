"""The breadth headline (harness/analysis/breadth.py) in every view: report, show, compare
summary; families; probe factors per process in the report. SYNTHETIC runs of 1,000+ cases."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from harness.analysis.breadth import (
    FAILURE_ORDER,
    breadth_rows,
    compare_markdown_lines,
    compare_rows,
    family_of,
    markdown_lines,
    one_per_family,
    workload_family,
)
from harness.analysis.compare import compare_runs
from harness.cli.main import main
from harness.model.schema import Case, Record, Run, save_run
from harness.model.stats import geomean
from harness.report.gate_output import markdown
from harness.report.report import PROBE_FLAG, probe_factors_by_case, render_report
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record
from harness.testing.synthetic_breadth import COMPILERS, SUITES, breadth_run


@pytest.fixture(scope="module")
def big() -> Run:
    return breadth_run(1200, seed=3)


@pytest.mark.parametrize("name, suite, family", [
    ("llama-3.1-8b", "", "llama"), ("resnet50", "timm", "resnet"), ("vit_base_patch16_224", "timm", "vit"),
    ("BertForMaskedLM", "hf", "bert"), ("MBartForCausalLM", "hf", "mbart"), ("GPT2LMHeadModel", "hf", "gpt2"),
    ("google/gemma-2-2b", "hf", "gemma"), ("Qwen/Qwen3-0.6B", "hf", "qwen"), ("zoo-bert", "zoo", "bert"),
    ("mlp-classic", "smoke", "mlp"), ("123", "", "123"), ("hf-MBartForCausalLM", "hf", "mbart"),
    ("zoo-albert-masked", "transformers-zoo", "albert"), ("timm-resnet50d", "timm-2.11", "resnet"),
    ("timm-convnextv2_atto", "timm", "convnext"), ("llama-3.1-8b", "llama", "llama"),
    # a run mixing the breadth suites' workloads (breadth-ci, or an ad-hoc -w list)
    ("hf-BertForMaskedLM", "breadth-ci", "bert"), ("zoo-llama-causal", "breadth-ci", "llama"),
    ("diffusers-dit-xl2", "breadth-ci", "dit"), ("hf-whisper-tiny", "", "whisper"),
])
def test_workload_family(name, suite, family):
    assert workload_family(name, suite) == family


def test_recorded_family_wins_over_the_name():
    rec = synthetic_record(synthetic_case(0, workload="resnet"), np.random.default_rng(0))
    assert family_of(rec) == "resnet"
    rec.metrics["family"] = "convnets"
    assert family_of(rec) == "convnets"


def test_rows_per_suite_and_compiler_add_up(big):
    rows = breadth_rows(big.records)
    assert {(r.suite, r.compiler) for r in rows} == {(s, c) for s in SUITES for c in COMPILERS}
    assert sum(r.cases for r in rows) == 1200 and sum(r.ok for r in rows) == sum(x.status == "ok" for x in big.records)
    for row in rows:
        recs = [x for x in big.records if x.case.suite == row.suite and x.case.compiler == row.compiler]
        ok = [x for x in recs if x.status == "ok"]
        assert row.pass_rate == pytest.approx(len(ok) / len(recs))
        assert row.geomean_speedup == pytest.approx(geomean([x.metrics["speedup"] for x in ok]))
        assert row.mean_compile_s == pytest.approx(np.mean([x.metrics["compile_time_s"] for x in ok]))
        assert row.graph_breaks == sum(x.metrics["graph_breaks"] for x in ok)
        assert row.memory_compression == pytest.approx(1.0)  # the synthetic peaks are equal
        assert sum(s.count for s in row.failures) == len(recs) - len(ok)
        assert [s.status for s in row.failures] == sorted((s.status for s in row.failures), key=FAILURE_ORDER.index)


def test_failures_grouped_by_status_then_reason(big):
    failures = {s.status: s for row in breadth_rows(big.records) for s in row.failures if row.suite == "hf"
                and row.compiler == "inductor"}
    assert set(failures) == {"crashed", "timeout", "oom", "fail_compile", "fail_run", "fail_accuracy", "skipped"}
    assert {g.reason for g in failures["fail_compile"].groups} == {"BackendCompilerFailed", "Unsupported"}
    assert {g.reason for g in failures["skipped"].groups} == {
        "needs a tokenizer file, which the harness cannot build offline", "audio inputs are not built yet"}
    counts = [g.count for g in failures["skipped"].groups]
    assert counts == sorted(counts, reverse=True)


def test_geomean_against_a_baseline_only_counts_cases_ok_on_both_sides():
    rng = np.random.default_rng(0)
    cases = [synthetic_case(i) for i in range(3)]
    head = [synthetic_record(c, rng, compiled_median=5e-4 / (1 + i)) for i, c in enumerate(cases)]
    row, = breadth_rows(head, {cases[0].case_id: "ok", cases[1].case_id: "ok", cases[2].case_id: "fail_run"})
    assert row.geomean_cases == 2 and row.ok == 3
    assert [(e.case_id, e.reason) for e in row.geomean_excluded] == [(cases[2].case_id, "fail_run in the baseline")]


def test_markdown_lines_escape_and_count(big):
    lines = markdown_lines(breadth_rows(big.records))
    assert lines[0].startswith("### ") and len([x for x in lines if x.startswith("| hf |")]) == 2
    hostile = Record.failure(Case("a|<b>", "forward", "inductor", "cpu", "float32", 1, "tiny", "s|x"), "skipped",
                             "Skipped", "needs <script>")
    text = "\n".join(markdown_lines(breadth_rows([hostile])))
    assert "<script>" not in text and "s\\|x" in text and "0% (0/1)" in text


def test_report_headline_and_filters_at_breadth(big):
    html = render_report(big, charts=False)
    headline = html.split('<table id="headline"', 1)[1].split("</table>", 1)[0]
    assert headline.count("<tr data-suite=") == len(SUITES) * len(COMPILERS)
    assert "fail_compile: " in headline and "BackendCompilerFailed" in headline and "audio inputs" in headline
    cases = html.split('<table id="cases"', 1)[1].split("</table>", 1)[0]
    assert cases.count("<tr data-status=") == 1200
    assert 'data-suite="timm"' in cases and 'data-family="resnet"' in cases
    for key in ("status", "compiler", "suite", "family"):
        assert f'<select data-key="{key}"' in html


def test_compare_summary_has_the_breadth_table(big):
    base = big
    head = breadth_run(1200, seed=3, run_id="head", failing=frozenset({big.records[10].case_id}))
    cmp = compare_runs([base], [head])
    rows = {(r.suite, r.compiler): r for r in compare_rows(cmp)}
    changed = big.records[10]
    row = rows[(changed.case.suite, changed.case.compiler)]
    if changed.status == "ok":
        assert row.now_failing == (changed.case_id,) and row.ok_head == row.ok_base - 1
    assert sum(r.cases for r in rows.values()) == 1200
    text = markdown(cmp, cmp.failing())
    assert "### Pass rate and geomean by suite" in text
    assert compare_markdown_lines(cmp)[0] in text


def test_show_prints_the_breadth_headline(big, tmp_path, capsys):
    small = breadth_run(48, seed=1, run_id="small")
    path = save_run(small, tmp_path / "small.json")
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    # not a terminal: plain aligned text (harness/report/display.py print_table), no box characters
    assert "headline by suite" in out and re.search(r"transformers-zoo\s+cpu\s+aot_eager", out)


def test_one_per_family_picks_a_model_of_each_family(big):
    workloads = {r.case.workload for r in big.records}
    picked = one_per_family(workloads)
    families = {workload_family(w) for w in workloads}
    assert len(picked) == len(families) and {workload_family(w) for w in picked} == families
    assert len(one_per_family(workloads, per_family=2)) <= 2 * len(families)
    few = one_per_family(workloads, limit=5)
    assert len(few) == 5 and len({workload_family(w) for w in few}) == 5


# ---------------------------------------------------------------- machine probe per process

def _probed_run(medians: list[float]) -> Run:
    rng = np.random.default_rng(1)
    recs = [synthetic_record(synthetic_case(i), rng, probe_median=m, spread=0.01) for i, m in enumerate(medians)]
    return Run("p", "2026-01-01T00:00:00+00:00", "p", dict(SYNTHETIC_ENV), {}, recs)


def test_probe_factor_per_process_relative_to_the_median():
    run = _probed_run([1e-4, 1e-4, 1.02e-4, 0.99e-4, 1.7e-4])
    factors = probe_factors_by_case(run.records)
    slow = factors[run.records[4].case_id]
    assert slow.factor == pytest.approx(1.7, rel=0.03) and slow.flagged
    assert all(not factors[r.case_id].flagged for r in run.records[:4])
    assert math.log(slow.factor) > math.log1p(PROBE_FLAG)


def test_report_shows_the_probe_next_to_latency_and_flags_the_outlier():
    run = _probed_run([1e-4, 1e-4, 1.02e-4, 0.99e-4, 1.7e-4])
    run.records.append(synthetic_record(synthetic_case(9), np.random.default_rng(2)))  # no probe: '-'
    html = render_report(run, charts=False)
    header = html.split('<table id="cases"', 1)[1].split("</thead>", 1)[0]
    assert re.search(r"<th>latency</th><th[^>]*>machine</th>", header)
    assert html.count('class="bad probe-flag"') == 1 and 'id="probe-flagged"' in html and "1 case(s)" in html
    slow_row = [r for r in html.split("<tr data-status=") if run.records[4].case_id in r][0]
    assert re.search(r'class="bad probe-flag">1\.[67]\dx', slow_row)


def test_report_without_probes_has_no_machine_column():
    rng = np.random.default_rng(0)
    run = Run("n", "2026-01-01T00:00:00+00:00", "n", dict(SYNTHETIC_ENV), {},
              [synthetic_record(synthetic_case(i), rng) for i in range(3)])
    html = render_report(run, charts=False)
    assert ">machine</th>" not in html.split('<table id="cases"', 1)[1].split("</thead>", 1)[0]
    assert "probe-flagged" not in html


def test_breadth_run_flags_its_slow_hosts(big):
    factors = probe_factors_by_case(big.records)
    flagged = {cid for cid, f in factors.items() if f.flagged}
    slow = {r.case_id for r in big.records[:5] if r.status == "ok"}
    assert flagged == slow and slow


def test_the_breadth_geomean_leaves_contended_cases_out_as_compare_does():
    """A head timed next to a CPU hog (speedup x0.3 on 1 of 3 cases, contended): compare's own
    geomean leaves it out, and so must the breadth summary, saying how many it left out."""
    rng = np.random.default_rng(5)
    cases = [synthetic_case(i) for i in range(3)]
    base = [synthetic_record(c, rng) for c in cases]
    head = [synthetic_record(c, rng) for c in cases[:2]]
    hogged = synthetic_record(cases[2], rng, compiled_median=5e-4 * 8)
    hogged.metrics["contention"] = {"contended": True, "cpu_wait_fraction": 0.6, "threads": 2}
    run = lambda rid, recs: Run(rid, "2026-01-01T00:00:00+00:00", rid, dict(SYNTHETIC_ENV), {}, recs)  # noqa: E731
    cmp = compare_runs([run("b", base)], [run("h", [*head, hogged])])
    (row,) = compare_rows(cmp)
    assert row.both_ok == 2 and row.contended_left_out == 1
    quiet = [c.metric("speedup").head for c in cmp.cases if c.case_id != cases[2].case_id]
    assert row.geomean_speedup_head == pytest.approx(geomean(quiet))
    assert cmp.geomeans()["cases"] == 2  # compare's own count, the same cases
    assert "(2; 1 contended left out)" in "\n".join(compare_markdown_lines(cmp))
