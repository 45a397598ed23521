"""The real path on CPU: worker processes, tiny models, eager vs inductor."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.model.schema import load_run
from harness.run.runner import RunOptions, execute, plan_cases

WORKLOADS = str(Path(__file__).parent / "workloads" / "core_cases.py")
FAST = {"min_time_s": 0.05, "min_samples": 5, "max_samples": 50, "warmup": 1, "max_time_s": 3.0}


def _run(results_dir, **kw):
    opts = RunOptions(out_dir=str(results_dir), policy=FAST, devices=["cpu"], **kw)
    return execute(opts)


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    return _run(out, workloads=["mlp-classic"], scenarios=["forward", "train"], compilers=["inductor"],
                sizes=["tiny"]), out


@pytest.mark.compat  # compile metrics
def test_mlp_eager_vs_inductor_forward_and_train(mlp_run):
    run, out = mlp_run
    by_scenario = {r.case.scenario: r for r in run.records}
    assert set(by_scenario) == {"forward", "train"}
    for r in run.records:
        assert r.status == "ok", r.error
        m = r.metrics
        assert m["speedup"] > 0 and m["speedup_ci_low"] <= m["speedup"] <= m["speedup_ci_high"]
        assert len(r.eager["samples_s"]) >= 5 and len(r.compiled["samples_s"]) >= 5
        assert m["compile_time_s"] > 0 and m["compile_breakdown_s"]["total"] > 0
        assert m["accuracy"]["status"] == "pass"
        assert r.eager["peak_memory_bytes"] > 0 and r.compiled["peak_memory_bytes"] > 0
        assert m["throughput_unit"] == "samples/s" and m["throughput"] > 0
        assert m["isa_probe_s"] is not None  # probed before the clock, reported apart
    # the compiled train step breaks at backward() and in the optimizer: reported, with locations
    train = by_scenario["train"]
    assert train.metrics["graph_breaks"] >= 1
    assert any("backward" in b["reason"] for b in train.graph_break_reasons)
    assert (out / "runs" / f"{run.run_id}.json").exists()
    assert (out / "history.sqlite").exists()
    assert load_run(out / "runs" / f"{run.run_id}.json").to_dict()["records"][0]["case_id"]


@pytest.mark.compat  # compile metrics
def test_known_graph_breaks_are_counted_exactly(known_breaks_run):
    run, _ = known_breaks_run  # conftest.py: the real run, shared with test_expected
    (r,) = run.records
    assert r.status == "ok", r.error
    assert r.metrics["graph_breaks"] == 2
    assert r.metrics["unique_graph_breaks"] == 1  # same reason (print), two places
    locations = sorted(b["location"] for b in r.graph_break_reasons)
    assert len(locations) == 2 and all(loc.startswith(WORKLOADS + ":") for loc in locations)
    assert all("print" in b["reason"] for b in r.graph_break_reasons)
    assert r.metrics["graphs"] == 3  # before, between and after the two prints


def test_known_buffer_shows_in_peak_memory(results_dir):
    # spawned: one case (a forked case's peak equals a spawned one's: tests/test_forkserver_memory.py)
    run = _run(results_dir, workloads=["big-buffer"], workload_files=[WORKLOADS], compilers=["eager"], preload=False)
    (r,) = run.records
    assert r.status == "ok", r.error
    assert r.eager["peak_memory_delta_bytes"] >= 256 * 1024 * 1024 * 0.95
    assert r.compiled is None and r.metrics.get("speedup") is None


def test_crash_and_raise_are_statuses_and_others_finish(results_dir):
    run = _run(results_dir, workloads=["crashes", "raises", "tiny-ok"], workload_files=[WORKLOADS],
               compilers=["eager"])
    statuses = {r.case.workload: r for r in run.records}
    assert statuses["crashes"].status == "crashed"
    assert "SIGSEGV" in statuses["crashes"].error["message"]
    assert statuses["raises"].status == "fail_run"
    assert statuses["raises"].error["type"] == "RuntimeError"
    assert "factory failed on purpose" in statuses["raises"].error["traceback"]
    assert statuses["raises"].error["phase"] == "build"
    assert statuses["tiny-ok"].status == "ok"
    assert len(load_run(results_dir / "runs" / f"{run.run_id}.json").records) == 3


def test_timeout_kills_the_worker(results_dir, tmp_path):
    hang = tmp_path / "hang.py"
    hang.write_text(
        "import time\nfrom harness import workload\n"
        "@workload('hangs', scenarios=('forward',))\ndef f(ctx):\n    time.sleep(600)\n"
    )
    # the spawned path's timeout (test_faults and test_forkserver time out forked cases)
    opts = RunOptions(out_dir=str(results_dir), policy=FAST, devices=["cpu"], workloads=["hangs"],
                      workload_files=[str(hang)], compilers=["eager"], timeout_s=5, preload=False)
    (r,) = execute(opts).records
    assert r.status == "timeout" and "--timeout 5s" in r.error["message"]
    assert r.worker["wall_s"] < 30


def test_plan_smoke_suite():
    cases, policy = plan_cases(RunOptions(suite="smoke"))
    ids = {c.case_id for c in cases}
    assert "mlp-classic/forward/inductor/cpu/float32/bs16/tiny" in ids
    assert "mlp-deep/train/inductor/cpu/float32/bs64/tiny" in ids
    assert policy["min_time_s"] > 0


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize(
    "args, needle",
    [(["run", "--suite", "smok"], "did you mean smoke"),
     (["run", "--workload", "mlp-clasic"], "did you mean mlp-classic"),
     (["run", "--workload", "mlp-classic", "--compiler", "inductr"], "did you mean inductor"),
     (["run", "--workload", "mlp-classic", "--device", "cdua"], "did you mean cuda"),
     (["run", "--workload", "mlp-classic", "--dtype", "float8"], "--dtype"),
     (["run", "--workload", "mlp-classic", "--batch-size", "zero"], "--batch-size"),
     (["run", "--workload-file", "/nonexistent.py"], "no such file"),
     (["show", "no-such-run"], "no such run file"),
     (["run", "--bogus"], "unrecognized arguments")],
)
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path):
    proc = _cli(*args, "--out", str(tmp_path)) if args[0] in ("run", "show") and "--bogus" not in args else _cli(*args)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (tmp_path / "runs").exists()  # no partial output


def test_cli_run_workload_file_show_and_report(tmp_path):
    out = tmp_path / "res"
    proc = _cli("run", "--workload-file", WORKLOADS, "--workload", "tiny-ok", "--compiler", "inductor",
                "--min-time", "0.05", "--out", str(out), "--report", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    (run_file,) = (out / "runs").glob("*.json")
    data = json.loads(run_file.read_text())
    assert data["records"][0]["status"] == "ok"
    assert data["environment"]["packages"]["torch"]
    show = _cli("show", run_file.stem, "--out", str(out))
    assert show.returncode == 0 and "tiny-ok" in show.stdout
    html = (tmp_path / "r.html").read_text()
    assert "<svg" in html and "tiny-ok" in html and "http://" not in html.split("<svg")[0]
    assert _cli("list").returncode == 0
