"""A `--shard I/N` whose share of the plan is empty (a CI matrix wider than the plan) did its
whole job: exit 0 with one line saying so, and a run file that `merge` takes; a selection that
matches no case is still bad usage (exit 2)."""

from __future__ import annotations

from harness.cli import main as cli
from harness.model.schema import load_run

# one eager case on the CPU: shard 1/3 runs it, shards 2/3 and 3/3 get none (round-robin)
PLAN = ["-w", "mlp-classic", "--scenario", "forward", "-c", "eager", "--size", "tiny", "--shard-costs", "none",
        "--min-samples", "2", "--min-time", "0"]


def _run(capsys, out, *extra: str) -> tuple[int, str, str]:
    code = cli.main(["run", *PLAN, "--no-ingest", "--out", str(out), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_empty_shard_exits_0_with_one_line_and_a_run_file(capsys, tmp_path):
    code, out, err = _run(capsys, tmp_path, "--shard", "3/3")
    assert code == cli.EXIT_OK, (out, err)
    assert "compilebench: error" not in err
    lines = [line for line in out.splitlines() if "holds no case" in line]
    assert len(lines) == 1 and lines[0].startswith("shard 3/3 holds no case of this plan (1 planned case(s) over 3 shards)")
    (path,) = (tmp_path / "runs").glob("*.json")
    run = load_run(path)
    assert run.records == [] and run.config["shard"]["index"] == 3 and str(path) in lines[0]


def test_a_selection_that_matches_no_case_is_still_exit_2_with_or_without_a_shard(capsys, tmp_path):
    for shard in ([], ["--shard", "3/3"]):
        code = cli.main(["run", "-w", "mlp-classic,mlp-deep", "--scenario", "decode", "-c", "eager", "--size", "tiny",
                         "--no-ingest", "--out", str(tmp_path), *shard])
        err = capsys.readouterr().err
        assert code == cli.EXIT_USAGE, err
        assert "the selection matches no case" in err, err
    assert not list(tmp_path.glob("runs/*.json"))  # refused before anything ran


def test_the_shards_of_a_wide_matrix_merge_into_the_whole_plan(capsys, tmp_path):
    for index in (1, 2, 3):
        code, out, err = _run(capsys, tmp_path, "--shard", f"{index}/3")
        assert code == cli.EXIT_OK, (index, out, err)
    paths = sorted(str(p) for p in (tmp_path / "runs").glob("*.json"))
    assert len(paths) == 3
    merged = tmp_path / "merged.json"
    assert cli.main(["merge", *paths, "-o", str(merged)]) == cli.EXIT_OK
    run = load_run(merged)
    assert len(run.records) == 1 and run.records[0].case.workload == "mlp-classic"
    assert run.records[0].status == "ok"
    assert run.config["shards"]["missing_shards"] == [] and run.config["shards"]["missing_cases"] == []
