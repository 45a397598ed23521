"""Expected results (harness/analysis/expected.py, `compilebench expected`): any run, suite
or not; the default path; the key (suite, compiler, device, torch minor); any difference
fails, improvements too; pick one workload per family."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from harness.analysis.expected import (
    DEFAULT_DIR,
    ExpectedFileError,
    check,
    file_key,
    load_expected,
    pick_workloads,
    run_key,
    torch_minor,
    update,
)
from harness.cli.main import main
from harness.model.schema import Run, save_run
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record
from harness.testing.synthetic_breadth import breadth_run


def _run(run_id: str, suite: str = "", torch: str = "2.13.0+cpu", **kwargs) -> Run:
    rng = np.random.default_rng(0)
    records = [synthetic_record(synthetic_case(i, suite=suite), rng, **kwargs) for i in range(3)]
    return Run(run_id, "2026-01-01T00:00:00+00:00", run_id, dict(SYNTHETIC_ENV, torch_version=torch),
               {"suite": suite} if suite else {}, records)


@pytest.mark.parametrize("version, minor", [("2.13.0+cpu", "2.13"), ("2.11.0+cu130", "2.11"),
                                            ("2.14.0.dev20261201", "2.14"), ("synthetic", "synthetic"), (None, None)])
def test_torch_minor(version, minor):
    assert torch_minor(version) == minor


def test_update_and_check_a_run_that_is_not_a_suite_run(tmp_path, capsys):
    """The dead end of issue 23: `update --file` on user workloads said 'not a suite run; pass --file'."""
    adhoc = save_run(_run("adhoc", graph_breaks=1), tmp_path / "adhoc.json")
    file = tmp_path / "mine.json"
    assert main(["expected", "update", str(adhoc), "--file", str(file)]) == 0
    data = load_expected(file)
    assert data["suite"] == "adhoc" and data["torch_minor"] == "2.13" and data["compilers"] == ["inductor"]
    assert main(["expected", "check", str(adhoc), "--file", str(file)]) == 0
    assert "3 case(s) checked" in capsys.readouterr().out
    # without --file the message says to pass it (true this time), exit 2
    assert main(["expected", "update", str(adhoc)]) == 2
    assert "name one with --file PATH" in capsys.readouterr().err


def test_update_refuses_a_run_that_measured_nothing_and_a_run_of_another_key(tmp_path, capsys):
    """An interrupted empty run used to rewrite the file's key (smoke on cpu -> adhoc on mixed,
    which switches check's device test off) and keep every entry: a silent downgrade."""
    file = tmp_path / "smoke-cpu.json"
    assert main(["expected", "update", str(save_run(_run("smoke", suite="smoke"), tmp_path / "s.json")),
                 "--file", str(file)]) == 0
    before = file.read_text()
    empty = save_run(replace(_run("empty"), records=[], config={"interrupted": True}), tmp_path / "e.json")
    assert main(["expected", "update", str(empty), "--file", str(file)]) == 2
    assert "no case was measured" in capsys.readouterr().err
    other = save_run(_run("other", suite="cpu"), tmp_path / "o.json")
    assert main(["expected", "update", str(other), "--file", str(file)]) == 2
    err = capsys.readouterr().err
    assert "pins suite 'smoke' on 'cpu', but other is suite 'cpu' on 'cpu'" in err and err.count("\n") == 1
    assert file.read_text() == before  # untouched


def test_any_difference_fails_and_is_named_improvements_too(tmp_path, capsys):
    file = tmp_path / "e.json"
    update([_run("a", suite="s", graph_breaks=2)], file)
    better = save_run(_run("b", suite="s", graph_breaks=0), tmp_path / "b.json")
    assert main(["expected", "check", str(better), "--file", str(file)]) == 1
    out = capsys.readouterr().out
    assert out.count("DIFFERENT ") == 3 and "graph_breaks expected 2, got 0" in out
    assert f"--file {file}" in out  # the fix names the file


def test_default_path_is_results_expected_under_the_current_directory_not_out(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "elsewhere"
    run = _run("suite-run", suite="mysuite")
    save_run(run, out / "runs" / "suite-run.json")
    assert main(["expected", "update", "latest", "--out", str(out)]) == 0
    assert (tmp_path / "results" / "expected" / "mysuite-cpu.json").is_file()
    assert not (out / "expected").exists()
    assert main(["expected", "check", "latest", "--out", str(out)]) == 0


def test_missing_file_says_how_to_create_it(tmp_path, capsys):
    run = save_run(_run("x", suite="s"), tmp_path / "x.json")
    assert main(["expected", "check", str(run), "--file", str(tmp_path / "none.json")]) == 2
    assert f"expected update RUN --file {tmp_path / 'none.json'}" in capsys.readouterr().err


def test_torch_minor_or_device_of_another_key_fails(tmp_path):
    file = tmp_path / "e.json"
    update([_run("a", suite="s")], file)
    assert check(_run("patch", suite="s", torch="2.13.1+cpu"), file).differences == []
    report = check(_run("next", suite="s", torch="2.14.0+cpu"), file)
    assert report.failed() and any("torch minor expected '2.13', got '2.14'" in d for d in report.differences)
    cuda = _run("gpu", suite="s")
    cuda.records = [replace(r, case=replace(r.case, device="cuda")) for r in cuda.records]
    assert any("device expected 'cpu', got 'cuda'" in d for d in check(cuda, file).differences)


def test_complete_fails_on_a_case_not_run(tmp_path):
    file = tmp_path / "e.json"
    update([_run("a", suite="s")], file)
    partial = _run("p", suite="s")
    partial.records = partial.records[:2]
    report = check(partial, file)
    assert not report.failed() and report.failed(complete=True) and len(report.missing) == 1


def test_the_committed_smoke_file_keeps_working():
    data = load_expected(DEFAULT_DIR / "smoke-cpu.json")
    key = file_key(data)
    assert (key.suite, key.device, key.torch_minor) == ("smoke", "cpu", "2.13") and "inductor" in key.compilers


def test_multi_suite_breadth_run_and_pick_one_per_family(tmp_path, capsys):
    run = breadth_run(400, seed=2)
    assert run_key(run).suite == "breadth"
    file = tmp_path / "breadth-cpu.json"
    data = update([run], file)
    assert all("family" in e for e in data["cases"].values())
    assert not check(run, file).failed(complete=True)
    picked = pick_workloads(file)
    families = {e["family"] for e in data["cases"].values()}
    assert len(picked) == len(families)
    assert main(["expected", "pick", "--file", str(file)]) == 0
    assert capsys.readouterr().out.strip() == ",".join(picked)
    assert main(["expected", "pick"]) == 2
    assert main(["expected", "check"]) == 2


def test_bad_expected_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ExpectedFileError, match="not a compilebench expected file"):
        load_expected(bad)


@pytest.mark.slow
def test_real_user_workload_update_then_check(known_breaks_run, tmp_path, monkeypatch):
    """End to end on CPU: a user workload file (no suite), update --file, check passes. The
    real run (known-breaks, inductor, CPU) is conftest.py's, shared with test_core_e2e."""
    monkeypatch.chdir(tmp_path)
    _, out = known_breaks_run
    file = tmp_path / "user.json"
    assert main(["expected", "update", "latest", "--out", str(out), "--file", str(file)]) == 0
    entry, = load_expected(file)["cases"].values()
    assert entry["graph_breaks"] == 2 and entry["status"] == "ok" and entry["family"] == "known"
    assert main(["expected", "check", "latest", "--out", str(out), "--file", str(file)]) == 0


def test_a_check_that_checked_nothing_is_exit_3_not_a_pass(tmp_path, capsys):
    """As compare with no case in common: `0 case(s) checked ... 3 not run` used to exit 0."""
    file = tmp_path / "e.json"
    update([_run("a")], file)
    rng = np.random.default_rng(1)
    other = Run("o", "2026-01-01T00:00:00+00:00", "o", dict(SYNTHETIC_ENV, torch_version="2.13.0+cpu"), {},
                [synthetic_record(synthetic_case(i), rng) for i in (7, 8)])
    path = save_run(other, tmp_path / "o.json")
    assert main(["expected", "check", str(path), "--file", str(file)]) == 3
    captured = capsys.readouterr()
    assert "0 case(s) checked" in captured.out
    assert captured.err.strip().splitlines() == [line for line in captured.err.strip().splitlines()
                                                 if line.startswith("compilebench: error: nothing checked")]
    assert str(file) in captured.err


def test_other_model_library_versions_warn_and_do_not_fail(tmp_path, capsys):
    env = dict(SYNTHETIC_ENV, packages={"torch": "2.13.0+cpu", "transformers": "5.24.0", "diffusers": "0.42.1"})
    made = replace(_run("a", suite="s"), environment=dict(env, torch_version="2.13.0+cpu"))
    file = tmp_path / "e.json"
    assert update([made], file)["packages"] == {"transformers": "5.24.0", "diffusers": "0.42.1"}
    newer = dict(env, packages={**env["packages"], "transformers": "5.25.0"}, torch_version="2.13.0+cpu")
    report = check(replace(made, environment=newer), file)
    assert not report.failed(complete=True) and len(report.warnings) == 1
    assert "transformers 5.24.0 made" in report.warnings[0] and "this run has 5.25.0" in report.warnings[0]
    assert check(made, file).warnings == []
    path = save_run(replace(made, environment=newer), tmp_path / "newer.json")
    assert main(["expected", "check", str(path), "--file", str(file)]) == 0
    assert "warning: transformers 5.24.0 made" in capsys.readouterr().err
