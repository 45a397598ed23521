"""The gate on real runs (CPU, tiny models): the committed smoke expected counts, a real
base-vs-head compare through the CLI, and the pytest-benchmark path end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.analysis.compare import MISSING, compare_runs
from harness.analysis.expected import DEFAULT_DIR, check
from harness.cli.main import main
from harness.interop.pytest_bench import import_file
from harness.run.forkserver import preloaded_workers
from harness.run.runner import RunOptions, execute

ROOT = Path(__file__).resolve().parent.parent
QUICK = {"min_time_s": 0.1, "min_samples": 10, "max_time_s": 2.0}


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """Base: the smoke suite's mlp-classic cases (forward + train). Head: forward only,
    measured again in a fresh process (forked from the same preloaded server: one import pass)."""
    out = tmp_path_factory.mktemp("gate-e2e")
    with preloaded_workers():
        base = execute(RunOptions(suite="smoke", workloads=["mlp-classic"], out_dir=str(out), policy=QUICK,
                                  ingest=False))
        head = execute(RunOptions(suite="smoke", workloads=["mlp-classic"], scenarios=["forward"], out_dir=str(out),
                                  policy=QUICK, ingest=False))
    return out, base, head


@pytest.mark.slow
def test_smoke_counts_match_the_committed_expected_file(real_runs):
    """compilebench's own CI gate: graph breaks, recompiles, unique graphs and accuracy of
    the smoke cases equal results/expected/smoke-cpu.json exactly."""
    _, base, _ = real_runs
    report = check(base, DEFAULT_DIR / "smoke-cpu.json")
    assert report.checked == 2 and report.new == []
    assert report.differences == [], report.differences
    assert main(["expected", "check", base.config["path"]]) == 0


@pytest.mark.slow
def test_real_compare_and_gate(real_runs, tmp_path):
    out, base, head = real_runs
    cmp = compare_runs([base], [head])
    by_id = {c.case_id: c for c in cmp.cases}
    assert by_id["mlp-classic/train/inductor/cpu/float32/bs16/tiny"].verdict == MISSING
    forward = by_id["mlp-classic/forward/inductor/cpu/float32/bs16/tiny"]
    exact = {m.metric: m for m in forward.metrics}
    # deterministic metrics of the same code: identical in two processes
    for name in ("graph_breaks", "recompiles", "accuracy"):
        assert exact[name].verdict == "unchanged" and exact[name].base == exact[name].head
    latency = exact["latency"]
    assert latency.n_base >= 10 and latency.n_head >= 10 and latency.base > 0
    # gate fails on the missing case; compare on exact metrics with the missing case warn-only passes
    md = tmp_path / "gate.md"
    assert main(["gate", base.config["path"], head.config["path"], "--markdown", str(md)]) == 1
    assert "Missing in head" in md.read_text()
    assert main(["compare", base.config["path"], head.config["path"], "--out", str(out),
                 "--metric", "graph_breaks,recompiles,accuracy", "--missing", "warn"]) == 0


@pytest.mark.slow
def test_pytest_benchmark_path(real_runs, tmp_path):
    """The smoke case as a pytest-benchmark test, its JSON ingested, compared with the
    runner's measurement of the same case on the exact metrics."""
    _, base, _ = real_runs
    bench = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "suites" / "test_bench_smoke.py"),
           "-k", "mlp-classic/forward", f"--benchmark-json={bench}", "--benchmark-save-data",
           "--benchmark-max-time=0.2", "--benchmark-min-rounds=10"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(bench.read_text())
    info = data["benchmarks"][0]["extra_info"]
    assert info["graph_breaks"] == 0 and info["accuracy"] == "pass" and info["compile_time_s"] > 0
    assert data["machine_info"]["compilebench_environment"]["torch_version"]
    run = import_file(bench)
    assert [r.case_id for r in run.records] == ["mlp-classic/forward/inductor/cpu/float32/bs16/tiny"]
    assert len(run.records[0].compiled["samples_s"]) >= 10
    cmp = compare_runs([base], [run], metrics=["graph_breaks", "recompiles", "accuracy"])
    forward = next(c for c in cmp.cases if c.case_id.startswith("mlp-classic/forward"))
    assert forward.verdict == "unchanged"


@pytest.mark.slow
def test_real_ab_session_then_noise(tmp_path):
    """`ab` with the same Python on both sides (an A/A) through the real runner: one round,
    side order, run files per side-round, a comparison, then `noise` over the session."""
    out, verdict = tmp_path / "results", tmp_path / "ab.json"
    rc = main(["ab", "--base-python", sys.executable, "--head-python", sys.executable, "-w", "mlp-classic",
               "--scenario", "forward", "--rounds", "1", "--min-time", "0.1", "--min-samples", "10",
               "--head-env", "COMPILEBENCH_AB_SIDE=head", "--out", str(out), "--json-file", str(verdict)])
    # an A/A on a shared machine may still trip a 5% threshold (1), or find its processes waiting on the run
    # queue (3, machine contended): data, not a crash; contended must then be what the records say
    assert rc in (0, 1, 3)
    (session,) = list((out / "ab").iterdir())
    base_files, head_files = sorted((session / "base").glob("*.json")), sorted((session / "head").glob("*.json"))
    assert len(base_files) == len(head_files) == 1
    head = json.loads(head_files[0].read_text())
    record = head["records"][0]
    assert record["status"] == "ok" and record["worker"]["ab_side"] == "head" and record["worker"]["ab_round"] == 0
    assert head["config"]["ab"]["env"] == {"COMPILEBENCH_AB_SIDE": "head"}
    data = json.loads(verdict.read_text())
    assert [c["case_id"] for c in data["cases"]] == ["mlp-classic/forward/inductor/cpu/float32/bs16/tiny"]
    assert {m["metric"] for m in data["cases"][0]["metrics"]} >= {"speedup", "latency", "graph_breaks"}
    if rc == 3:
        assert any(r["metrics"].get("contention", {}).get("contended")
                   for f in base_files + head_files for r in json.loads(f.read_text())["records"])
    # a one-round session holds 2 processes: fewer than noise's statistics need (6), so it refuses (exit 2)
    # instead of claiming a detectable change from two processes
    noise = tmp_path / "noise.json"
    assert main(["noise", "--from-runs", str(session), "-o", str(noise)]) == 2
    assert not noise.exists()
