"""Sharding covers every case exactly once (property-tested), merge combines shards from
several machines, and the --gpus pool runs cases concurrently with results in plan order."""

from __future__ import annotations

import json
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cli.main import main
from harness.model.schema import Case, Record, Run, load_run, save_run
from harness.run.merge import IncompleteMergeError, MergeError, merge_runs
from harness.run.multigpu import GpuPlanError, GpuPool, parse_gpus
from harness.run.shard import ShardError, apply_shard, history_costs, parse_shard, partition, select_shard
from harness.run.store import HistoryStore

ids = st.lists(st.text(alphabet="abcdefgh/-0123456789", min_size=1, max_size=12), min_size=0, max_size=60, unique=True)


@given(ids, st.integers(1, 9), st.randoms(use_true_random=False))
@settings(max_examples=150, deadline=None)
def test_shards_cover_every_case_exactly_once(case_ids, n, rnd):
    shards = partition(case_ids, n)
    flat = [c for s in shards for c in s]
    assert sorted(flat) == sorted(case_ids) and len(flat) == len(set(flat))
    shuffled = list(case_ids)
    rnd.shuffle(shuffled)
    assert partition(shuffled, n) == shards  # every machine computes the same partition
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1  # round-robin balances counts


@given(ids, st.integers(1, 6), st.data())
@settings(max_examples=150, deadline=None)
def test_cost_balanced_shards_cover_once_and_are_balanced(case_ids, n, data):
    costs = {c: data.draw(st.floats(0, 100)) for c in case_ids if data.draw(st.booleans())}
    shards = partition(case_ids, n, costs)
    flat = [c for s in shards for c in s]
    assert sorted(flat) == sorted(case_ids) and len(flat) == len(set(flat))
    assert partition(list(reversed(case_ids)), n, costs) == shards
    if costs and len(costs) == len(case_ids):
        # LPT bound: no shard exceeds the mean load by more than the largest single case
        loads = [sum(costs[c] for c in s) for s in shards]
        assert max(loads) <= sum(costs.values()) / n + max(costs.values()) + 1e-9


def test_parse_shard_errors():
    assert str(parse_shard("2/4")) == "2/4"
    for bad in ("0/2", "3/2", "1/0", "a/b", "1-2", ""):
        with pytest.raises(ShardError):
            parse_shard(bad)


def _case(w: str, compiler: str = "inductor") -> Case:
    return Case(w, "forward", compiler, "cpu", "float32", 8, "tiny", "s")


def _record(case: Case, wall: float = 1.0) -> Record:
    return Record(case, "ok", metrics={"speedup": 1.0}, worker={"wall_s": wall})


def _run(run_id: str, records: list[Record], host: str = "h1", torch_version: str = "2.11", config: dict | None = None,
         version: int = 1) -> Run:
    env = {"host": host, "torch_version": torch_version, "git_commit": "abc",
           "devices": {"cuda": {"name": f"NVIDIA H200 on {host}"}}}
    return Run(run_id, "2025-01-01T00:00:00+00:00", "", env, {"suite": "s", "wall_s": 10.0, **(config or {})},
               records, schema_version=version)


def test_history_costs_balance_the_shards(tmp_path):
    cases = [_case(f"w{i}") for i in range(6)]
    walls = [100, 90, 5, 5, 5, 5]
    db = tmp_path / "history.sqlite"
    with HistoryStore(db) as store:
        for k in range(3):  # the median of three runs is the cost
            store.ingest(_run(f"r{k}", [_record(c, w + k) for c, w in zip(cases, walls, strict=True)]))
    costs = history_costs(db)
    assert costs[cases[0].case_id] == pytest.approx(101)
    one, info = apply_shard(cases, "1/2", None, db)
    two, _ = apply_shard(cases, "2/2", None, db)
    assert info["method"] == "lpt-history" and info["plan_case_ids"] == [c.case_id for c in cases]
    assert {c.case_id for c in one} | {c.case_id for c in two} == {c.case_id for c in cases}
    assert not {c.case_id for c in one} & {c.case_id for c in two}
    # the two long cases go to different shards
    assert (cases[0] in one) != (cases[1] in one)
    rr, info_rr = apply_shard(cases, "1/2", "none", db)
    assert info_rr["method"] == "round-robin" and rr == select_shard(cases, parse_shard("1/2"))
    with pytest.raises(ShardError, match="no such history file"):
        apply_shard(cases, "1/2", str(tmp_path / "nope.sqlite"), db)


def test_a_derived_eager_records_wall_is_not_taken_for_the_cases_cost(tmp_path):
    """A derived record's worker wall is the derivation's microseconds: costing the eager case
    by it would treat a process of its own (--no-eager-from-twin, a fallback) as free."""
    eager = _case("w0")
    db = tmp_path / "history.sqlite"
    with HistoryStore(db) as store:
        store.ingest(_run("own", [Record(eager, "ok", metrics={"speedup": 1.0}, worker={"wall_s": 40.0})]))
        store.ingest(_run("derived", [Record(eager, "ok", metrics={"speedup": 1.0},
                                              worker={"wall_s": 1.2e-05, "start": "derived", "from_case": "x"})]))
    assert history_costs(db) == {eager.case_id: 40.0}


def _shard_runs(n: int = 3) -> tuple[list[Case], list[Run]]:
    cases = [_case(f"w{i}") for i in range(7)]
    runs = []
    for i in range(1, n + 1):
        mine, info = apply_shard(cases, f"{i}/{n}", "none", None)
        runs.append(_run(f"shard{i}", [_record(c) for c in mine], host=f"host{i}", config={"shard": info}))
    return cases, runs


def test_merge_shards_from_many_machines_in_plan_order():
    cases, runs = _shard_runs()
    merged = merge_runs(list(reversed(runs)))
    assert [r.case_id for r in merged.records] == [c.case_id for c in cases]
    assert merged.environment["hosts"] == ["host1", "host2", "host3"]
    by_host = {r.worker["machine"]["host"] for r in merged.records}
    assert by_host == {"host1", "host2", "host3"}
    assert merged.records[0].worker["machine"]["devices"]["cuda"].startswith("NVIDIA H200")
    assert merged.config["shards"]["missing_shards"] == [] and merged.config["shards"]["missing_cases"] == []
    assert merged.environment["torch_version"] == "2.11" and set(merged.environment["machines"]) == {"shard1", "shard2", "shard3"}


def test_merge_refusals():
    cases, runs = _shard_runs()
    newer = _run("v2", [_record(_case("zz"))], version=2)
    with pytest.raises(MergeError, match="schema versions"):
        merge_runs([runs[0], newer])
    with pytest.raises(MergeError, match="is in both"):
        merge_runs([runs[0], runs[0]])
    other_torch = _run("t", [_record(_case("other"))], torch_version="2.12")
    with pytest.raises(MergeError, match="torch_version"):
        merge_runs([runs[0], other_torch])
    assert merge_runs([runs[0], other_torch], allow_mixed=True, allow_missing=True).config["merge_warnings"]
    _, four = _shard_runs(4)
    with pytest.raises(MergeError, match="partitioned differently"):
        merge_runs([runs[0], four[1]])
    with pytest.raises(IncompleteMergeError, match=r"planned case\(s\) are not in the inputs .*shard\(s\) \[3\] of 3"):
        merge_runs(runs[:2])
    partial = merge_runs(runs[:2], allow_missing=True)
    assert partial.config["shards"]["missing_shards"] == [3] and partial.config["shards"]["missing_cases"]
    assert partial.config["shards"]["allowed_missing"] is True
    assert merge_runs(runs).config["shards"]["allowed_missing"] is False


def test_a_shard_given_twice_is_refused_not_merged_as_interrupted():
    """A retried shard's empty, interrupted first attempt beside the attempt that finished: the
    merge used to take both and mark the complete merge interrupted (never a compare base)."""
    import dataclasses

    _, runs = _shard_runs()
    first_try = dataclasses.replace(runs[1], run_id="shard2-first-try", records=[],
                                    config={**runs[1].config, "interrupted": True})
    with pytest.raises(MergeError, match=r"shard 2/3 appears in more than one run file \(shard2, shard2-first-try\)"):
        merge_runs([runs[0], runs[1], first_try, runs[2]])


def test_a_shard_config_without_its_plan_is_refused_by_name():
    _, runs = _shard_runs()
    runs[1].config = {"shard": {k: v for k, v in runs[1].config["shard"].items() if k != "plan_fingerprint"}}
    with pytest.raises(MergeError, match="shard2: its config.shard lacks the plan"):
        merge_runs(runs)


def test_a_shard_stopped_early_is_missing_data_though_every_file_is_there():
    _, runs = _shard_runs()
    runs[1].records = runs[1].records[:-1]  # interrupted before its last case
    with pytest.raises(IncompleteMergeError, match="every shard has a run file, so a shard stopped"):
        merge_runs(runs)


def test_a_missing_shard_that_had_no_case_does_not_block(tmp_path, capsys):
    """1 planned case over 2 shards: shard 2 had nothing to run; merging shard 1 alone is complete."""
    case = _case("only")
    mine, info = apply_shard([case], "1/2", "none", None)
    assert mine == [case]
    path = save_run(_run("shard1", [_record(case)], config={"shard": info}), tmp_path / "s1.json")
    out = tmp_path / "m.json"
    assert main(["merge", str(path), "-o", str(out)]) == 0
    assert "shard(s) [2] of 2 have no run file, but every planned case is present" in capsys.readouterr().out
    assert load_run(out).config["shards"]["missing_shards"] == [2]


def test_merge_cli(tmp_path, capsys):
    _, runs = _shard_runs()
    paths = [str(save_run(r, tmp_path / f"{r.run_id}.json")) for r in runs]
    out = tmp_path / "merged.json"
    assert main(["merge", *paths, "-o", str(out), "--ingest", str(tmp_path / "h.sqlite")]) == 0
    assert len(load_run(out).records) == 7
    with HistoryStore(tmp_path / "h.sqlite") as store:
        assert len(store.run_ids()) == 1
    out.unlink()
    # a missing shard is missing data, not bad usage: exit 3, one line, nothing written
    assert main(["merge", *paths[:2], "-o", str(out)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "shard(s) [3] of 3 have no run file" in err and "--allow-missing" in err
    assert not out.exists()
    assert main(["merge", *paths[:2], "-o", str(out), "--allow-missing"]) == 0
    assert "recorded in the merged run's config.shards" in capsys.readouterr().err
    assert load_run(out).config["shards"]["missing_shards"] == [3]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 99}))
    assert main(["merge", paths[0], str(bad), "-o", str(out)]) == 2


def test_gpu_pool_runs_concurrently_and_returns_plan_order():
    cases = [_case(f"w{i}") for i in range(6)]
    cases = [Case(c.workload, c.scenario, c.compiler, "cuda", c.dtype, c.batch_size, c.size) for c in cases]
    running, peak, lock = [0], [0], threading.Lock()

    def run_one(case, env):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2 if case.workload == "w0" else 0.05)  # w0 is slow: later cases finish first
        with lock:
            running[0] -= 1
        return Record(case, "ok", worker={"env": dict(env)})

    pool = GpuPool(cases, run_one, [0, 1])
    records = [pool.result(c) for c in cases]
    assert [r.case_id for r in records] == [c.case_id for c in cases]
    assert peak[0] == 2
    assert {r.worker["gpu"] for r in records} == {0, 1}
    assert all(r.worker["env"] == {"CUDA_VISIBLE_DEVICES": str(r.worker["gpu"])} for r in records)


def test_gpu_options_are_checked():
    assert parse_gpus(["0,1", "3"]) == [0, 1, 3]
    for bad in (["0,0"], ["a"]):
        with pytest.raises(GpuPlanError):
            parse_gpus(bad)
    with pytest.raises(GpuPlanError, match="--device cuda"):
        GpuPool([Case("w", "forward", "inductor", "cuda:1", "float32", 1, "tiny")], lambda c, e: None, [0, 1])


def test_real_shards_then_merge_cover_the_plan(results_dir):
    """Two real CPU shards of a 2-case plan (eager: no compile, seconds), merged."""
    # a shard of one case each: spawned: for one case that costs less than starting a preloaded server (test_forkserver holds the two paths equal)
    common = ["run", "-w", "mlp-classic", "--scenario", "forward,train", "-c", "eager", "--out", str(results_dir),
              "--min-time", "0.01",
              "--min-samples", "3", "--no-ingest", "--no-preload"]
    assert main([*common, "--shard", "1/2"]) == 0
    assert main([*common, "--shard", "2/2"]) == 0
    paths = sorted((results_dir / "runs").glob("*.json"))
    assert len(paths) == 2
    shards = [load_run(p) for p in paths]
    assert sorted(len(r.records) for r in shards) == [1, 1]
    out = results_dir / "merged.json"
    assert main(["merge", *map(str, paths), "-o", str(out)]) == 0
    merged = load_run(out)
    assert [r.case.scenario for r in merged.records] == ["forward", "train"]
    assert all(r.status == "ok" for r in merged.records)
