"""`merge` keeps every config key of its inputs: the shards' shared settings at the top level,
`eager_from_twin` combined, and what differs per input under `config.sources`."""

from __future__ import annotations

from harness.cli.main import main
from harness.model.schema import Case, Record, Run, load_run, save_run
from harness.run.merge import RECOMPUTED_KEYS, merge_runs
from harness.run.shard import apply_shard


def _case(workload: str, compiler: str) -> Case:
    return Case(workload, "forward", compiler, "cuda", "float32", 8, "tiny", "s")


def _shard_run(index: int, count: int, cases: list[Case]) -> Run:
    """A shard's run file as the runner writes it (harness/run/runner.py `_execute` and
    `_case_loop`): its own cases, the plan's settings, its twin pairs and its own argv."""
    mine, info = apply_shard(cases, f"{index}/{count}", "none", None,
                             attach={c.case_id: c.case_id.replace("/eager/", "/inductor/") for c in cases
                                     if c.compiler == "eager"})
    eager = [c for c in mine if c.compiler == "eager"]
    pairs = {c.case_id: c.case_id.replace("/eager/", "/inductor/") for c in eager}
    config = {
        "suite": "s", "argv": ["compilebench", "run", "--shard", f"{index}/{count}"], "timeout_s": 600.0,
        "policy": {"min_samples": 5, "warmup": 3}, "compilers": {"eager": {"name": "eager"}, "inductor": {"name": "inductor"}},
        "workload_files": [], "cases_planned": len(mine), "max_memory_gb": None, "shard": info, "gpus": None,
        "warm_compile": False, "trace": None, "interrupted": False, "wall_s": 10.0 + index,
        "worker_start": {"preload": True, "servers": [{"pid": 100 + index}]},
        "eager_from_twin": {"enabled": True, "off": None, "pairs": pairs, "derived": len(eager), "ran_own_process": {}},
    }
    records = [Record(c, "ok", metrics={"latency_s": 0.001}, worker={"wall_s": 1.0}) for c in mine]
    env = {"host": f"host{index}", "torch_version": "2.13", "git_commit": "abc"}
    return Run(f"shard{index}", "2026-12-01T00:00:00+00:00", "", env, config, records)


def _plan() -> list[Case]:
    return [_case(w, c) for w in ("mlp-a", "mlp-b", "mlp-c") for c in ("eager", "inductor")]


def test_merge_keeps_every_config_key_of_its_inputs():
    runs = [_shard_run(i, 2, _plan()) for i in (1, 2)]
    merged = merge_runs(runs)
    for run in runs:
        for key, value in run.config.items():
            if key in RECOMPUTED_KEYS:
                assert merged.config["sources"][run.run_id][key] == value, key
            else:  # shared settings at the top level, the rest per input: never dropped
                assert merged.config.get(key) == value or merged.config["sources"][run.run_id][key] == value, key
    for key in ("policy", "compilers", "timeout_s", "warm_compile", "workload_files"):
        assert merged.config[key] == runs[0].config[key], key
    assert merged.config["sources"]["shard2"]["argv"][-1] == "2/2"
    assert merged.config["sources"]["shard1"]["worker_start"]["servers"] == [{"pid": 101}]


def test_merge_combines_eager_from_twin_of_the_shards():
    plan = _plan()
    runs = [_shard_run(i, 2, plan) for i in (1, 2)]
    runs[1].config["eager_from_twin"]["ran_own_process"] = {"mlp-b/x": "twin mlp-b/y ended failed"}
    twins = merge_runs(runs).config["eager_from_twin"]
    assert twins["enabled"] is True and twins["off"] is None
    assert twins["pairs"] == {c.case_id: c.case_id.replace("/eager/", "/inductor/") for c in plan if c.compiler == "eager"}
    assert twins["derived"] == 3
    assert twins["ran_own_process"] == {"mlp-b/x": "twin mlp-b/y ended failed"}


def test_merged_run_file_keeps_eager_from_twin_through_the_cli(tmp_path, capsys):
    runs = [_shard_run(i, 2, _plan()) for i in (1, 2)]
    paths = [str(save_run(r, tmp_path / f"{r.run_id}.json")) for r in runs]
    out = tmp_path / "merged.json"
    assert main(["merge", *paths, "-o", str(out)]) == 0
    config = load_run(out).config
    assert config["eager_from_twin"]["derived"] == 3 and len(config["eager_from_twin"]["pairs"]) == 3
    assert config["policy"] == {"min_samples": 5, "warmup": 3}
