"""The nightly workflow's steps, rehearsed on CPU (.ci/nightly_local.py runs its jobs and
`run:` steps in order; .ci/nightly.sh holds every decision).

Fast tests replace `compilebench run` with SYNTHETIC runs of a known change
(tests/nightly_fake_run.py); every other command (gate, merge, dashboard, the store) is real.
The slow test runs two real nights of tiny mlp-classic cases.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.model.schema import load_run, save_run
from harness.run.store import HistoryStore
from harness.testing.synthetic import synthetic_run

REPO = Path(__file__).resolve().parent.parent
FAKE = REPO / "tests" / "nightly_fake_run.py"
GPU_VARS = ['COMPILEBENCH_GPU_RUNNER_LABELS=["local"]', "COMPILEBENCH_GPU_SHARDS=[1, 2]"]


def _load_runner():
    spec = importlib.util.spec_from_file_location("nightly_local", REPO / ".ci" / "nightly_local.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["nightly_local"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


nightly_local = _load_runner()


def rehearse(state: Path, night: int, env: dict[str, str], gpu: bool = True) -> tuple[int, dict]:
    args = [sys.executable, str(REPO / ".ci" / "nightly_local.py"), "--state", str(state), "--night", str(night),
            "--skip-step", "Expected counts"]  # needs a real suite's committed expected file
    for var in GPU_VARS if gpu else GPU_VARS[1:]:
        args += ["--var", var]
    for key, value in env.items():
        args += ["--env", f"{key}={value}"]
    proc = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=900)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads((state / "nights" / str(night) / "result.json").read_text())


def step(result: dict, job: str, name: str, instance: int = 0) -> dict:
    return next(s for s in result["jobs"][job][instance]["steps"] if s["name"] == name)


def fake_env(slowdown: float, seed: int) -> dict[str, str]:
    return {"COMPILEBENCH": f"python {FAKE}", "NIGHTLY_GPU_RUN": f"python {FAKE} run",
            "FAKE_SLOWDOWN": str(slowdown), "FAKE_SEED": str(seed)}


def tonight(result: dict, job: str, suite: str) -> str:
    workspace = Path(result["jobs"][job][0]["workspace"])
    return (workspace / "results" / "nightly" / f"{suite}.tonight").read_text().strip()


def test_two_nights_compare_from_the_store_and_a_regression_fails_the_job(tmp_path):
    code1, night1 = rehearse(tmp_path, 1, fake_env(0.0, 1))
    assert code1 == 0, night1["results"]
    assert night1["results"] == {"cpu": "success", "gpu-plan": "success", "gpu-shard": "success",
                                 "merge": "success", "publish": "success"}
    assert "no previous night labelled nightly-cpu" in step(night1, "cpu", "Compare cpu with the previous night")["log"]

    # the shards ran `--shard auto` from the matrix variables, and merged into one run
    merge_ws = Path(night1["jobs"]["merge"][0]["workspace"])
    merged = load_run(merge_ws / "results" / "merged-gpu.json")
    assert len(merged.records) == 4 and merged.config["shards"]["missing_shards"] == []
    shards = [load_run(f) for f in sorted((merge_ws / "shards").glob("*.json"))]
    assert sorted(r.config["shard"]["index"] for r in shards) == [1, 2]
    assert {r.config["shard"]["from"] for r in shards} == {"COMPILEBENCH_SHARD_INDEX/COUNT"}
    assert night1["runs_on"]["gpu-shard"] == ["local"]

    # night 2: compiled code 50% slower; only history.sqlite came over from night 1
    code2, night2 = rehearse(tmp_path, 2, fake_env(0.5, 2))
    assert code2 == 1
    assert night2["results"]["cpu"] == "failure" and night2["results"]["merge"] == "failure"
    cpu_ws = Path(night2["jobs"]["cpu"][0]["workspace"])
    prev_cpu = tonight(night1, "cpu", "cpu")
    assert not (cpu_ws / "results" / "runs" / f"{prev_cpu}.json").exists()  # store-only: read from history
    compare = step(night2, "cpu", "Compare cpu with the previous night")
    assert compare["exit_code"] == 1
    assert f"previous night {prev_cpu} -> tonight {tonight(night2, 'cpu', 'cpu')}" in compare["log"]
    assert "::error::compare cpu: REGRESSION" in compare["log"]
    assert "## compilebench gate" in compare["summary"] and "regression" in compare["summary"]
    gpu_compare = step(night2, "merge", "Compare gpu with the previous night")
    assert gpu_compare["exit_code"] == 1 and tonight(night1, "merge", "gpu") in gpu_compare["log"]
    # a regression still publishes the dashboard and keeps the history (if: always())
    assert step(night2, "merge", "Dashboard from the merged history")["outcome"] == "success"
    assert (tmp_path / "cache" / "history-000002-1" / "results" / "history.sqlite").is_file()
    with HistoryStore(tmp_path / "cache" / "history-000002-1" / "results" / "history.sqlite") as store:
        assert len(store.run_ids()) == 6  # smoke, cpu, merged gpu, two nights


def run_compare_step(out: Path, suite: str) -> subprocess.CompletedProcess:
    """The workflow's own compare step for `suite`, run in a folder holding OUT=results."""
    script = nightly_local.find_step("cpu", f"Compare {suite} with the previous night")["run"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OUT": "results",
           "GITHUB_STEP_SUMMARY": str(out.parent / "summary.md"),
           "PATH": f"{nightly_local.shims(out.parent / 'state')}{os.pathsep}{os.environ['PATH']}"}
    (out.parent / ".ci").exists() or (out.parent / ".ci").symlink_to(REPO / ".ci")
    return subprocess.run(["bash", "-e", "-c", script], cwd=out.parent, env=env, capture_output=True, text=True)


def store_nights(out: Path, *runs) -> None:
    with HistoryStore(out / "history.sqlite") as store:
        for run in runs:
            store.ingest(run)
    (out / "nightly").mkdir(parents=True, exist_ok=True)
    (out / "nightly" / "cpu.tonight").write_text(runs[-1].run_id + "\n")


def labelled(run, label: str, created: str):
    return dataclasses.replace(run, label=label, created_at=created)


def test_compare_step_exit_3_is_a_failed_job_not_a_regression(tmp_path):
    out = tmp_path / "results"
    prev = labelled(synthetic_run(3, 1, run_id="20261201-031700-nightly-cpu-aaaaaa"), "nightly-cpu",
                    "2026-12-01T03:17:00+00:00")
    head = labelled(synthetic_run(3, 2, run_id="20261202-031700-nightly-cpu-bbbbbb", slowdown=0.5), "nightly-cpu",
                    "2026-12-02T03:17:00+00:00")
    store_nights(out, prev, head)
    # the gate cannot write its JSON verdict (a folder is in the way): exit 3 even though
    # the runs hold a real regression, and the step must not call it one
    (out / "nightly" / "cpu.compare.json").mkdir()
    proc = run_compare_step(out, "cpu")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "could not compare (exit 3" in proc.stdout and "this is NOT a regression" in proc.stdout
    assert "REGRESSION" not in proc.stdout


def test_compare_step_without_tonights_run_is_exit_3(tmp_path):
    out = tmp_path / "results"
    save_run(synthetic_run(2, 1, run_id="x"), out / "runs" / "x.json")
    proc = run_compare_step(out, "cpu")
    assert proc.returncode == 3
    assert "tonight's run is missing" in proc.stdout


def test_a_damaged_history_fails_the_run_step_with_exit_3(tmp_path):
    (tmp_path / "cache" / "history-0" / "results").mkdir(parents=True)
    (tmp_path / "cache" / "history-0" / "results" / "history.sqlite").write_bytes(b"not a database" * 100)
    code, night = rehearse(tmp_path, 1, fake_env(0.0, 1), gpu=False)
    run = step(night, "cpu", "Run the smoke suite")
    assert code == 1 and run["exit_code"] == 3
    assert "cannot read results" in run["log"]
    assert step(night, "cpu", "Compare smoke with the previous night")["exit_code"] == 3


def test_the_runner_refuses_what_it_cannot_emulate(tmp_path):
    workflow = tmp_path / "wf.yml"
    workflow.write_text("jobs:\n  a:\n    runs-on: x\n    steps:\n      - uses: some/action@v1\n")
    night = nightly_local.Night(tmp_path, 1, {}, {}, {})
    with pytest.raises(nightly_local.WorkflowError, match="does not emulate some/action"):
        nightly_local.rehearse(night, workflow)


def test_expressions():
    ctx = nightly_local.Context({"vars": {"A": ""}, "inputs": {"B": "[1, 2]"}, "needs": {"j-1": {"result": "skipped"}}})
    assert ctx.substitute("${{ fromJSON(vars.A || inputs.B || '[3]') }}") == [1, 2]
    assert ctx.substitute("${{ vars.A || '--x' }}") == "--x"
    assert ctx.substitute("${{ needs.j-1.result != 'skipped' }}") is False
    assert ctx.condition("always() && needs.j-1.result == 'skipped'")
    ctx.job_ok = False
    assert not ctx.condition("needs.j-1.result == 'skipped'")  # implicit success() &&
    assert ctx.substitute("shard ${{ vars.A }}x") == "shard x"


@pytest.mark.slow
def test_two_real_nights_of_tiny_cases(tmp_path):
    """Real `compilebench run` (tiny mlp-classic on CPU) through the workflow's steps: night 2
    compares with night 1 from the store; the GPU matrix runs the same cases on CPU in 2 shards."""
    select = "-w mlp-classic -c eager --scenario forward --size tiny"
    env = {"NIGHTLY_SELECT": select, "HF_HUB_OFFLINE": "1",
           "NIGHTLY_GPU_RUN": "compilebench run -w mlp-classic -c eager -c inductor --scenario forward --size tiny"}
    code1, night1 = rehearse(tmp_path, 1, env, gpu=False)
    assert code1 == 0, night1["results"]
    code2, night2 = rehearse(tmp_path, 2, env)
    compare = step(night2, "cpu", "Compare cpu with the previous night")
    assert f"previous night {tonight(night1, 'cpu', 'cpu')} -> tonight {tonight(night2, 'cpu', 'cpu')}" in compare["log"]
    verdict = json.loads((Path(night2["jobs"]["cpu"][0]["workspace"]) / "results" / "nightly" /
                          "cpu.compare.json").read_text())
    # real noise decides the verdict; the step's exit must follow it either way
    assert compare["exit_code"] == (1 if verdict["failed"] else 0), verdict["headline"]
    merged = load_run(Path(night2["jobs"]["merge"][0]["workspace"]) / "results" / "merged-gpu.json")
    assert sorted(r.case.compiler for r in merged.records) == ["eager", "inductor"]
    assert all(r.status == "ok" for r in merged.records)
    shutil.rmtree(tmp_path / "nights")
