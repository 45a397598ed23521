"""benchmarks/gate_error_rates.py's analysis: saved ab sessions decided again by the real
gate, pooled over study folders, counted per arm (the tables quoted in docs/GATING.md)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from harness.model.schema import Run, save_run
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def study():
    spec = importlib.util.spec_from_file_location("gate_error_rates", ROOT / "benchmarks" / "gate_error_rates.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _session(folder: Path, name: str, rng: np.random.Generator, slowdown: float, rounds: int = 4) -> Path:
    """An ab session on disk: <folder>/ab/<name>/{base,head}/round-NN.json, one synthetic process each."""
    case = synthetic_case(0)
    session = folder / "ab" / name
    for side, factor in (("base", 1.0), ("head", 1.0 + slowdown)):
        for r in range(rounds):
            record = synthetic_record(case, rng, eager_median=1e-3 * factor, compiled_median=5e-4 * factor,
                                      probe_median=1e-4, spread=0.02)
            run = Run(f"{name}-{side}-{r}", "2026-01-01T00:00:00+00:00", side, dict(SYNTHETIC_ENV), {}, [record])
            save_run(run, session / side / f"round-{r:02d}.json")
    return session


def _study_folder(folder: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = []
    for arm, slowdown in (("A/A", 0.0), ("whole +15%", 0.15)):
        session = _session(folder, f"s{seed}-{arm.replace('/', '').replace(' ', '').replace('%', '')}", rng, slowdown)
        rows.append({"session": 0, "arm": arm, "load": 1.0, "session_dir": str(session)})
    (folder / "ab-rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_analyse_pools_study_folders_and_counts_gate_failures_per_arm(study, tmp_path, capsys):
    for seed in (1, 2):
        _study_folder(tmp_path / f"study{seed}", seed)
    assert study.analyse([tmp_path / "study1", tmp_path / "study2"]) == 0
    out = capsys.readouterr().out
    runtime = out.split("same sessions, every metric")[0]
    assert "| A/A | 0/2 | 0% | 0 | unchanged 2 |" in runtime
    assert "| whole +15% | 2/2 | 100% | 0 | slower (eager too) 2 |" in runtime


def test_table_counts_exit_1_as_the_gate_failing_and_errors_apart(study):
    rows = [{"arm": "A/A", "exit": 0, "verdict": "unchanged", "latency_change": 0.01, "eager_change": 0.0},
            {"arm": "A/A", "exit": 1, "verdict": "regression", "latency_change": 0.09, "eager_change": 0.0},
            {"arm": "A/A", "exit": 2, "verdict": None, "latency_change": None, "eager_change": None}]
    line = study.table(rows, None)[2]
    assert line.startswith("| A/A | 1/2 | 50% | 1 |")  # the crashed pair is neither a pass nor a failure
    assert study.arms([0.15], ["compiled", "whole"]) == {
        "compiled +15%": {"COMPILEBENCH_GATE_EXTRA_WORK": "0.15"}, "whole +15%": {"COMPILEBENCH_GATE_WHOLE_WORK": "0.15"}}
