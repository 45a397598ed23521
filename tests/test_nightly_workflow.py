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
def test_two_real_nights_of_tiny_cases(tmp_path, no_background_run):
    """Real `compilebench run` (tiny mlp-classic on CPU) through the workflow's steps: night 2
    compares with night 1 from the store; the GPU matrix runs the same cases on CPU in 2 shards.
    Night 1 must be judgeable to be night 2's base, so it must not be contended: the test waits
    for the background runs (a night run beside one was contended, and night 2 found no base)."""
    select = "-w mlp-classic -c eager --scenario forward --size tiny"
    # each run step is one case: spawned, that costs less than starting a preloaded server
    # (test_forkserver holds the two paths equal)
    env = {"NIGHTLY_SELECT": select, "HF_HUB_OFFLINE": "1", "COMPILEBENCH_NO_PRELOAD": "1",
           "NIGHTLY_GPU_RUN": "compilebench run -w mlp-classic -c eager -c inductor --scenario forward --size tiny"}
    code1, night1 = rehearse(tmp_path, 1, env, gpu=False)
    assert code1 == 0, night1["results"]
    code2, night2 = rehearse(tmp_path, 2, env)
    compare = step(night2, "cpu", "Compare cpu with the previous night")
    assert f"previous night {tonight(night1, 'cpu', 'cpu')} -> tonight {tonight(night2, 'cpu', 'cpu')}" in compare["log"]
    verdict = json.loads((Path(night2["jobs"]["cpu"][0]["workspace"]) / "results" / "nightly" /
                          "cpu.compare.json").read_text())
    # real noise decides the verdict; the step's exit must follow it either way
    # (a loaded box reads "machine contended": cannot judge, exit 3, as the CI contract says)
    assert compare["exit_code"] == {"fail": 1, "cannot judge": 3}.get(verdict["outcome"], 0), verdict["headline"]
    merged = load_run(Path(night2["jobs"]["merge"][0]["workspace"]) / "results" / "merged-gpu.json")
    assert sorted(r.case.compiler for r in merged.records) == ["eager", "inductor"]
    assert all(r.status == "ok" for r in merged.records)
    shutil.rmtree(tmp_path / "nights")


# ---------------------------------------------------------------- the base night (issue 23, review item 3)

def contended(run):
    for rec in run.records:
        rec.metrics["contention"] = {"contended": True, "cpu_wait_fraction": 0.5, "threshold": 0.15}
    return run


def all_failed(run):
    for rec in run.records:
        rec.status = "fail_run"
    return run


def cpu_night(day: int, seed: int, slowdown: float = 0.0, spoil=None):
    run = synthetic_run(3, seed, run_id=f"2026120{day}-031700-nightly-cpu-{day:06d}", slowdown=slowdown)
    run = labelled(run, "nightly-cpu", f"2026-12-0{day}T03:17:00+00:00")
    return spoil(run) if spoil else run


def test_compare_bases_on_the_last_judgeable_night_and_says_which(tmp_path):
    """Night 1 good, night 2 contended, night 3 every case failed, night 4 +50% slower: night 4 is
    judged against night 1 (a contended base would make it 'cannot judge', absorbing the regression)."""
    out = tmp_path / "results"
    nights = [cpu_night(1, 1), cpu_night(2, 2, spoil=contended), cpu_night(3, 3, spoil=all_failed),
              cpu_night(4, 4, slowdown=0.5)]
    store_nights(out, *nights)
    proc = run_compare_step(out, "cpu")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"base {nights[0].run_id}, the newest earlier nightly-cpu night that can be judged against" in proc.stdout
    assert "::error::compare cpu: REGRESSION" in proc.stdout
    summary = (tmp_path / "summary.md").read_text()
    assert f"- {nights[2].run_id}: no case ok (3 failed, 0 skipped)" in summary
    assert f"- {nights[1].run_id}: machine contended: 3 of 3 ok case(s)" in summary
    assert f"base {nights[0].run_id}" in summary


def test_compare_with_only_unjudgeable_earlier_nights_compares_nothing_and_says_so(tmp_path):
    out = tmp_path / "results"
    nights = [cpu_night(1, 1, spoil=contended), cpu_night(2, 2)]
    store_nights(out, *nights)
    proc = run_compare_step(out, "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "::warning::compare cpu: no earlier nightly-cpu night can be judged against" in proc.stdout
    assert f"- {nights[0].run_id}: machine contended" in proc.stdout


def test_a_contended_night_is_not_the_next_nights_base_through_the_workflow(tmp_path):
    code1, night1 = rehearse(tmp_path, 1, fake_env(0.0, 1), gpu=False)
    assert code1 == 0
    code2, night2 = rehearse(tmp_path, 2, {**fake_env(0.0, 2), "FAKE_CONTENDED": "1"}, gpu=False)
    assert step(night2, "cpu", "Compare cpu with the previous night")["exit_code"] == 3  # cannot judge tonight
    code3, night3 = rehearse(tmp_path, 3, fake_env(0.5, 3), gpu=False)
    compare = step(night3, "cpu", "Compare cpu with the previous night")
    assert compare["exit_code"] == 1, compare["log"]  # the regression is found, against night 1
    assert f"base {tonight(night1, 'cpu', 'cpu')}" in compare["log"]
    assert f"- {tonight(night2, 'cpu', 'cpu')}: machine contended" in compare["summary"]


# ---------------------------------------------------------------- failed cases fail the nightly (item 3)

def test_failed_cases_fail_the_first_night_unless_known(tmp_path):
    env = {**fake_env(0.0, 1), "FAKE_FAIL": "1"}
    code, night = rehearse(tmp_path / "a", 1, env, gpu=False)
    run = step(night, "cpu", "Run the smoke suite")
    assert code == 1 and run["exit_code"] == 1
    assert "::error::smoke: 1 case(s) failed tonight" in run["log"] and "synth0/forward" in run["log"]
    assert "synth0/forward" in run["summary"]
    # the smoke suite's failure does not stop the cpu suite (if: !cancelled())
    assert step(night, "cpu", "Run the cpu suite")["exit_code"] == 1
    # the first night compares nothing and says so; the failure is what turns the job red
    assert step(night, "cpu", "Compare cpu with the previous night")["exit_code"] == 0
    known = tmp_path / "known.txt"
    known.write_text("# fails since torch 2.13 (issue 99)\nsynth0/forward/*  # the first synthetic case\n")
    code, night = rehearse(tmp_path / "b", 1, {**env, "KNOWN_FAILURES": str(known)}, gpu=False)
    run = step(night, "cpu", "Run the smoke suite")
    assert code == 0 and run["exit_code"] == 0, run["log"]
    assert f"::warning::smoke: {tonight_case(night)} fail_run (a known failure, listed in {known})" in run["log"]


def tonight_case(night: dict) -> str:
    workspace = Path(night["jobs"]["cpu"][0]["workspace"])
    run = load_run(next((workspace / "results" / "runs").glob("*nightly-smoke*.json")))
    return next(r.case_id for r in run.records if r.status != "ok")


def test_a_named_known_failures_file_that_is_missing_is_bad_input(tmp_path):
    code, night = rehearse(tmp_path, 1, {**fake_env(0.0, 1), "KNOWN_FAILURES": str(tmp_path / "nope.txt")}, gpu=False)
    run = step(night, "cpu", "Run the smoke suite")
    assert run["exit_code"] == 2 and "KNOWN_FAILURES=" in run["log"] and "no such file" in run["log"]


def test_failed_gpu_cases_fail_the_merge_step(tmp_path):
    code, night = rehearse(tmp_path, 1, {**fake_env(0.0, 1), "FAKE_FAIL": "1"})
    merge = step(night, "merge", "Merge the gpu shards into one run")
    assert merge["exit_code"] == 1 and "::error::gpu: 2 case(s) failed tonight" in merge["log"]  # one per shard
    assert step(night, "merge", "Compare gpu with the previous night")["outcome"] == "success"  # still runs


# ---------------------------------------------------------------- a shard that wrote nothing (item 5)

def test_a_shard_that_wrote_no_run_file_fails_its_job_and_the_merge_says_what_is_missing(tmp_path):
    code, night = rehearse(tmp_path, 1, {**fake_env(0.0, 1), "FAKE_BROKEN_SHARD": "2"})
    assert code == 1 and night["results"]["gpu-shard"] == "failure"
    ok, broken = (next(s for s in inst["steps"] if s["name"].startswith("Run the gpu suite"))
                  for inst in night["jobs"]["gpu-shard"])
    assert ok["exit_code"] == 0
    assert broken["exit_code"] == 3, broken["log"]
    assert "::error::shard 2/2 of gpu wrote no run file" in broken["log"] and "some cases failed" not in broken["log"]
    merge = step(night, "merge", "Merge the gpu shards into one run")
    assert merge["exit_code"] == 3 and "shard(s) [2] of 2: 2 planned case(s) not run tonight" in merge["log"]
    # the cases that ran are still judged (the first night: nothing to compare), and the
    # incomplete merged run is in the store but never a base
    assert step(night, "merge", "Compare gpu with the previous night")["exit_code"] == 0
    merged = load_run(Path(night["jobs"]["merge"][0]["workspace"]) / "results" / "merged-gpu.json")
    assert merged.config["shards"]["missing_shards"] == [2] and merged.config["shards"]["allowed_missing"]


def run_shard_step(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    script = nightly_local.find_step("gpu-shard", "Run the gpu suite, shard ${{ matrix.shard }}")["run"]
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / ".ci").exists() or (tmp_path / ".ci").symlink_to(REPO / ".ci")
    full = {**os.environ, "PYTHONPATH": str(REPO), "OUT": "shard-results", "COMPILEBENCH_SHARD_INDEX": "2",
            "COMPILEBENCH_SHARD_COUNT": "2", "PATH": f"{nightly_local.shims(tmp_path / 'state')}{os.pathsep}"
            f"{os.environ['PATH']}", **env}
    return subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=full, capture_output=True, text=True)


def test_a_shard_step_checks_the_run_file_is_its_own(tmp_path):
    env = fake_env(0.0, 1)
    proc = run_shard_step(tmp_path, {**env, "FAKE_SHARD": "1/2"})
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "it is shard 1/2, not 2/2" in proc.stdout and "is not this shard's run file" in proc.stdout
    proc = run_shard_step(tmp_path / "ok", env)
    assert proc.returncode == 0 and "shard 2/2 of gpu: every case ok" in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------- the PR gate's expected counts (item 4)

PR_GATE = REPO / ".github" / "workflows" / "pr-gate.yml"


def pr_workspace(tmp_path: Path) -> Path:
    """$GITHUB_WORKSPACE with envs/head/bin/{compilebench,python} (the fake run) and a
    compilebench checkout holding the expected file of the synthetic suite."""
    bin_dir = tmp_path / "envs" / "head" / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in (("compilebench", f'exec "{sys.executable}" "{FAKE}" "$@"'), ("python", f'exec "{sys.executable}" "$@"')):
        (bin_dir / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    checkout = tmp_path / "compilebench"
    checkout.mkdir()
    (checkout / ".ci").symlink_to(REPO / ".ci")
    save_run(synthetic_run(4, 9, run_id="pinned"), checkout / "pinned.json")
    subprocess.run([str(bin_dir / "compilebench"), "expected", "update", "pinned.json"], cwd=checkout, check=True,
                   env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True)
    (checkout / "pinned.json").unlink()
    return tmp_path


def run_pr_expected_step(workspace: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    step_spec = nightly_local.find_step("ab", "Expected counts with the PR build (graph breaks, recompiles, accuracy)",
                                        PR_GATE)
    full = {**os.environ, "PYTHONPATH": str(REPO), "GITHUB_WORKSPACE": str(workspace),
            "GITHUB_STEP_SUMMARY": str(workspace / "summary.md"), **env}
    return subprocess.run(["bash", "-e", "-c", step_spec["run"]], cwd=workspace / step_spec["working-directory"],
                          env=full, capture_output=True, text=True)


def test_pr_gate_expected_checks_the_run_this_job_wrote(tmp_path):
    workspace = pr_workspace(tmp_path)
    proc = run_pr_expected_step(workspace, {})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "checking the run this job wrote" in proc.stdout and "expected counts match" in proc.stdout
    # a newer run file that matches the expected file is `latest`; this job's run has a failed case
    decoy = synthetic_run(4, 9, run_id="29991231-000000-decoy-aaaaaa")
    save_run(decoy, workspace / "compilebench" / "results" / "runs" / f"{decoy.run_id}.json")
    proc = run_pr_expected_step(workspace, {"FAKE_FAIL": "1"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "DIFFERENT" in proc.stdout and "decoy" not in proc.stdout


@pytest.mark.parametrize("code", [2, 3, 130])
def test_pr_gate_expected_does_not_swallow_a_run_that_could_not_run(tmp_path, code):
    workspace = pr_workspace(tmp_path)
    decoy = synthetic_run(4, 9, run_id="29991231-000000-decoy-aaaaaa")
    save_run(decoy, workspace / "compilebench" / "results" / "runs" / f"{decoy.run_id}.json")
    proc = run_pr_expected_step(workspace, {"FAKE_EXIT": str(code)})
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "::error::" in proc.stdout and "expected counts match" not in proc.stdout


# ---------------------------------------------------------------- the artifacts-mode PR gate

def _labelled_run(run_id: str, label: str, suite: str, cases: range, slowdown: float, seed: int):
    import numpy as np

    from harness.model.schema import Run
    from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record

    rng = np.random.default_rng(seed)
    records = [synthetic_record(synthetic_case(i, suite=suite), rng, compiled_median=5e-4 * (1 + slowdown))
               for i in cases]
    return Run(run_id, "2026-01-01T00:00:00+00:00", label, dict(SYNTHETIC_ENV), {"suite": suite}, records)


def run_artifacts_gate(tmp_path: Path, slowdown: float) -> subprocess.CompletedProcess:
    """The gate-artifacts job's Gate step on a downloaded nightly-runs artifact that holds the
    night's smoke run and its cpu run (cases 2-7, sharing 2-3 with smoke), and a PR smoke run."""
    base = tmp_path / "base" / "runs"
    base.mkdir(parents=True)
    save_run(_labelled_run("20260101-010000-nightly-smoke-aaaaaa", "nightly-smoke", "smoke", range(4), 0.0, 1),
             base / "20260101-010000-nightly-smoke-aaaaaa.json")
    save_run(_labelled_run("20260101-020000-nightly-cpu-bbbbbb", "nightly-cpu", "cpu", range(2, 8), 0.0, 2),
             base / "20260101-020000-nightly-cpu-bbbbbb.json")
    head = tmp_path / "pr-results" / "runs"
    head.mkdir(parents=True)
    save_run(_labelled_run("20260101-030000-pr-cccccc", "pr", "smoke", range(4), slowdown, 3),
             head / "20260101-030000-pr-cccccc.json")
    step_spec = nightly_local.find_step("gate-artifacts", "Gate", PR_GATE)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "compilebench").write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" -m harness "$@"\n')
    (tmp_path / "bin" / "compilebench").chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
           "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-e", "-c", step_spec["run"]], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_artifacts_gate_judges_the_smoke_run_alone(tmp_path):
    proc = run_artifacts_gate(tmp_path, 0.0)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "gate.json").read_text())
    assert len(data["cases"]) == 4 and all(c["processes"] == [1, 1] for c in data["cases"]), data["cases"]
    assert not any(c["verdict"] == "missing" for c in data["cases"])


def test_the_artifacts_gate_fails_a_slower_pr(tmp_path):
    proc = run_artifacts_gate(tmp_path, 0.5)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "regression" in proc.stdout
