"""compare/gate as CI reads them: exit 3 when nothing was compared or judged, missing cases
fail (or warn when told), CI-log tables that never cut a case id or a verdict."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.analysis.compare import compare_runs
from harness.analysis.thresholds import config_from_dict
from harness.analysis.verdicts import Outcome, Verdict
from harness.cli.main import main
from harness.model.schema import Run, save_run
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record


def _run(run_id: str, records) -> Run:
    return Run(run_id, "2026-01-01T00:00:00+00:00", run_id, dict(SYNTHETIC_ENV), {}, list(records))


def _save(tmp_path, run_id: str, records) -> str:
    path = tmp_path / f"{run_id}.json"
    save_run(_run(run_id, records), path)
    return str(path)


def _records(indices, seed: int, **kwargs):
    rng = np.random.default_rng(seed)
    return [synthetic_record(synthetic_case(i), rng, **kwargs) for i in indices]


# ---------------------------------------------------------------- nothing compared / judged

def test_no_case_in_common_is_nothing_compared_exit_3(tmp_path, capsys):
    """The bug: base and head share no case, and the gate said PASS with exit 0."""
    base = _save(tmp_path, "base", _records(range(9), 1))
    head = _save(tmp_path, "head", _records(range(20, 22), 2))
    md = tmp_path / "gate.md"
    for command in ("compare", "gate"):
        assert main([command, base, head, "--markdown", str(md)]) == 3
        captured = capsys.readouterr()
        line = "nothing compared: base and head share no case; base has 9, head has 2"
        assert captured.err.strip().splitlines() == [f"compilebench: error: {line}"]
        assert f"CANNOT JUDGE: {line}" in captured.out
        assert f"CANNOT JUDGE: {line}" in md.read_text()
    cmp = compare_runs([_run("b", _records(range(9), 1))], [_run("h", _records(range(20, 22), 2))])
    assert cmp.decide().outcome is Outcome.CANNOT_JUDGE


def test_cases_failing_on_both_sides_are_nothing_judged_exit_3(tmp_path, capsys):
    base = _save(tmp_path, "base", _records(range(3), 1, status="fail_compile"))
    head = _save(tmp_path, "head", _records(range(3), 2, status="fail_compile"))
    assert main(["gate", base, head]) == 3
    err = capsys.readouterr().err
    assert "nothing judged: none of the 3 case(s) in both runs has a status change or a metric" in err
    assert "3 still failing" in err


def test_cases_without_samples_are_n_a_and_nothing_judged(tmp_path, capsys):
    """Both ok but nothing measured on both sides (no samples, no scalars): `n/a`, said so,
    and a gate over only such cases cannot judge."""
    def empty(seed):
        records = _records(range(2), seed)
        for r in records:
            r.eager, r.compiled, r.metrics = {"samples_s": []}, {"samples_s": []}, {}
        return records

    cmp = compare_runs([_run("b", empty(1))], [_run("h", empty(2))])
    assert [c.verdict for c in cmp.cases] == [Verdict.NOT_APPLICABLE] * 2
    assert all("nothing judged" in f for c in cmp.cases for f in c.flags)
    assert main(["compare", _save(tmp_path, "b", empty(1)), _save(tmp_path, "h", empty(2))]) == 3
    assert "nothing judged" in capsys.readouterr().err


def test_one_judged_case_is_enough_to_pass(tmp_path):
    base = _records(range(2), 1, status="fail_run") + _records([5], 3)
    head = _records(range(2), 2, status="fail_run") + _records([5], 4)
    assert main(["compare", _save(tmp_path, "b", base), _save(tmp_path, "h", head)]) == 0


# ---------------------------------------------------------------- missing / new

def test_missing_in_head_fails_by_default_and_is_listed(tmp_path, capsys):
    base = _save(tmp_path, "base", _records(range(3), 1))
    head = _save(tmp_path, "head", _records(range(2), 2))
    md, js = tmp_path / "gate.md", tmp_path / "gate.json"
    for command in ("compare", "gate"):
        assert main([command, base, head, "--markdown", str(md), "--json-file", str(js)]) == 1
    text = md.read_text()
    gone = synthetic_case(2).case_id
    assert "### Missing in head (1: fail the gate)" in text and f"`{gone}` (base status ok)" in text
    data = json.loads(js.read_text())
    assert data["missing"] == [gone] and data["failed"] == [gone] and data["outcome"] == "fail"
    assert "missing" in capsys.readouterr().out


def test_missing_warns_with_the_flag_or_the_thresholds_key(tmp_path, capsys):
    base = _save(tmp_path, "base", _records(range(3), 1))
    head = _save(tmp_path, "head", _records(range(2), 2))
    assert main(["gate", base, head, "--missing", "warn"]) == 0
    out = capsys.readouterr().out
    assert "PASS: no regression (1 warn-only)" in out and 'missing = "warn"' in out
    toml = tmp_path / "t.toml"
    toml.write_text('[defaults]\nmissing = "warn"\n')
    assert main(["gate", base, head, "--thresholds", str(toml)]) == 0
    toml.write_text('[suite.synthetic]\nmissing = "warn"\n')  # any layer
    assert main(["gate", base, head, "--thresholds", str(toml)]) == 0
    assert main(["gate", base, head, "--thresholds", str(toml), "--missing", "fail"]) == 1  # the flag beats the file
    toml.write_text('[defaults]\nmissing = "maybe"\n')
    assert main(["gate", base, head, "--thresholds", str(toml)]) == 2
    assert 'not a missing policy; use "fail" (default) or "warn"' in capsys.readouterr().err


def test_new_in_head_is_informational(tmp_path):
    base = _save(tmp_path, "base", _records(range(2), 1))
    head = _save(tmp_path, "head", _records(range(4), 2))
    assert main(["gate", base, head]) == 0
    cmp = compare_runs([_run("b", _records(range(2), 1))], [_run("h", _records(range(4), 2))])
    assert cmp.counts() == {"new": 2, "unchanged": 2} and cmp.decide().outcome is Outcome.PASS


def test_missing_policy_resolves_per_case():
    first, second = synthetic_case(0).case_id, synthetic_case(1).case_id
    config = config_from_dict({"suite": {"synthetic": {"missing": "warn"}}, "case": {second: {"missing": "fail"}}})
    cmp = compare_runs([_run("b", _records(range(3), 1))], [_run("h", _records([2], 2))], config)
    warn = {c.case_id: c.warn_only for c in cmp.cases if c.verdict == Verdict.MISSING}
    assert warn == {first: True, second: False}
    assert [c.case_id for c in cmp.failing()] == [second]


# ---------------------------------------------------------------- CI-log tables

def test_non_tty_table_keeps_a_long_case_id_and_the_verdict_on_one_line(tmp_path, capsys):
    """CI logs are not terminals: the table used to shrink to 80 columns, cutting case ids
    ("zz-wo…") and breaking `slower (eager too)` one word a line."""
    rng = np.random.default_rng(9)
    case = synthetic_case(0, workload="zz-workload-with-a-rather-long-name-as-hf-zoo-models-have/forward/inductor")
    base = synthetic_record(case, rng, probe_median=1e-4)
    whole = synthetic_record(case, rng, eager_median=1e-3 * 1.4, compiled_median=5e-4 * 1.4, probe_median=1e-4)
    rc = main(["compare", _save(tmp_path, "b", [base]), _save(tmp_path, "h", [whole])])
    assert rc == 1
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if case.case_id in line]
    assert rows and any("slower (eager too)" in line for line in rows), out
    assert "…" not in out.split("geomean")[0]


# ---------------------------------------------------------------- noise rounds

@pytest.mark.parametrize("argv, message", [
    (["noise", "--rounds", "1", "-w", "mlp-classic"], "noise needs --rounds >= 3 (6 processes a case"),
    (["noise", "--rounds", "2", "-w", "mlp-classic"], "got 2; pass --rounds 3 or more"),
    (["noise", "--rounds", "0", "-w", "mlp-classic"], "0 is not an integer >= 1"),
])
def test_noise_refuses_rounds_its_statistics_cannot_use(argv, message, capsys):
    """`noise --rounds 1` used to claim a 0.6% detectable change from two processes; now it
    stops before any worker with one line naming the minimum."""
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own usage errors exit from inside main
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_noise_from_too_few_runs_is_refused(tmp_path, capsys):
    rng = np.random.default_rng(0)
    folder = tmp_path / "aa"
    for i in range(4):
        save_run(_run(f"aa{i}", [synthetic_record(synthetic_case(0), rng)]), folder / f"aa{i}.json")
    assert main(["noise", "--from-runs", str(folder)]) == 2
    assert "needs at least 6 A/A runs (3 rounds of two), got 4" in capsys.readouterr().err
    from harness.analysis.noise import NoiseInputError, analyze_noise

    with pytest.raises(NoiseInputError):
        analyze_noise([], rounds=1)


def test_json_is_a_flag_that_never_swallows_a_run_and_json_file_takes_the_path(tmp_path, capsys):
    base = _save(tmp_path, "base", _records(range(3), 1))
    head = _save(tmp_path, "head", _records(range(3), 2))
    assert main(["compare", "--json", base, head]) in (0, 1)  # was: exit 2 "head required"
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["outcome"] in ("pass", "fail") and len(data["cases"]) == 3
    js = tmp_path / "c.json"
    assert main(["gate", base, head, "--json-file", str(js)]) in (0, 1)
    assert json.loads(js.read_text())["outcome"] == data["outcome"]
    assert "geomean" in capsys.readouterr().out  # the table still prints to stdout beside the file
