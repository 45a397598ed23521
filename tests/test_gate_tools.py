"""Thresholds files, noise analysis, the A/B schedule, expected counts and the
pytest-benchmark interchange (all without running models; the real paths are in
tests/test_gate_e2e.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.compare import compare_runs
from harness.analysis.expected import EXPECTED_FORMAT, check, update
from harness.analysis.noise import analyze_noise, load_noise_table, save_noise
from harness.analysis.thresholds import ThresholdConfigError, config_from_dict, load_thresholds
from harness.cli.main import main
from harness.experiments.ab import AbError, parse_env_pairs, schedule
from harness.interop.pytest_bench import PytestBenchmarkFileError, export_run, import_data
from harness.model.errors import UserError
from harness.model.schema import Run, save_run
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record, synthetic_run

# ---------------------------------------------------------------- thresholds


def test_threshold_precedence(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text("""
[defaults]
latency = "4%"
alpha = 0.01
[suite.smoke]
latency = 0.08
compile_time = "30%"
[workload.mlp-deep]
latency = "12%"
peak_memory = "off"
[case."mlp-deep/forward/inductor/cpu/float32/bs64/tiny"]
graph_breaks = 2
""")
    config = load_thresholds(path)
    assert config.for_case("x", "other", "nightly").get("latency") == pytest.approx(0.04)
    assert config.for_case("x", "other", "nightly").alpha == 0.01
    smoke = config.for_case("x", "mlp-classic", "smoke")
    assert smoke.get("latency") == pytest.approx(0.08) and smoke.get("compile_time") == pytest.approx(0.30)
    deep = config.for_case("mlp-deep/forward/inductor/cpu/float32/bs64/tiny", "mlp-deep", "smoke")
    assert deep.get("latency") == pytest.approx(0.12) and not deep.enabled("peak_memory")
    assert deep.get("graph_breaks") == 2 and deep.get("speedup") == pytest.approx(0.05)


@pytest.mark.parametrize("text, where", [
    ('[suite.smoke]\nlatency = "fast"\n', "suite.smoke.latency"),
    ('[workload.x]\nlatncy = "5%"\n', "unknown metric 'latncy'"),
    ('[defaults]\ngraph_breaks = 1.5\n', "defaults.graph_breaks"),
    ('[defaults]\nalpha = 2\n', "defaults.alpha"),
    ('[sweet.smoke]\nlatency = "5%"\n', "unknown section [sweet]"),
    ('[suite.smoke\nlatency = "5%"\n', "invalid TOML"),
    ('[defaults]\nlatency = "-5%"\n', "defaults.latency"),
])
def test_threshold_errors_name_file_and_key(tmp_path, text, where):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ThresholdConfigError) as info:
        load_thresholds(path)
    message = str(info.value)
    assert str(path) in message and where in message and "\n" not in message


def test_missing_thresholds_file():
    with pytest.raises(ThresholdConfigError, match="no such thresholds file"):
        load_thresholds("/nonexistent/t.toml")


# ---------------------------------------------------------------- noise


def _aa_runs(n_runs: int, process_spread: float, seed: int = 0) -> list[Run]:
    """Runs of the same code whose per-process level wanders by process_spread (log-sd)."""
    rng = np.random.default_rng(seed)
    case = synthetic_case(0)
    runs = []
    for i in range(n_runs):
        level = float(np.exp(rng.normal(0, process_spread)))
        record = synthetic_record(case, rng, compiled_median=5e-4 * level, eager_median=1e-3 * level)
        runs.append(Run(f"aa{i}", "2026-01-01T00:00:00+00:00", "aa", dict(SYNTHETIC_ENV), {}, [record]))
    return runs


def test_noise_flags_what_a_threshold_cannot_resolve(tmp_path):
    quiet = analyze_noise(_aa_runs(8, 0.005), rounds=4)["cases"]["synth0/forward/inductor/cpu/float32/bs8/tiny"]
    loud = analyze_noise(_aa_runs(8, 0.15), rounds=4)["cases"]["synth0/forward/inductor/cpu/float32/bs8/tiny"]
    assert quiet["too_noisy"] == [] and quiet["metrics"]["latency"]["mdc_single"] < 0.05
    assert "latency" in loud["too_noisy"] and loud["metrics"]["latency"]["mdc_single"] > 0.05
    # speedup is a ratio within each process: the process-level wander cancels
    assert loud["metrics"]["speedup"]["mdc_single"] < 0.05
    path = save_noise(analyze_noise(_aa_runs(8, 0.15), rounds=4), tmp_path / "noise.json")
    table = load_noise_table(path)
    base, head = synthetic_run(1, 1), synthetic_run(1, 2)
    flags = compare_runs([base], [head], noise=table).cases[0].flags
    assert any(f.startswith("too noisy to judge: latency: A/A noise") for f in flags)


def test_noise_band_is_measured_on_what_compare_judges():
    """Processes of the same code on a machine whose speed wanders 1.4x, which the probe sees:
    compare divides that out, so the A/A band for latency must be the normalised one (a raw
    band would call every whole-model +15% `noisy`). Compile time: CPU seconds on CPU cases,
    as compare judges them, not the wall seconds that waited for a core."""
    rng = np.random.default_rng(5)
    case = synthetic_case(0)
    runs = []
    for i, speed in enumerate([1.0, 1.4, 1.0, 1.4, 1.05, 1.35, 1.0, 1.4]):
        record = synthetic_record(case, rng, compiled_median=5e-4 * speed, eager_median=1e-3 * speed,
                                  probe_median=1e-4 * speed, spread=0.01, compile_time=2.0 * speed, compile_cpu=1.0,
                                  compile_spread=0.005)
        runs.append(Run(f"aa{i}", "2026-01-01T00:00:00+00:00", "aa", dict(SYNTHETIC_ENV), {}, [record]))
    metrics = analyze_noise(runs, rounds=4)["cases"][case.case_id]["metrics"]
    assert metrics["latency"]["normalised_by_probe"] and metrics["latency"]["mdc_single"] < 0.05
    assert metrics["latency"]["cv"] > 0.1  # the raw per-process spread is still reported
    assert metrics["compile_time"]["mdc_single"] < 0.05  # CPU seconds held; wall seconds moved 40%
    off = analyze_noise(runs, 4, config_from_dict({"defaults": {"probe": "off"}}))
    assert off["cases"][case.case_id]["metrics"]["latency"]["mdc_single"] > 0.3  # compare would not divide


def test_a_single_process_change_inside_the_measured_aa_band_is_noisy_and_beyond_it_decides():
    """compare --noise: one process per side, compiled +7% with eager and the probe held: a
    regression without the noise file; `noisy` when this machine's A/A band is 9%; still a
    regression at +15%. With 4 processes a side the per-process test already sees that noise."""
    case = synthetic_case(0)
    band = {case.case_id: {"latency": 0.09, "speedup": 0.09}}

    def runs(compiled: float, n_proc: int, seed: int) -> list[Run]:
        rng = np.random.default_rng(seed)
        return [Run(f"r{seed}-{i}", "2026-01-01T00:00:00+00:00", "x", dict(SYNTHETIC_ENV), {},
                    [synthetic_record(case, rng, compiled_median=compiled, spread=0.01, probe_median=1e-4)])
                for i in range(n_proc)]

    base, small, large = runs(5e-4, 1, 1), runs(5.35e-4, 1, 2), runs(5.75e-4, 1, 3)
    assert compare_runs(base, small).cases[0].metric("latency").verdict == "regression"
    inside = compare_runs(base, small, noise=band).cases[0].metric("latency")
    assert inside.verdict == "noisy" and "A/A band" in inside.note and "9.0%" in inside.note
    assert compare_runs(base, large, noise=band).cases[0].metric("latency").verdict == "regression"
    per_process = compare_runs(runs(5e-4, 4, 4), runs(5.35e-4, 4, 5), noise=band).cases[0].metric("latency")
    assert per_process.verdict == "regression" and "A/A band" not in per_process.note


def test_noise_from_runs_cli(tmp_path, capsys):
    for i, run in enumerate(_aa_runs(6, 0.01)):
        save_run(run, tmp_path / "aa" / f"{i}.json")
    out = tmp_path / "noise.json"
    assert main(["noise", "--from-runs", str(tmp_path / "aa"), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["cases"]
    assert "A/A noise" in capsys.readouterr().out


# ---------------------------------------------------------------- ab


def test_ab_schedule_alternates_per_case_and_round():
    cases = [synthetic_case(i) for i in range(3)]
    plan = schedule(cases, rounds=4)
    assert len(plan) == 3 * 4 * 2
    firsts = [plan[i][2] for i in range(0, len(plan), 2)]
    assert firsts[:3] == ["base", "head", "base"] and firsts[3:6] == ["head", "base", "head"]
    assert Counter(firsts) == {"base": 6, "head": 6}  # neither side always goes first
    for r in range(4):  # every case measured once per side per round
        got = Counter((c.case_id, s) for rr, c, s in plan if rr == r)
        assert set(got.values()) == {1} and len(got) == 6


def test_ab_env_pairs():
    assert parse_env_pairs(["A=1", "B=x=y"], "--head-env") == {"A": "1", "B": "x=y"}
    with pytest.raises(AbError, match="--head-env 'oops' is not KEY=VALUE"):
        parse_env_pairs(["oops"], "--head-env")


def test_ab_bad_python_is_a_usage_error(tmp_path, capsys):
    rc = main(["ab", "--base-python", "/nonexistent/python", "--head-python", sys.executable, "-w", "mlp-classic",
               "--out", str(tmp_path)])
    assert rc == 2
    assert "/nonexistent/python" in capsys.readouterr().err


def test_ab_and_friends_take_the_case_selection_run_takes():
    """A bf16 LLM case on a GPU needs --dtype; ab, noise, versions and bisect share the
    selection options, and they reach the plan (found when `ab --dtype bfloat16` was refused)."""
    from harness.cli.common import Parser
    from harness.cli.compare import run_options_from, selection_options
    from harness.run.runner import plan_cases

    parser = Parser(prog="compilebench ab")
    selection_options(parser)
    args = parser.parse_args(["-w", "gpt2", "--scenario", "decode", "--size", "tiny", "--dtype", "bfloat16",
                              "--batch-size", "2", "--option", "new_tokens=4"])
    opts = run_options_from(args)
    (case,), _ = plan_cases(opts)
    assert (case.dtype, case.batch_size, dict(case.options).get("new_tokens")) == ("bfloat16", 2, 4)
    with pytest.raises(UserError, match="--batch-size 'x' is not a positive integer"):
        run_options_from(parser.parse_args(["--batch-size", "x"]))


# ---------------------------------------------------------------- expected counts


def _suite_run(run_id: str, **kwargs) -> Run:
    rng = np.random.default_rng(0)
    records = [synthetic_record(synthetic_case(i), rng, **kwargs) for i in range(3)]
    return Run(run_id, "2026-01-01T00:00:00+00:00", run_id, dict(SYNTHETIC_ENV), {"suite": "synthetic"}, records)


def test_expected_update_then_check(tmp_path):
    path = tmp_path / "synthetic-cpu.json"
    data = update([_suite_run("a", graph_breaks=1)], path)
    assert data["format"] == EXPECTED_FORMAT and len(data["cases"]) == 3
    assert check(_suite_run("b", graph_breaks=1), path).differences == []
    report = check(_suite_run("c", graph_breaks=2, accuracy="fail"), path)
    assert len(report.differences) == 6 and any("graph_breaks expected 1, got 2" in d for d in report.differences)
    partial = _suite_run("d", graph_breaks=1)
    partial.records = partial.records[:2]
    report = check(partial, path)
    assert not report.failed() and report.failed(complete=True) and len(report.missing) == 1


def test_expected_cli(tmp_path, capsys):
    save_run(_suite_run("good", graph_breaks=1), tmp_path / "good.json")
    save_run(_suite_run("bad", recompiles=3, graph_breaks=1), tmp_path / "bad.json")
    file = tmp_path / "exp.json"
    assert main(["expected", "update", str(tmp_path / "good.json"), "--file", str(file)]) == 0
    assert main(["expected", "check", str(tmp_path / "good.json"), "--file", str(file)]) == 0
    assert main(["expected", "check", str(tmp_path / "bad.json"), "--file", str(file)]) == 1
    assert "recompiles expected 0, got 3" in capsys.readouterr().out
    assert main(["expected", "check", str(tmp_path / "good.json"), "--file", str(tmp_path / "none.json")]) == 2


# ---------------------------------------------------------------- pytest-benchmark


def test_export_import_round_trip_keeps_samples_and_metrics():
    run = synthetic_run(3, 4, run_id="orig")
    data = export_run(run)
    assert len(data["benchmarks"]) == 6
    bench = data["benchmarks"][0]
    assert bench["stats"]["data"] == run.records[0].compiled["samples_s"]
    assert bench["stats"]["median"] == pytest.approx(float(np.median(run.records[0].compiled["samples_s"])))
    back = import_data(json.loads(json.dumps(data)), "x.json")
    assert [r.case_id for r in back.records] == [r.case_id for r in run.records]
    assert back.records[0].eager["samples_s"] == run.records[0].eager["samples_s"]
    assert back.records[0].metrics["speedup"] == pytest.approx(run.records[0].metrics["speedup"])
    cmp = compare_runs([run], [back])  # the re-imported run is the same measurement
    assert cmp.counts() == {"unchanged": 3}


def test_import_foreign_pytest_benchmark_file():
    data = {"machine_info": {"node": "h", "cpu": {"brand_raw": "CPU X"}}, "benchmarks": [
        {"name": "test_sum", "stats": {"median": 0.5, "data": [0.4, 0.5, 0.6]}, "extra_info": {}},
        {"name": "test_nodata", "stats": {"median": 0.2}},
    ]}
    run = import_data(data, "foreign.json")
    assert [r.case.workload for r in run.records] == ["test_sum", "test_nodata"]
    assert run.records[0].compiled["samples_s"] == [0.4, 0.5, 0.6]
    assert run.environment["cpu_model"] == "CPU X"
    with pytest.raises(PytestBenchmarkFileError, match="benchmarks\\[0\\] is malformed"):
        import_data({"benchmarks": [{"name": "x"}]}, "bad.json")
    with pytest.raises(PytestBenchmarkFileError, match="not a pytest-benchmark JSON"):
        import_data({"records": []}, "bad.json")


def test_each_nights_pytest_benchmark_file_of_one_name_is_a_run_of_its_own(tmp_path, capsys):
    """`pytest --benchmark-json=bench.json` writes the same name every night: its imports used
    to share the run id `pytest-benchmark-bench`, each overwriting the last in runs/ and the store."""
    def night(day: int, name: str) -> Path:
        folder = tmp_path / f"night{day}"
        folder.mkdir()
        (folder / "bench.json").write_text(json.dumps({
            "datetime": f"2026-12-0{day}T03:00:00+00:00", "machine_info": {"node": "h"},
            "benchmarks": [{"name": name, "stats": {"median": 0.5, "data": [0.4, 0.5, 0.6]}}]}))
        return folder / "bench.json"

    out = tmp_path / "results"
    first, second = night(1, "test_a"), night(2, "test_b")
    for path in (first, second, first):  # the first again: the same run, not a third
        assert main(["import-pytest-benchmark", str(path), "--out", str(out)]) == 0
    runs = sorted(p.name for p in (out / "runs").glob("*.json"))
    assert len(runs) == 2 and runs[0].startswith("20261201-030000-pytest-benchmark-"), runs
    assert runs[1].startswith("20261202-030000-pytest-benchmark-")
    from harness.run.lookup import resolve_run

    assert [r.case.workload for r in resolve_run("latest~1", out).records] == ["test_a"]
    assert [r.case.workload for r in resolve_run("latest", out).records] == ["test_b"]


def test_pytest_benchmark_compare_reads_exports(tmp_path):
    """The exported files are what `pytest-benchmark compare` expects (its own CLI)."""
    a, b = tmp_path / "0001_a.json", tmp_path / "0002_b.json"
    save_run(synthetic_run(2, 1, run_id="a"), tmp_path / "a_run.json")
    save_run(synthetic_run(2, 2, run_id="b", slowdown=0.5), tmp_path / "b_run.json")
    assert main(["export-pytest-benchmark", str(tmp_path / "a_run.json"), "-o", str(a)]) == 0
    assert main(["export-pytest-benchmark", str(tmp_path / "b_run.json"), "-o", str(b)]) == 0
    exe = [sys.executable, "-m", "pytest_benchmark", "compare", str(a), str(b), "--columns", "median"]
    out = subprocess.run(exe, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "synth0/forward/inductor/cpu/float32/bs8/tiny[compiled]" in out.stdout


# ---------------------------------------------------------------- CI workflows


def test_workflows_validate_against_the_github_schema():
    """actionlint needs a download from GitHub; check-jsonschema ships the workflow schema."""
    root = Path(__file__).resolve().parent.parent / ".github" / "workflows"
    files = sorted(str(p) for p in root.glob("*.yml"))
    assert len(files) >= 2
    cmd = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", *files]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_compare_run_ids_from_the_history_store(tmp_path):
    """A run id that has no run file left is loaded from OUT/history.sqlite."""
    from harness.run.store import HistoryStore

    with HistoryStore(tmp_path / "history.sqlite") as store:
        store.ingest(synthetic_run(2, 1, run_id="stored-base"))
        store.ingest(synthetic_run(2, 2, run_id="stored-head", slowdown=0.3))
    assert main(["compare", "stored-base", "stored-head", "--out", str(tmp_path)]) == 1
    assert main(["compare", "stored-base", "nope", "--out", str(tmp_path)]) == 2


def test_terminal_output_names_too_noisy_cases(tmp_path, capsys):
    save_run(synthetic_run(1, 1, run_id="a"), tmp_path / "a.json")
    save_run(synthetic_run(1, 2, run_id="b"), tmp_path / "b.json")
    noise = save_noise(analyze_noise(_aa_runs(8, 0.15), rounds=4), tmp_path / "noise.json")
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--noise", str(noise)]) == 0
    assert "synth0/forward/inductor/cpu/float32/bs8/tiny: too noisy to judge: latency" in capsys.readouterr().out
