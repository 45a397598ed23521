"""The `--gpus all` run vs its shards + merge: benchmarks/scaling_check.py and
harness/analysis/scaling.py on synthetic runs (seeded samples, known changes)."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.scaling import case_walls, check_runs, scaling_row
from harness.model.schema import Run, save_run
from harness.run.multigpu import pool_summary
from harness.testing.synthetic import synthetic_case, synthetic_record, synthetic_run

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("scaling_check", ROOT / "benchmarks" / "scaling_check.py")
scaling_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scaling_check)


def _twin(run: Run, run_id: str, seed: int) -> Run:
    """The same plan measured again: same facts, fresh samples of the same distributions."""
    fresh = synthetic_run(len(run.records), seed, run_id=run_id)
    for mine, theirs in zip(run.records, fresh.records, strict=True):
        theirs.metrics["graph_breaks"] = mine.metrics.get("graph_breaks")
    return fresh


def test_two_measurements_of_one_plan_are_the_same_run():
    a = synthetic_run(6, seed=1, run_id="gpus-all")
    b = _twin(a, "merged", seed=2)
    check = check_runs(a, b)
    assert check.common == 6 and check.same_cases and check.figures_agree, check.lines()
    assert "SAME" in check.lines()[0] and "within noise" in check.lines()[0]


def test_a_changed_status_break_accuracy_or_case_set_is_different():
    a = synthetic_run(5, seed=1, run_id="gpus-all")
    b = _twin(a, "merged", seed=2)
    b.records[0].status = "fail_compile"
    b.records[1].metrics["graph_breaks"] = 3
    b.records[2].metrics["accuracy"] = {"status": "fail"}
    b.records.pop()
    check = check_runs(a, b)
    assert not check.same_cases
    assert {(d.case_id, d.what) for d in check.differences} == {
        (a.records[0].case_id, "status"), (a.records[1].case_id, "graph_breaks"), (a.records[2].case_id, "accuracy")}
    assert check.only_in_a == [a.records[-1].case_id] and check.only_in_b == []


def test_figures_beyond_noise_are_found_and_named():
    a = synthetic_run(4, seed=1, run_id="gpus-all")
    b = synthetic_run(4, seed=2, run_id="merged", slowdown=0.5, slow_cases=1)  # case 0 compiled 50% slower
    check = check_runs(a, b)
    assert check.same_cases and not check.figures_agree
    assert [cid for cid, _, _ in check.figures] == [a.records[0].case_id]
    assert "latency" in check.figures[0][2]


def _gpus_run(walls: dict[str, float], n_gpus: int, wall: float) -> Run:
    """A --gpus run whose pool stamps give `wall` seconds of pool time over `n_gpus` GPUs."""
    rng = np.random.default_rng(0)
    records = []
    for i, (name, w) in enumerate(walls.items()):
        record = synthetic_record(synthetic_case(i, workload=name), rng)
        gpu = i % n_gpus
        record.worker = {"gpu": gpu, "wall_s": w, "gpu_pool": {
            "pool": "p", "gpus": list(range(n_gpus)), "start_s": 0.0, "end_s": min(w, wall), "one_gpu_s": None,
            "expected_from": "prior", "queue_position": i}}
        records.append(record)
    records[0].worker["gpu_pool"]["end_s"] = wall
    run = Run("gpus-all", "2026-12-01T00:00:00+00:00", "x", {"host": "h", "torch_version": "t",
              "devices": {"cuda": {"name": "H200"}}}, {"argv": ["compilebench", "run", "--gpus", "all"]}, records)
    run.config["multi_gpu"] = pool_summary(records)
    run.config["wall_s"] = wall + 1.0
    return run


def test_scaling_row_uses_the_shards_case_walls_as_the_one_gpu_figure():
    gpus = _gpus_run({"a": 40.0, "b": 30.0, "c": 20.0, "d": 10.0}, n_gpus=2, wall=55.0)
    shard1 = Run("s1", "t", "s1", {}, {"wall_s": 61.0}, [copy.deepcopy(r) for r in gpus.records[:2]])
    shard2 = Run("s2", "t", "s2", {}, {"wall_s": 35.0}, [copy.deepcopy(r) for r in gpus.records[2:]])
    for r, w in zip(shard1.records + shard2.records, (44.0, 33.0, 22.0, 11.0), strict=True):
        r.worker = {"wall_s": w}
    row = scaling_row("hf", gpus, case_walls([shard1, shard2]), shard_runs=[shard1, shard2])
    assert row["one_gpu_s"] == 110.0 and row["one_gpu_cases"] == "4/4"
    assert row["speedup"] == pytest.approx(2.0) and row["efficiency"] == pytest.approx(110.0 / 2 / 55.0)
    assert row["shards_wall_s"] == 61.0 and row["same_cases"] is None
    partial = scaling_row("hf", gpus, case_walls([shard1]))  # two cases never measured one at a time
    assert partial["one_gpu_s"] is None and partial["efficiency"] is None and partial["one_gpu_cases"] == "2/4"


def test_the_script_checks_files_and_writes_the_table(tmp_path, capsys):
    a = synthetic_run(4, seed=1, run_id="gpus-all")
    b = _twin(a, "merged", seed=2)
    pa, pb = save_run(a, tmp_path / "a.json"), save_run(b, tmp_path / "b.json")
    assert scaling_check.main(["check", str(pa), str(pb)]) == 0
    b.records[0].status = "crashed"
    save_run(b, pb)
    assert scaling_check.main(["check", str(pa), str(pb)]) == 1
    assert "status 'ok' vs 'crashed'" in capsys.readouterr().out
    assert scaling_check.main(["check", str(pa), str(tmp_path / "nope.json")]) == 2
    assert capsys.readouterr().err.count("\n") == 1

    gpus = _gpus_run({"a": 40.0, "b": 30.0}, n_gpus=2, wall=41.0)
    shard = Run("s", "t", "s", {}, {"wall_s": 72.0}, [copy.deepcopy(r) for r in gpus.records])
    pg, ps = save_run(gpus, tmp_path / "g.json"), save_run(shard, tmp_path / "s.json")
    md = tmp_path / "table.md"
    assert scaling_check.main(["table", "--suite", "hf", "--gpus-run", str(pg), "--shard-runs", str(ps),
                               "--merged", str(ps), "--markdown", str(md)]) == 0
    text = md.read_text()
    assert "| hf | 2 (2) | 2 | 41.0 | 70.0 (2/2 cases) | 1.71x | 85.4% |" in text
    assert "same cases, figures within noise" in text and "scaling efficiency = " in text
    assert scaling_check.main(["table", "--suite", "hf", "--gpus-run", str(ps), "--shard-runs", str(ps)]) == 2
