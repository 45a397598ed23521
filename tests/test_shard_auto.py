"""`--shard auto`: the shard comes from the engine that started the job (harness/run/shard.py)."""

from __future__ import annotations

import pytest

from harness.cli.main import main
from harness.model.schema import Case
from harness.run.shard import ShardError, ShardSpec, apply_shard, partition, resolve_shard, shard_from_env


def test_explicit_variables_from_a_ci_matrix():
    env = {"COMPILEBENCH_SHARD_INDEX": "3", "COMPILEBENCH_SHARD_COUNT": "4"}
    assert shard_from_env(env) == (ShardSpec(3, 4), "COMPILEBENCH_SHARD_INDEX/COUNT")


def test_explicit_variables_win_over_an_engine():
    env = {"COMPILEBENCH_SHARD_INDEX": "1", "COMPILEBENCH_SHARD_COUNT": "2",
           "SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "0"}
    assert shard_from_env(env)[0] == ShardSpec(1, 2)


@pytest.mark.parametrize("ids, low, step", [(range(0, 4), 0, None), (range(1, 5), 1, None),
                                            (range(0, 13, 4), 0, 4), (range(10, 14), 10, 1)])
def test_slurm_arrays_of_any_offset_and_step_give_one_to_n(ids, low, step):
    ids = list(ids)
    got = []
    for task in ids:
        env = {"SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_COUNT": str(len(ids)),
               "SLURM_ARRAY_TASK_MIN": str(low)}
        if step is not None:
            env["SLURM_ARRAY_TASK_STEP"] = str(step)
        spec, source = shard_from_env(env)
        assert source == "Slurm array"
        got.append(spec)
    assert got == [ShardSpec(i, len(ids)) for i in range(1, len(ids) + 1)]


def test_slurm_array_off_its_step_or_past_its_count_is_refused():
    with pytest.raises(ShardError, match="evenly spaced"):
        shard_from_env({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "1",
                        "SLURM_ARRAY_TASK_STEP": "2"})
    # --array=1,2,9: three tasks, not a range; task 9 would be shard 9 of 3
    with pytest.raises(ShardError, match="shard 9/3"):
        shard_from_env({"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "1"})


def test_kubernetes_indexed_job():
    got = [shard_from_env({"JOB_COMPLETION_INDEX": str(i), "JOB_COMPLETIONS": "3"}) for i in range(3)]
    assert got == [(ShardSpec(i, 3), "Kubernetes indexed Job") for i in (1, 2, 3)]


@pytest.mark.parametrize("env, message", [
    ({}, "COMPILEBENCH_SHARD_INDEX .*SLURM_ARRAY_TASK_ID.*JOB_COMPLETION_INDEX"),
    ({"JOB_COMPLETION_INDEX": "0"}, "JOB_COMPLETIONS is not"),
    ({"COMPILEBENCH_SHARD_INDEX": "2"}, "COMPILEBENCH_SHARD_COUNT is not"),
    ({"SLURM_ARRAY_TASK_ID": "2"}, "SLURM_ARRAY_TASK_COUNT, SLURM_ARRAY_TASK_MIN is not"),
    ({"COMPILEBENCH_SHARD_INDEX": "0", "COMPILEBENCH_SHARD_COUNT": "4"}, "shard 0/4"),
    ({"COMPILEBENCH_SHARD_INDEX": "x", "COMPILEBENCH_SHARD_COUNT": "4"}, "not an integer"),
])
def test_missing_or_bad_variables_are_one_line_errors(env, message):
    with pytest.raises(ShardError, match=message) as info:
        shard_from_env(env)
    assert "\n" not in str(info.value)


def test_auto_and_explicit_spellings():
    assert resolve_shard("2/5", {}) == (ShardSpec(2, 5), "argument")
    assert resolve_shard("AUTO", {"JOB_COMPLETION_INDEX": "4", "JOB_COMPLETIONS": "5"})[0] == ShardSpec(5, 5)


def test_apply_shard_records_where_the_shard_came_from(monkeypatch, tmp_path):
    cases = [Case(f"w{i}", "forward", "inductor", "cpu", "float32", 8, "tiny", "s") for i in range(6)]
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
    monkeypatch.setenv("JOB_COMPLETIONS", "3")
    selected, info = apply_shard(cases, "auto", "none", tmp_path / "history.sqlite")
    assert (info["index"], info["count"], info["from"]) == (2, 3, "Kubernetes indexed Job")
    assert [c.case_id for c in selected] == partition([c.case_id for c in cases], 3)[1]


def test_cli_run_shard_auto_without_an_engine_exits_2(monkeypatch, tmp_path, capsys):
    for name in ("COMPILEBENCH_SHARD_INDEX", "COMPILEBENCH_SHARD_COUNT", "SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"):
        monkeypatch.delenv(name, raising=False)
    code = main(["run", "-w", "mlp-classic", "-c", "eager", "--size", "tiny", "--shard", "auto",
                 "--out", str(tmp_path), "--no-ingest"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "--shard auto: no job engine" in err[0]
    assert not (tmp_path / "runs").exists()  # refused before any case ran
