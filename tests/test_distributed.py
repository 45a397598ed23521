"""DDP and FSDP2 training steps of a compiled tiny model under torchrun, gloo, 2 CPU
processes. The compiler is AOTAutograd without Inductor codegen (`aot_eager`): it exercises
the compile-then-wrap pattern (forward and backward graphs) in seconds on a loaded 2-core box."""

from __future__ import annotations

import pytest

from compiler import CompilerConfig
from harness.run.distributed import launch, record_from_ranks
from suites.distributed import DistributedError, DistributedSpec

AOT_EAGER = CompilerConfig("aot-eager-test", backend="aot_eager").to_dict()


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_compiled_training_step_under_torchrun_gloo(strategy):
    spec = DistributedSpec(workload="mlp-deep", size="tiny", strategy=strategy, compiler="aot-eager-test",
                           compiler_config=AOT_EAGER, nproc=2, steps=4, warmup=1, timeout_s=240,
                           workload_modules=["suites.mlp"])  # only what the ranks need: fast imports
    rec = launch(spec)
    assert rec.status == "ok", (rec.error, rec.logs.get("stdout", "")[-3000:])
    m = rec.metrics
    assert m["world_size"] == 2 and m["strategy"] == strategy and m["backend"] == "gloo"
    assert [r["rank"] for r in m["per_rank"]] == [0, 1]
    assert len(m["compile_time_per_rank_s"]) == 2 and all(t > 0 for t in m["compile_time_per_rank_s"])
    assert m["graphs"] >= 1 and m["graph_breaks"] == 0  # the model really compiled, hooks stayed outside
    assert m["accuracy"]["status"] == "pass"
    # aggregate = world x per-rank batch / median step (the slowest rank's time per step)
    assert m["aggregate_throughput"] == pytest.approx(2 * 64 / rec.compiled["summary"]["median"])
    assert len(rec.compiled["samples_s"]) == 4 and len(rec.eager["samples_s"]) == 4
    assert rec.case_id == f"mlp-deep/train-{strategy}/aot-eager-test/cpu/float32/bs64/tiny/backend=gloo,nproc=2"


def test_aggregate_uses_the_slowest_rank_per_step():
    ranks = [{"rank": r, "batch_size": 8, "samples_s": {"eager": [1.0, 1.0], "compiled": [0.5, s]},
              "first_call_s": {"eager": 0.1, "compiled": 3.0 + r}, "peak_memory_bytes": None, "accuracy": {"status": "pass"},
              "compile": {"graphs": 1, "graph_breaks": 0, "unique_graph_breaks": 0, "frames_total": 1, "frames_ok": 1,
                          "recompiles": 0, "graph_break_reasons": []}}
             for r, s in ((0, 0.5), (1, 0.7))]
    spec = DistributedSpec(workload="mlp-deep")
    from harness.run.runner import load_registries

    load_registries([])
    from harness.run.distributed import distributed_case

    rec = record_from_ranks(distributed_case(spec), spec, {"ranks": ranks, "world_size": 2})
    assert rec.compiled["samples_s"] == [0.5, 0.7]
    assert rec.metrics["compile_time_s"] == 4.0 and rec.metrics["compile_time_per_rank_s"] == [3.0, 4.0]
    assert rec.metrics["aggregate_throughput"] == pytest.approx(16 / 0.6)
    assert rec.metrics["per_rank"][1]["throughput"] == pytest.approx(8 / 0.6)


def test_bad_options_are_user_errors():
    for kwargs in ({"strategy": "zero3"}, {"backend": "mpi"}, {"backend": "nccl", "device": "cpu"}, {"steps": 0}):
        with pytest.raises(DistributedError):
            DistributedSpec(**kwargs).validate()


def test_failed_launch_is_a_crashed_record_with_the_rank_log():
    spec = DistributedSpec(workload="mlp-deep", compiler="bad", nproc=2, steps=1, warmup=0, timeout_s=120,
                           compiler_config={"name": "bad", "backend": "no-such-backend"}, workload_modules=["suites.mlp"])
    rec = launch(spec)
    assert rec.status == "crashed" and "without results" in rec.error["message"]
    assert "no-such-backend" in rec.logs["stdout"]
