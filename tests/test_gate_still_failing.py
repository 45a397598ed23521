"""`still failing` (failed in base, fails in head): the gate passes it (not this change's
regression) but says so on the verdict line, lists it with its error in a markdown section of
its own and in the JSON, and fails it under `--still-failing fail`."""

from __future__ import annotations

import json

import numpy as np

from harness.cli.main import main
from harness.model.schema import Run, save_run
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record


def _save(tmp_path, run_id: str, seed: int, failing: dict[int, str]) -> str:
    """Cases 0-2 of the synthetic suite, those in `failing` with that status."""
    rng = np.random.default_rng(seed)
    records = [synthetic_record(synthetic_case(i), rng, status=failing.get(i, "ok")) for i in range(3)]
    path = tmp_path / f"{run_id}.json"
    save_run(Run(run_id, "2026-01-01T00:00:00+00:00", run_id, dict(SYNTHETIC_ENV), {}, records), path)
    return str(path)


def test_a_case_failing_on_both_sides_passes_and_is_listed(tmp_path, capsys):
    base = _save(tmp_path, "base", 1, {2: "fail_compile"})
    head = _save(tmp_path, "head", 2, {2: "fail_compile"})
    md, js = tmp_path / "gate.md", tmp_path / "gate.json"
    assert main(["gate", base, head, "--markdown", str(md), "--json-file", str(js)]) == 0
    out = capsys.readouterr().out
    assert "PASS: no regression; 1 case(s) still failing, as in base" in out
    still = synthetic_case(2).case_id
    text = md.read_text()
    assert "**PASS: no regression; 1 case(s) still failing, as in base" in text
    assert "### Still failing (1: pass the gate: they failed in base too)" in text
    assert f"`{still}` (status fail_compile -> fail_compile): Synthetic: synthetic fail_compile" in text
    assert "<details>" not in text.split("### Still failing")[1].split("\n\n")[0]  # in the open, not collapsed
    data = json.loads(js.read_text())
    assert data["still_failing"] == [still] and data["failed"] == [] and data["outcome"] == "pass"


def test_still_failing_fail_makes_it_fail_the_gate(tmp_path, capsys):
    base = _save(tmp_path, "base", 1, {2: "fail_compile"})
    head = _save(tmp_path, "head", 2, {2: "fail_compile"})
    md = tmp_path / "gate.md"
    assert main(["gate", base, head, "--still-failing", "fail", "--markdown", str(md)]) == 1
    assert "FAIL: 1 case(s) failed the gate (1 still failing)" in capsys.readouterr().out
    assert '### Still failing (1: fail the gate (still_failing = "fail" / --still-failing fail))' in md.read_text()
    assert main(["gate", base, head, "--fail-on", "regression,still failing"]) == 1  # the same through --fail-on


def test_a_case_that_fails_otherwise_now_says_both_errors(tmp_path, capsys):
    base = _save(tmp_path, "base", 1, {2: "fail_compile"})
    head = _save(tmp_path, "head", 2, {2: "crashed"})
    md = tmp_path / "gate.md"
    assert main(["gate", base, head, "--markdown", str(md)]) == 0
    assert ("(status fail_compile -> crashed): Synthetic: synthetic crashed "
            "(base failed otherwise: Synthetic: synthetic fail_compile)") in md.read_text()
    assert "Synthetic: synthetic crashed (base failed otherwise" in capsys.readouterr().out  # the table's note


def test_a_clean_gate_keeps_its_line(tmp_path, capsys):
    base = _save(tmp_path, "base", 1, {})
    head = _save(tmp_path, "head", 2, {})
    md = tmp_path / "gate.md"
    assert main(["gate", base, head, "--markdown", str(md)]) in (0, 1)  # synthetic noise may trip a threshold
    assert "still failing" not in capsys.readouterr().out and "### Still failing" not in md.read_text()
