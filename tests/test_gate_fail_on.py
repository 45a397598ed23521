"""`--fail-on` as CI uses it: a verdict of the failing set fails the gate wherever it appears
(the case's or one of its metrics'), the markdown shows every failing case in the open, an
empty list is bad input rather than a gate switched off, and `--json` keeps stdout to itself."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.cli.main import main
from harness.model.schema import Run, save_run
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record


def _save(tmp_path, name: str, *, machine: float = 1.0, compile_time: float = 2.0, compiled: float = 5e-4) -> str:
    """Case 0 on a machine `machine` times slower (eager, compiled and the probe alike), with
    that compile time and compiled median; case 1 unchanged on every side."""
    rng = np.random.default_rng(len(name) * 7 + int(machine * 100))
    records = [synthetic_record(synthetic_case(0), rng, eager_median=1e-3 * machine, compiled_median=compiled * machine,
                                spread=0.01, compile_time=compile_time, compile_spread=0.0, probe_median=1e-3 * machine),
               synthetic_record(synthetic_case(1), rng, spread=0.01, compile_spread=0.0, probe_median=1e-3)]
    path = tmp_path / f"{name}.json"
    save_run(Run(name, "2026-01-01T00:00:00+00:00", name, dict(SYNTHETIC_ENV), {}, records), path)
    return str(path)


def _case0(path) -> dict:
    data = json.loads(path.read_text())
    return next(c for c in data["cases"] if c["case_id"] == synthetic_case(0).case_id)


def test_a_metric_verdict_of_the_failing_set_fails_the_case_whose_own_verdict_is_another(tmp_path, capsys):
    # case 0: its latency drifted with the machine (+30%, the probe too), its compile time regressed
    base = _save(tmp_path, "base")
    head = _save(tmp_path, "head", machine=1.3, compile_time=3.0)
    out, md = tmp_path / "gate.json", tmp_path / "gate.md"
    code = main(["gate", base, head, "--fail-on", "machine drift", "--json-file", str(out), "--markdown", str(md)])
    case = _case0(out)
    verdicts = {m["metric"]: m["verdict"] for m in case["metrics"]}
    assert case["verdict"] == "regression" and verdicts["latency"] == "machine drift", verdicts
    assert code == 1
    assert "FAIL: 1 case(s) failed the gate (1 machine drift)" in capsys.readouterr().out
    text = md.read_text()
    assert synthetic_case(0).case_id in text.split("### Needs attention")[1].split("<details>")[0]


def test_a_pass_under_a_narrower_fail_on_does_not_read_no_regression(tmp_path, capsys):
    base = _save(tmp_path, "base")
    head = _save(tmp_path, "head", compiled=7.5e-4)  # compiled +50%: a regression
    assert main(["gate", base, head, "--fail-on", "now failing"]) == 0
    out = capsys.readouterr().out
    assert "PASS: no verdict of the failing set (--fail-on), though 1 regression" in out
    assert "PASS: no regression" not in out


@pytest.mark.parametrize("words", ["", ",", " , "])
def test_an_empty_fail_on_is_bad_input_not_a_gate_switched_off(tmp_path, capsys, words):
    base = _save(tmp_path, "base")
    head = _save(tmp_path, "head", compiled=7.5e-4)
    assert main(["gate", base, head, "--fail-on", words]) == 2
    err = capsys.readouterr().err
    assert "names no verdict" in err and err.count("\n") == 1


def test_json_and_markdown_on_stdout_together_are_refused(tmp_path, capsys):
    base = _save(tmp_path, "base")
    head = _save(tmp_path, "head")
    assert main(["compare", base, head, "--json", "--markdown", "-"]) == 2
    assert "both write to stdout" in capsys.readouterr().err
