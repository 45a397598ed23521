"""Bad input through the CLI: one clear line on stderr naming the file or option and the fix,
exit code 2, and nothing half-written left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main as cli
from harness.model.schema import SCHEMA_VERSION, RunFileError, load_run

ROOT = Path(__file__).resolve().parent.parent
V1_RUN = ROOT / "tests" / "data" / "run_v1_mlp_eager.json"


def _usage_error(capsys, argv: list[str]) -> str:
    """Run the CLI; assert exit 2 and exactly one line on stderr; return that line."""
    assert cli.main(argv) == cli.EXIT_USAGE
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert err[0].startswith("compilebench: error: ")
    return err[0]


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


@pytest.mark.parametrize(("option", "value", "suggestion"), [
    ("--suite", "smok", "smoke"),
    ("--workload", "mlp-clasic", "mlp-classic"),
    ("--compiler", "inductr", "inductor"),
    ("--scenario", "forwrd", "forward"),
])
def test_unknown_names_suggest_the_closest_and_write_nothing(capsys, tmp_path, option, value, suggestion):
    argv = ["run", option, value, "--out", str(tmp_path / "out")]
    if option in ("--compiler", "--scenario"):
        argv += ["--workload", "mlp-classic"]
    line = _usage_error(capsys, argv)
    assert repr(value) in line and suggestion in line
    assert _files(tmp_path / "out") == []  # no run file, no journal, no history


def test_unknown_device_names_the_known_ones(capsys, tmp_path):
    line = _usage_error(capsys, ["run", "-w", "mlp-classic", "--device", "cdua", "--out", str(tmp_path / "o")])
    assert "cdua" in line and "cuda" in line
    assert _files(tmp_path / "o") == []


@pytest.mark.parametrize("argv", [
    ["run", "-w", "mlp-classic", "--batch-size", "zero"],
    ["run", "-w", "mlp-classic", "--dtype", "float8"],
    ["run", "-w", "mlp-classic", "--size", "huge"],
    ["run", "-w", "mlp-classic", "--max-memory-gb", "-1"],
    ["run", "--resume", "20260101-x", "--suite", "smoke"],
    ["run", "--resume", "no-such-run"],
    ["run", "--workload-file", "no/such/file.py"],
    ["run", "--timeout", "soon"],  # argparse's own errors are one line too
    ["run"],
])
def test_bad_run_options(capsys, tmp_path, argv):
    with pytest.raises(SystemExit) as exc:  # argparse exits itself; the rest return
        raise SystemExit(cli.main([*argv, "--out", str(tmp_path / "o")]))
    assert exc.value.code == cli.EXIT_USAGE
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "error" in err[0], err
    assert _files(tmp_path / "o") == []


def _bad_run_files(tmp: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, text expected in the message)."""
    good = json.loads(V1_RUN.read_text())
    cases = {
        "empty": ("", "empty file"),
        "truncated": (V1_RUN.read_text()[:500], "not valid JSON"),
        "foreign-list": ("[1, 2, 3]", "top level is list"),
        "foreign-object": (json.dumps({"benchmarks": [], "machine_info": {}}), "no schema_version"),
        "newer-schema": (json.dumps({**good, "schema_version": SCHEMA_VERSION + 1}), "upgrade compilebench"),
        "string-version": (json.dumps({**good, "schema_version": "1"}), "not an integer"),
        "records-not-list": (json.dumps({**good, "records": {"a": 1}}), "records must be a list"),
        "metrics-not-object": (json.dumps({**good, "records": [{**good["records"][0], "metrics": [1]}]}),
                               "record.metrics must be an object"),
        "bad-status": (json.dumps({**good, "records": [{**good["records"][0], "status": "great"}]}), "unknown status"),
        "huge-int": ('{"schema_version": ' + "9" * 5000 + "}", "not a run file"),
        "deep-nesting": ("[" * 100_000 + "]" * 100_000, "not a run file"),
        "binary": ("\udcff\x00garbage", "cannot be read"),
    }
    out = {}
    for name, (text, expect) in cases.items():
        path = tmp / f"{name}.json"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        out[name] = (path, expect)
    return out


def test_bad_run_files_are_one_clear_line_for_show_and_report(capsys, tmp_path):
    for name, (path, expect) in _bad_run_files(tmp_path).items():
        with pytest.raises(RunFileError) as exc:
            load_run(path)
        assert expect in str(exc.value) and str(path) in str(exc.value), name
        assert "\n" not in str(exc.value), name
        line = _usage_error(capsys, ["show", str(path)])
        assert str(path) in line, name
        html = tmp_path / "reports" / f"{name}.html"
        _usage_error(capsys, ["report", str(path), "-o", str(html)])
        assert not html.exists() and _files(tmp_path / "reports") == [], name  # no partial report


def test_bad_compiler_toml_is_one_line_naming_the_file(capsys, tmp_path):
    bad = tmp_path / "compilers.toml"
    for text, expect in [("[fast\nmode = 1", "invalid TOML"), ("[fast]\nmode = 1", "mode = 1 must be"),
                         ("[fast]\nbogus = true", "unknown key"), ("", "defines no compilers")]:
        bad.write_text(text)
        line = _usage_error(capsys, ["run", "-w", "mlp-classic", "--compiler-file", str(bad), "--out", str(tmp_path / "o")])
        assert str(bad) in line and expect in line, line
    assert _files(tmp_path / "o") == []


def test_bad_thresholds_toml_is_a_clear_error(tmp_path):
    from harness.analysis.thresholds import ThresholdConfigError, load_thresholds

    bad = tmp_path / "thresholds.toml"
    for text, expect in [("[defaults\n", "invalid TOML"), ("[defaults]\nlatency = 'fast'", "not a threshold"),
                         ("[nightly]\n", "unknown section"), ("[defaults]\nbogus_metric = 0.1", "unknown metric")]:
        bad.write_text(text)
        with pytest.raises(ThresholdConfigError) as exc:
            load_thresholds(bad)
        assert str(bad) in str(exc.value) and expect in str(exc.value), (text, str(exc.value))
        assert "\n" not in str(exc.value)


def test_atomic_writes_leave_no_partial_file(tmp_path, monkeypatch):
    """A write that fails half-way (disk full, Ctrl-C) leaves the old file and no temp file."""
    from harness.model import schema

    target = tmp_path / "runs" / "r.json"
    schema.write_json_atomic(target, {"old": True})

    def interrupted_fsync(fd):  # the temp file holds the new text, the rename has not happened
        raise KeyboardInterrupt

    monkeypatch.setattr(schema.os, "fsync", interrupted_fsync)
    with pytest.raises(KeyboardInterrupt):
        schema.write_json_atomic(target, {"new": True})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"old": True}
    assert [p.name for p in target.parent.iterdir()] == ["r.json"]
    with pytest.raises(ValueError):  # NaN is refused, not written as invalid JSON
        schema.write_json_atomic(target, {"x": float("nan")})
    assert json.loads(target.read_text()) == {"old": True} and len(list(target.parent.iterdir())) == 1


def test_real_entry_point_exit_code_and_one_line(tmp_path):
    res = subprocess.run([sys.executable, "-m", "harness", "run", "--suite", "smok", "--out", str(tmp_path)],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "did you mean smoke" in res.stderr
    assert not any(tmp_path.iterdir())


def test_show_of_old_v1_run_works(capsys):
    assert cli.main(["show", str(V1_RUN)]) == cli.EXIT_OK
    assert "mlp-classic" in capsys.readouterr().out


def test_bad_thresholds_through_compare_cli(capsys, tmp_path):
    bad = tmp_path / "thresholds.toml"
    bad.write_text('[defaults]\nlatency = "fast"\n')
    line = _usage_error(capsys, ["compare", str(V1_RUN), str(V1_RUN), "--thresholds", str(bad)])
    assert str(bad) in line and "not a threshold" in line
    line = _usage_error(capsys, ["compare", str(V1_RUN), str(tmp_path / "missing.json")])
    assert "missing.json" in line


# ---------------------------------------------------------------- validation at the edge (issue 23, item 7)

def _refused(capsys, tmp_path, argv: list[str]) -> str:
    """Exit 2 (argparse's own or ours), one line, nothing written under --out; returns the line."""
    out = tmp_path / "o"
    try:
        code = cli.main([*argv, "--out", str(out)])
    except SystemExit as exc:  # argparse exits itself
        code = exc.code
    assert code == cli.EXIT_USAGE, argv
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("compilebench: error: "), err
    assert "Traceback" not in err[0]
    assert _files(out) == [], argv  # no run file, journal or history
    return err[0]


@pytest.mark.parametrize(("flag", "value"), [
    ("--timeout", "0"), ("--timeout", "-5"), ("--timeout", "nan"), ("--timeout", "inf"),
    ("--min-time", "-1"), ("--min-time", "nan"), ("--min-time", "inf"),
    ("--min-samples", "0"), ("--min-samples", "-3"), ("--min-samples", "1.5"),
    ("--warmup", "-1"), ("--warmup", "x"),
])
def test_run_timing_options_are_checked_before_anything_runs(capsys, tmp_path, flag, value):
    line = _refused(capsys, tmp_path, ["run", "-w", "mlp-classic", "-c", "eager", flag, value])
    assert flag in line and value in line


@pytest.mark.parametrize("argv", [
    ["ab", "--base-python", sys.executable, "--head-python", sys.executable, "-w", "mlp-classic", "--timeout", "0"],
    ["noise", "-w", "mlp-classic", "--min-samples", "0"],
    ["coldstart", "-w", "mlp-classic", "--timeout", "-1"],
    ["sweep", "-w", "mlp-classic", "--steady-calls", "0"],
    ["distributed", "--timeout", "0"],
])
def test_the_same_checks_in_every_command_that_runs_workers(capsys, tmp_path, argv):
    assert "is not" in _refused(capsys, tmp_path, argv)


def test_an_option_the_workload_does_not_declare_names_its_options(capsys, tmp_path):
    line = _refused(capsys, tmp_path, ["run", "-w", "mlp-classic", "--option", "resolution=abc"])
    assert "workload mlp-classic has no option 'resolution'" in line and "its options: none" in line
    line = _refused(capsys, tmp_path, ["run", "-w", "gpt2", "--option", "prompt_length=8"])
    assert "gpt2 has no option 'prompt_length'" in line and "did you mean prompt_len" in line
    assert "new_tokens" in line  # the declared ones are listed
    line = _refused(capsys, tmp_path, ["run", "--suite", "diffusion", "--option", "prompt_len=3"])
    assert "no workload of the selection has option 'prompt_len'" in line and "sdxl-vae: " in line


def test_a_suite_option_goes_only_to_the_workloads_that_declare_it():
    from harness.run.runner import RunOptions, plan_cases

    cases, _ = plan_cases(RunOptions(suite="smoke", options={"new_tokens": 4}))
    by_workload = {c.workload: dict(c.options) for c in cases}
    assert by_workload["llama-3.1-8b"] == {"new_tokens": 4}
    assert by_workload["mlp-classic"] == {}  # not written into an MLP's case id
    assert all("new_tokens" not in c.case_id for c in cases if c.workload.startswith("mlp"))


def test_declared_options_match_what_the_suites_read():
    from harness.model.workloads import WORKLOADS
    from harness.run.runner import load_registries
    from suites import diffusion, llm

    load_registries([])
    assert set(WORKLOADS["gpt2"].options) == set(llm.KNOWN_OPTIONS)
    assert set(WORKLOADS["sdxl-unet"].options) == set(diffusion.OPTION_NAMES) == set(WORKLOADS["sdxl-vae"].options)
    assert set(WORKLOADS["sdxl-pipeline"].options) == {*diffusion.OPTION_NAMES, "attention"}
    assert WORKLOADS["mlp-classic"].options == {}
    from suites import diffusers_zoo, transformers_zoo

    zoo = [w for w in WORKLOADS.values() if w.source in ("suites.transformers_zoo", "suites.diffusers_zoo")]
    assert zoo and all(set(w.options) == set((transformers_zoo if "transformers" in w.source else diffusers_zoo)
                                             .OPTION_NAMES) for w in zoo)


def test_suite_with_a_workload_it_lacks_names_the_suites_workloads(capsys, tmp_path):
    line = _refused(capsys, tmp_path, ["run", "--suite", "smoke", "-w", "mlp-classic,ux-mlp"])
    assert "suite 'smoke' has no workload 'ux-mlp'" in line and "mlp-classic, mlp-deep" in line


def test_a_workload_file_that_redefines_a_built_in_is_refused_unless_asked(capsys, tmp_path):
    from harness.model.workloads import WORKLOADS

    user = tmp_path / "mine.py"
    user.write_text("import torch\nfrom harness import workload\n\n"
                    "@workload('mlp-classic', scenarios=('forward',))\n"
                    "def fake(ctx):\n    return torch.nn.Linear(3, 3), (torch.randn(2, 3),)\n\n"
                    "@workload('mine-extra', scenarios=('forward',))\n"
                    "def extra(ctx):\n    return torch.nn.Linear(3, 3), (torch.randn(2, 3),)\n")
    line = _refused(capsys, tmp_path, ["run", "--workload-file", str(user), "-c", "eager"])
    assert "redefines workload 'mlp-classic' (from suites.mlp)" in line and "--override-workloads" in line
    assert WORKLOADS["mlp-classic"].source == "suites.mlp" and "mine-extra" not in WORKLOADS  # nothing half-loaded
    from harness.run.runner import RunOptions, plan_cases

    cases, _ = plan_cases(RunOptions(workload_files=[str(user)], override_workloads=True, compilers=["eager"],
                                     devices=["cpu"]))
    assert {c.workload for c in cases} == {"mlp-classic", "mine-extra"}
    assert WORKLOADS["mlp-classic"].source.startswith("compilebench_user_")
    import importlib

    import suites.mlp

    importlib.reload(suites.mlp)  # give later tests the built-in back
    assert WORKLOADS["mlp-classic"].source == "suites.mlp"


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf", "x"])
def test_bisect_threshold_must_be_a_positive_number(capsys, tmp_path, value):
    line = _refused(capsys, tmp_path, ["bisect", "--metric", "latency", "--threshold", value, "--env", "a=python",
                                       "--env", "b=python", "-w", "mlp-classic"])
    assert "--threshold" in line and value in line and "positive number" in line, line


@pytest.mark.parametrize("command", ["compare A B", "gate A B", "show", "run", "store check", "noise", "dashboard"])
def test_an_unrecognized_argument_points_at_the_subcommands_help(capsys, tmp_path, command):
    line = _refused(capsys, tmp_path, [*command.split(), "--no-such-flag"])
    name = command.split()[0]
    assert "unrecognized arguments: --no-such-flag" in line and f"(see `compilebench {name} --help`)" in line, line


def test_the_top_level_help_shows_the_exit_codes_once_with_machine_contended(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert text.count("exit codes: 0 ok") == 1, text
    assert "machine contended" in text.split("exit codes: 0 ok")[1].split("130 interrupted")[0]


@pytest.mark.parametrize("argv", [
    ["ab", "--base-python", sys.executable, "--head-python", sys.executable, "-w", "mlp-classic"],
    ["noise", "-w", "mlp-classic"],
    ["versions", "--env", "a=python", "-w", "mlp-classic"],
    ["bisect", "--metric", "latency", "--env", "a=python", "--env", "b=python", "-w", "mlp-classic"],
])
def test_warmup_is_taken_and_checked_wherever_cases_run(capsys, tmp_path, argv):
    from harness.cli.compare import run_options_from

    assert "--warmup" in _refused(capsys, tmp_path, [*argv, "--warmup", "-1"])
    args = cli.build_parser().parse_args([*argv, "--warmup", "0"])
    assert run_options_from(args).policy["warmup"] == 0


def test_coldstart_takes_out_like_every_command_and_keeps_workdir_hidden(tmp_path):
    parser = cli.build_parser()
    assert parser.parse_args(["coldstart", "--out", str(tmp_path)]).workdir == str(tmp_path)
    assert parser.parse_args(["coldstart", "--workdir", str(tmp_path)]).workdir == str(tmp_path)
    sub = next(a for a in parser._actions if a.dest == "command").choices["coldstart"]
    text = sub.format_help()
    assert "--out DIR" in text and "--workdir" not in text


@pytest.mark.parametrize("argv", [["expected", "check", "--file", "E.json", "R1", "R2"],
                                  ["expected", "check", "R1", "--file", "E.json", "R2"],
                                  ["expected", "check", "R1", "R2", "--file", "E.json"]])
def test_run_files_may_come_before_between_or_after_options(argv):
    """`expected check --file F RUN` once said "unrecognized arguments: RUN": argparse leaves a
    `*` list empty when an option comes between the subcommand's words and the list."""
    args = cli.build_parser().parse_args(argv)
    assert (args.action, args.run, args.file) == ("check", ["R1", "R2"], "E.json")


def test_a_stray_word_after_a_command_without_a_list_is_still_refused(capsys, tmp_path):
    line = _refused(capsys, tmp_path, ["show", "latest", "stray"])
    assert "unrecognized arguments: stray" in line, line


@pytest.mark.parametrize("argv", [
    ["run", "--suite", "smoke"],
    ["ab", "--base-python", sys.executable, "--head-python", sys.executable, "-w", "mlp-classic"],
    ["noise", "-w", "mlp-classic"],
    ["versions", "--env", "a=python", "-w", "mlp-classic"],
    ["bisect", "--metric", "latency", "--env", "a=python", "--env", "b=python", "-w", "mlp-classic"],
])
def test_warmup_budget_is_taken_and_checked_wherever_cases_run(capsys, tmp_path, argv):
    from harness.cli.common import policy_overrides

    assert "--warmup-budget" in _refused(capsys, tmp_path, [*argv, "--warmup-budget", "-1"])
    args = cli.build_parser().parse_args([*argv, "--warmup-budget", "0", "--warmup", "2"])
    assert policy_overrides(args) == {"warmup_budget_s": 0.0, "warmup": 2}


@pytest.mark.parametrize("command", ["run", "ab", "noise"])
@pytest.mark.parametrize("option", [["--warmup-budget", "1"], ["--warmup-budget", "0"], ["--warmup", "0"],
                                    ["--warmup", "2"]])
def test_resume_refuses_warm_up_options_it_takes_from_the_journal(capsys, tmp_path, command, option):
    """0 is a choice too (`--warmup-budget 0`: always --warmup rounds), not an option left out."""
    line = _refused(capsys, tmp_path, [command, "--resume", "RUNID", *option])
    assert f"drop {option[0]}" in line, line


@pytest.mark.parametrize("option", [["--option", "foo=1"], ["--no-preload"], ["--no-ingest"], ["--gpus", "all"]])
def test_run_resume_refuses_session_options_it_would_not_apply(capsys, tmp_path, option):
    """The journal's options are the resumed run's: these were silently dropped before."""
    line = _refused(capsys, tmp_path, ["run", "--resume", "RUNID", *option])
    assert f"drop {option[0]}" in line and "--resume reuses the interrupted run's own options" in line, line


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "1e999", "99999999999999999999"])
def test_an_option_value_no_run_file_can_hold_is_refused_before_any_case(capsys, tmp_path, value):
    """NaN/Infinity used to abort the run after its cases (no run file, exit 3) and resume as KEY=None."""
    line = _refused(capsys, tmp_path, ["run", "-w", "mlp-classic", "--size", "tiny", "--option", f"scale={value}"])
    assert f"--option scale={value}" in line, line


def test_a_batch_size_beyond_the_store_is_refused(capsys, tmp_path):
    line = _refused(capsys, tmp_path, ["run", "-w", "mlp-classic", "--batch-size", "99999999999999999999"])
    assert "--batch-size 99999999999999999999 is out of range" in line, line
