"""See why (issue 16): traces per case, cache-hit accounting, graph-break cost, host memory
during compile, warm compile. Unit tests on synthetic inputs first, then one real CPU run of a
tiny workload with a known break pattern (a cold and a warm worker process)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.analysis.compare import compare_runs
from harness.analysis.thresholds import config_from_dict
from harness.measure.break_cost import NO_BREAK, Span, attribute, merge_into_reasons, union_us
from harness.measure.compile_metrics import cache_layers, layers_hit
from harness.model.schema import Case, Record, Run
from harness.report.report import grouped_reasons, render_report
from harness.run import traces
from harness.run.runner import merge_warm_compile

DIAG_WORKLOADS = str(Path(__file__).parent / "workloads" / "diagnostic_cases.py")
FAST = {"min_time_s": 0.05, "min_samples": 5, "max_samples": 30, "warmup": 1, "max_time_s": 3.0}
CASE = Case("w", "forward", "inductor", "cpu", "float32", 2, "tiny")


# ---------------------------------------------------------------- graph-break cost (synthetic)

def test_union_counts_nested_and_overlapping_spans_once():
    assert union_us([Span("a", 0, 10), Span("b", 2, 5), Span("c", 8, 12)]) == 12


def test_break_cost_goes_to_the_break_that_ended_the_graph():
    # forward (0/0) runs its graph, breaks at line 8 (costly), calls resume_at_8 (1/0), which
    # breaks at line 11 (cheap, twice per call: two calls profiled) and calls resume_at_11 (2/0)
    frames = {"0/0": ("forward", "m.py"), "1/0": ("torch_dynamo_resume_in_forward_at_8", "m.py"),
              "2/0": ("torch_dynamo_resume_in_forward_at_11", "m.py")}
    spans = []
    for t in (0, 1000):
        spans += [Span("Torch-Compiled Region: 0/0", t, t + 500), Span("CompiledFunction", t + 10, t + 60),
                  Span("Torch-Compiled Region: 1/0", t + 400, t + 499), Span("CompiledFunction", t + 405, t + 420),
                  Span("Torch-Compiled Region: 2/0", t + 450, t + 498), Span("CompiledFunction", t + 455, t + 490)]
    out = attribute(spans, frames, calls=2)
    by_loc = {b["location"]: b for b in out["breaks"]}
    assert [b["location"] for b in out["breaks"]] == ["m.py:8", "m.py:11", NO_BREAK]
    assert by_loc["m.py:8"]["eager_s_per_call"] == pytest.approx((500 - 50 - 99) / 1e6)
    assert by_loc["m.py:11"]["eager_s_per_call"] == pytest.approx((99 - 15 - 48) / 1e6)
    assert by_loc["m.py:8"]["runs_per_call"] == 1.0
    assert out["graph_s_per_call"] == pytest.approx((50 + 15 + 35) / 1e6)


def test_break_costs_join_the_logged_reasons_costliest_first():
    reasons = [{"reason": "print", "location": "m.py:11", "count": 5}, {"reason": "disable", "location": "m.py:8", "count": 1}]
    costs = {"breaks": [{"location": "m.py:8", "runs_per_call": 1.0, "eager_s_per_call": 0.002},
                        {"location": "m.py:11", "runs_per_call": 1.0, "eager_s_per_call": 0.00001}]}
    merged = merge_into_reasons(reasons, costs)
    assert [m["location"] for m in merged] == ["m.py:8", "m.py:11"]
    records = [Record(CASE, "ok", graph_break_reasons=merged)]
    assert [g["location"] for g in grouped_reasons(records, "graph_break_reasons")] == ["m.py:8", "m.py:11"]


# ---------------------------------------------------------------- cache layers (synthetic)

def test_cache_layers_count_hits_misses_bypasses_with_reasons():
    metrics = [SimpleNamespace(distributed_ephemeral_timeout_us=1_500_000), SimpleNamespace()]
    counters = {"inductor": {"fxgraph_cache_hit": 2, "fxgraph_cache_bypass": 1},
                "aot_autograd": {"autograd_cache_miss": 2}}
    layers = cache_layers(metrics, counters, {"fx_graph": Counter({"unsupported op": 1})}, {"hit": 0, "miss": 1})
    assert layers["fx_graph"] | {"enabled": None} == {"enabled": None, "hits": 2, "misses": 0, "bypasses": 1,
                                                      "bypass_reasons": [{"reason": "unsupported op", "count": 1}],
                                                      "saved_s": 1.5}
    assert layers["aot_autograd"]["misses"] == 2 and layers["aot_autograd"]["saved_s"] == 0.0
    assert layers["autotune"]["misses"] == 1
    assert layers_hit(layers) == ["fx_graph"]
    assert layers_hit({**layers, "mega_cache": {"used": True}}) == ["mega_cache", "fx_graph"]


def test_warm_compile_merges_into_the_cold_record_and_a_failure_is_a_note():
    cold = Record(CASE, "ok", metrics={"compile_time_s": 10.0})
    warm = Record(CASE, "ok", metrics={"compile_time_s": 2.5, "cache_layers": {"fx_graph": {"hits": 3}}})
    merge_warm_compile(cold, warm)
    assert cold.metrics["warm_compile_time_s"] == 2.5
    assert cold.metrics["warm_compile"]["saved_s"] == 7.5 and cold.metrics["warm_compile"]["layers_hit"] == ["fx_graph"]
    cold2 = Record(CASE, "ok", metrics={"compile_time_s": 10.0})
    merge_warm_compile(cold2, Record(CASE, "crashed", error={"type": "Crash", "message": "killed"}))
    assert cold2.status == "ok" and "warm_compile_time_s" not in cold2.metrics
    assert cold2.metrics["warm_compile"]["status"] == "crashed" and "warm compile crashed" in cold2.notes[0]


# ---------------------------------------------------------------- host memory in compare

def _run(rss: int) -> Run:
    rec = Record(CASE, "ok", metrics={"compile_peak_rss_bytes": rss})
    return Run("r", "2026-01-01T00:00:00", "", {}, {}, [rec])


def test_compile_host_memory_is_gated_by_the_memory_threshold():
    verdict = compare_runs([_run(1_000_000_000)], [_run(1_300_000_000)]).cases[0].metric("compile_host_memory")
    assert verdict.verdict == "regression"
    loose = config_from_dict({"defaults": {"peak_memory": "50%"}})
    assert compare_runs([_run(1_000_000_000)], [_run(1_300_000_000)], loose).cases[0].metric(
        "compile_host_memory").verdict == "unchanged"
    own = config_from_dict({"defaults": {"peak_memory": "50%", "compile_host_memory": "5%"}})
    assert compare_runs([_run(1_000_000_000)], [_run(1_300_000_000)], own).cases[0].metric(
        "compile_host_memory").verdict == "regression"


# ---------------------------------------------------------------- traces (no worker)

def test_trace_cap_cuts_at_a_line_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(traces, "tlparse_executable", lambda: None)
    log = tmp_path / "dedicated_log_torch_trace_x.log"
    log.write_text("".join(f"line {i:06d}\n" for i in range(20000)))  # 240 kB
    info = traces.finish_trace(tmp_path, max_bytes=100_000)
    assert info["truncated"] and log.stat().st_size <= 100_000 and log.read_text().endswith("\n")
    assert any("truncated" in n for n in info["notes"])
    assert info["html"] is None and any("tlparse is not installed" in n for n in info["notes"])


def test_a_missing_trace_is_a_note_never_an_error(tmp_path):
    rec = Record(CASE, "ok")
    traces.attach_trace(rec, tmp_path / "never-written", 1 << 20)
    assert rec.status == "ok" and rec.metrics["trace"]["html"] is None
    assert "no TORCH_TRACE log" in rec.notes[0]


def test_report_links_each_case_trace_relative_to_the_report(tmp_path):
    html = tmp_path / "traces" / "run" / "case" / "tlparse" / "index.html"
    rec = Record(CASE, "ok", metrics={"trace": {"dir": str(html.parent.parent), "html": str(html), "notes": []}})
    page = render_report(Run("run", "2026-01-01T00:00:00", "", {}, {}, [rec]), charts=False, base_dir=tmp_path)
    assert 'href="traces/run/case/tlparse/index.html"' in page


# ---------------------------------------------------------------- the real thing, on CPU

@pytest.fixture(scope="module")
def diag_run(tmp_path_factory):
    from harness.run.runner import RunOptions, execute

    out = tmp_path_factory.mktemp("diag")
    run = execute(RunOptions(out_dir=str(out), policy=FAST, devices=["cpu"], workloads=["costly-breaks"],
                             workload_files=[DIAG_WORKLOADS], compilers=["inductor"], ingest=False,
                             trace=True, warm_compile=True))
    return run, out


def _line_of(marker: str) -> int:
    lines = Path(DIAG_WORKLOADS).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if marker in text)


@pytest.mark.slow
def test_known_breaks_rank_by_cost(diag_run):
    run, _ = diag_run
    rec = run.records[0]
    assert rec.status == "ok", rec.error
    ranked = [b["location"] for b in rec.metrics["graph_break_cost"]["breaks"] if b["location"] != NO_BREAK]
    assert [int(loc.rsplit(":", 1)[1]) for loc in ranked] == [_line_of("COSTLY_BREAK"), _line_of("CHEAP_BREAK")]
    assert rec.graph_break_reasons[0]["eager_s_per_call"] > rec.graph_break_reasons[1]["eager_s_per_call"] > 0
    assert all(b["runs_per_call"] == 1.0 for b in rec.metrics["graph_break_cost"]["breaks"])
    assert [g["ops"] for g in rec.metrics["ops_per_graph"]] and rec.metrics["calls_captured"] > 0


@pytest.mark.slow
def test_host_memory_during_compile_is_recorded(diag_run):
    m = diag_run[0].records[0].metrics
    assert m["compile_peak_rss_bytes"] >= m["compile_rss_before_bytes"] > 0
    assert m["compile_device_peak_bytes"] is None  # CPU: no device allocator, never a fake 0


@pytest.mark.slow
def test_warm_compile_hits_the_fx_graph_cache(diag_run):
    m = diag_run[0].records[0].metrics
    assert m["warm_compile"]["status"] == "ok", m["warm_compile"]
    cold, warm = m["cache_layers"]["fx_graph"], m["warm_compile"]["cache_layers"]["fx_graph"]
    assert cold["hits"] == 0 and cold["misses"] >= 1, cold
    assert warm["hits"] >= 1 and warm["saved_s"] > 0, warm
    assert "fx_graph" in m["warm_compile"]["layers_hit"]
    # timing only loosely: on a loaded 2-core box one process can stall for seconds
    assert m["warm_compile_time_s"] > 0 and m["warm_compile"]["saved_s"] is not None


@pytest.mark.slow
def test_trace_folder_exists_and_the_report_links_it(diag_run, tmp_path):
    from harness.report.report import write_report

    run, out = diag_run
    rec = run.records[0]
    trace_dir = out / "traces" / run.run_id / traces.case_slug(rec.case_id)
    assert trace_dir.is_dir() and list(trace_dir.glob("*.log"))
    assert rec.metrics["trace"]["bytes"] > 0 and not rec.metrics["trace"]["truncated"]
    page = write_report(run, out / "report.html").read_text()
    links = re.findall(r'<a href="([^"]+)">trace</a>', page)
    assert links and (out / links[0]).exists()


@pytest.mark.slow
@pytest.mark.skipif(traces.tlparse_executable() is None, reason="tlparse is not installed (pip install tlparse)")
def test_tlparse_html_is_rendered_when_installed(diag_run):
    info = diag_run[0].records[0].metrics["trace"]
    assert info["html"] and Path(info["html"]).name == "index.html" and Path(info["html"]).exists()
    assert "<html" in Path(info["html"]).read_text().lower()


def test_bisect_measurements_carry_the_trace_option(tmp_path, monkeypatch):
    import harness.run.runner as runner
    from harness.cli.envs import _measurer
    from harness.run.runner import RunOptions

    seen = []
    monkeypatch.setattr(runner, "make_spec", lambda *a, **k: {})
    monkeypatch.setattr(runner, "run_worker", lambda case, spec, timeout, **kw: seen.append(kw) or Record(CASE, "ok"))
    opts = RunOptions(out_dir=str(tmp_path), trace=True, trace_max_mb=2)
    kept = [0]  # measurements already in the bisect's state file
    measure = _measurer(CASE, opts, {}, 60.0, [SimpleNamespace(name="torch 2.13", python="py", torch="2.13")],
                        lambda: kept[0])
    measure(0)
    assert seen[0]["trace"].root == tmp_path.resolve() / "traces" / "bisect-torch_2.13-m01"
    assert seen[0]["trace"].max_bytes == 2 << 20
    # a resumed bisect (a fresh measurer over a state holding 4) continues at m05, never m01 again
    kept[0] = 4
    _measurer(CASE, opts, {}, 60.0, [SimpleNamespace(name="torch 2.13", python="py", torch="2.13")],
              lambda: kept[0])(0)
    assert seen[1]["trace"].root == tmp_path.resolve() / "traces" / "bisect-torch_2.13-m05"


def test_the_cold_start_table_says_which_layer_hit():
    from rich.console import Console

    from harness.experiments.lifecycle import coldstart_table

    layers = {"fx_graph": {"hits": 3, "misses": 0, "bypasses": 0, "saved_s": 4.2},
              "aot_autograd": {"hits": 0, "misses": 2, "bypasses": 1, "bypass_reasons": [{"reason": "no grad"}]}}
    result = {"config": {"workload": "w", "size": "tiny", "batch_size": 2, "device": "cpu", "dtype": "float32"},
              "rows": [{"row": "jit_warm", "status": "ok", "ttfr_s": 1.0, "cache_layers": layers}]}
    console = Console(width=250, record=True)
    console.print(coldstart_table(result))
    text = console.export_text()
    assert "fx 3/3, aot 0/3 (bypass: no grad)" in text and "fx_graph" in text and "4.200" in text


def test_bad_trace_options_are_one_line_errors(capsys):
    from harness.cli.main import main

    assert main(["run", "-w", "mlp-deep", "--trace-max-mb", "8"]) == 2
    assert "--trace-max-mb only applies with --trace" in capsys.readouterr().err
    assert main(["run", "-w", "mlp-deep", "--trace", "--trace-max-mb", "0"]) == 2
    assert "must be a positive number" in capsys.readouterr().err


def test_ab_side_rounds_trace_under_their_own_run_ids(tmp_path, monkeypatch):
    import harness.experiments.ab as ab
    from harness.run.runner import RunOptions

    seen = []
    monkeypatch.setattr(ab, "run_worker", lambda case, spec, timeout, **kw: seen.append(kw["trace"]) or Record(case, "ok"))
    run_opts = RunOptions(workloads=["mlp-classic"], scenarios=["forward"], compilers=["inductor"], devices=["cpu"],
                          sizes=["tiny"], out_dir=str(tmp_path), trace=True, warm_compile=True)
    base, head, _ = ab.run_ab(ab.AbOptions(run_opts, "py-a", "py-b", rounds=1), environments={"base": {}, "head": {}})
    roots = {t.root.name for t in seen}
    assert roots == {f"{base[0].run_id}", f"{head[0].run_id}"}
    assert base[0].config["trace"]["dir"].endswith(base[0].run_id) and base[0].config["warm_compile"] is True


def test_a_backward_compile_entry_does_not_hide_its_frame():
    from harness.measure.break_cost import frames_by_compile_id

    metrics = [SimpleNamespace(compile_id="1/0", co_name="torch_dynamo_resume_in_f_at_7", co_filename="m.py"),
               SimpleNamespace(compile_id="1/0", co_name=None, co_filename=None)]  # its lazy backward
    assert frames_by_compile_id(metrics) == {"1/0": ("torch_dynamo_resume_in_f_at_7", "m.py")}


def test_a_break_inside_torch_takes_the_cost_of_the_user_line_that_called_in_once():
    reasons = [{"reason": "a", "location": "torch/optim/optimizer.py:79", "user_location": "train.py:130", "count": 1},
               {"reason": "b", "location": "torch/optim/optimizer.py:79", "user_location": "train.py:130", "count": 1}]
    costs = {"breaks": [{"location": "train.py:130", "runs_per_call": 1.0, "eager_s_per_call": 0.001}]}
    merged = merge_into_reasons(reasons, costs)
    assert [m["eager_s_per_call"] for m in merged] == [0.001, None]
