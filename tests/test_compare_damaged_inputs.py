"""Damaged fields in otherwise valid files: a probe block or a sample list of the wrong type
reads as unusable (the case is judged without it), and a malformed noise file is one line of
bad input (exit 2), never a traceback that exits 3 where CI expects a verdict."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.cli.main import main
from harness.model.schema import Run, save_run
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record


def _run_file(tmp_path, name: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    records = [synthetic_record(synthetic_case(i), rng, spread=0.01, probe_median=1e-3) for i in range(2)]
    path = tmp_path / f"{name}.json"
    save_run(Run(name, "2026-01-01T00:00:00+00:00", name, dict(SYNTHETIC_ENV), {}, records), path)
    return json.loads(path.read_text())


def _write(tmp_path, name: str, data: dict) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("damage", ["probe kernel null", "probe kernel a number", "sample beyond a float"])
def test_a_damaged_field_is_judged_without_not_a_crash(tmp_path, capsys, damage):
    base = _write(tmp_path, "base", _run_file(tmp_path, "b", 1))
    head_data = _run_file(tmp_path, "h", 2)
    record = head_data["records"][0]
    if damage == "probe kernel null":
        record["metrics"]["machine_probe"]["samples_s"]["gemm"] = None
    elif damage == "probe kernel a number":
        record["metrics"]["machine_probe"]["samples_s"]["gemm"] = 3
    else:
        record["compiled"]["samples_s"][0] = 10 ** 400
    head = _write(tmp_path, "head", head_data)
    assert main(["compare", base, head]) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("cases, what", [
    ({"c": {"metrics": {"latency": {"mdc_single": "0.1"}}}}, "no numeric 'mdc_single'"),
    ({"c": {"metrics": {"latency": {}}}}, "no numeric 'mdc_single'"),
    ({"c": {"metrics": []}}, "has no 'metrics' mapping"),
    ([], "'cases' is list"),
])
def test_a_malformed_noise_file_is_bad_input(tmp_path, capsys, cases, what):
    base = _write(tmp_path, "base", _run_file(tmp_path, "b", 1))
    head = _write(tmp_path, "head", _run_file(tmp_path, "h", 2))
    noise = tmp_path / "noise.json"
    from harness.analysis.noise import NOISE_FORMAT

    noise.write_text(json.dumps({"format": NOISE_FORMAT, "cases": cases}))
    assert main(["compare", base, head, "--noise", str(noise)]) == 2
    err = capsys.readouterr().err
    assert what in err and "compilebench noise -o" in err and err.count("\n") == 1
