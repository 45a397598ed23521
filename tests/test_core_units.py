"""Unit tests of the measuring core's logic (fakes and an injectable clock)."""

import json
import math

import numpy as np
import pytest
import torch

from harness.measure.timing import HostTimer, StopPolicy, calibrate_inner, measure_interleaved
from harness.model.accuracy import compare_outputs
from harness.model.schema import (
    SCHEMA_VERSION,
    Case,
    Record,
    Run,
    RunFileError,
    load_run,
    run_from_dict,
    save_run,
)
from harness.model.stats import geomean, ratio_of_medians_ci, summarize
from harness.run.store import HistoryStore


class FakeClock:
    """Advances only when a fake workload 'runs'."""

    def __init__(self):
        self.ns = 0

    def __call__(self):
        return self.ns

    def work(self, seconds):
        def fn():
            self.ns += int(seconds * 1e9)

        return fn


def test_interleaved_stops_on_min_time_and_min_samples():
    clock = FakeClock()
    timer = HostTimer(clock=clock)
    policy = StopPolicy(warmup=2, min_samples=5, min_time_s=1.0, max_samples=10_000, max_time_s=1e9)
    samples = measure_interleaved({"a": clock.work(0.01), "b": clock.work(0.03)}, timer, policy, clock)
    # 0.04 s per round: min_time 1.0 s needs 25 rounds, more than min_samples
    assert len(samples["a"]) == len(samples["b"]) == 25
    assert samples["a"][0] == pytest.approx(0.01) and samples["b"][0] == pytest.approx(0.03)


def test_interleaved_min_samples_dominates_for_slow_calls():
    clock = FakeClock()
    policy = StopPolicy(warmup=0, min_samples=7, min_time_s=0.001, max_samples=100, max_time_s=1e9)
    samples = measure_interleaved({"a": clock.work(1.0)}, HostTimer(clock=clock), policy, clock)
    assert len(samples["a"]) == 7


def test_interleaved_respects_caps():
    clock = FakeClock()
    policy = StopPolicy(warmup=0, min_samples=1000, min_time_s=1e9, max_samples=50, max_time_s=1e9)
    samples = measure_interleaved({"a": clock.work(0.001)}, HostTimer(clock=clock), policy, clock)
    assert len(samples["a"]) == 50
    policy = StopPolicy(warmup=0, min_samples=1000, min_time_s=1e9, max_samples=10**6, max_time_s=2.0)
    samples = measure_interleaved({"a": clock.work(0.5)}, HostTimer(clock=clock), policy, clock)
    assert len(samples["a"]) == 4


def test_interleaved_alternates_order():
    order = []
    clock = FakeClock()
    variants = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    policy = StopPolicy(warmup=0, min_samples=3, min_time_s=0, max_samples=3, max_time_s=1e9)
    measure_interleaved(variants, HostTimer(clock=clock), policy, clock)
    assert order == ["a", "b", "b", "a", "a", "b"]


def test_calibrate_inner_batches_fast_calls():
    clock = FakeClock()
    assert calibrate_inner(HostTimer(clock=clock), clock.work(1e-5), 1e-3) == 100
    assert calibrate_inner(HostTimer(clock=clock), clock.work(1e-5), 0) == 1


def test_summary_and_ratio_ci():
    rng = np.random.default_rng(1)
    eager = rng.normal(2.0, 0.02, 200)
    compiled = rng.normal(1.0, 0.01, 200)
    s = summarize(eager)
    assert s["n"] == 200 and s["median"] == pytest.approx(2.0, rel=0.01)
    point, low, high = ratio_of_medians_ci(eager, compiled)
    assert low < point < high and low < 2.0 < high and high - low < 0.05
    assert ratio_of_medians_ci(eager, compiled) == (point, low, high)  # deterministic
    assert summarize([]) == {"n": 0}
    assert ratio_of_medians_ci([], [1.0]) is None
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([None, float("nan")]) is None


def test_accuracy_rules():
    a = torch.ones(10)
    assert compare_outputs(a, a.clone(), "float32")["status"] == "pass"
    assert compare_outputs(a, a + 1e-2, "float32")["status"] == "fail"
    nan = a.clone()
    nan[3] = float("nan")
    assert compare_outputs(a, nan, "float32")["status"] == "fail"
    assert compare_outputs(nan, nan.clone(), "float32")["status"] == "fail"  # NaN never passes
    assert compare_outputs(a, torch.ones(11), "float32")["status"] == "fail"
    h = torch.randn(1000, dtype=torch.float16)
    assert compare_outputs(h, h + 1e-3, "float16")["status"] == "pass"
    assert compare_outputs(h, -h, "float16")["status"] == "fail"
    assert compare_outputs({"x": a, "y": (a, a)}, {"x": a, "y": (a, a)}, "float32")["status"] == "pass"


def _record(workload="w", status="ok", speedup=1.5):
    case = Case(workload, "forward", "inductor", "cpu", "float32", 4, "tiny", "smoke")
    return Record(case, status, metrics={"speedup": speedup, "accuracy": {"status": "pass"}},
                  eager={"samples_s": [0.1, 0.2], "peak_memory_bytes": 100},
                  compiled={"samples_s": [0.05], "peak_memory_bytes": 90})


def _run(run_id="r1", records=None):
    return Run(run_id, "2026-11-29T00:00:00+00:00", "t", {"host": "h", "torch_version": "x"}, {"suite": "smoke"},
               records or [_record()])


def test_case_id_is_stable_and_excludes_suite():
    a = Case("w", "forward", "inductor", "cpu", "float32", 4, "tiny", "smoke")
    b = Case("w", "forward", "inductor", "cpu", "float32", 4, "tiny", "nightly")
    assert a.case_id == b.case_id == "w/forward/inductor/cpu/float32/bs4/tiny"
    assert Case.from_dict(a.to_dict()) == a


def test_run_file_round_trip(tmp_path):
    run = _run()
    path = save_run(run, tmp_path / "runs" / "r1.json")
    loaded = load_run(path)
    assert loaded.to_dict() == run.to_dict()
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION
    assert not list((tmp_path / "runs").glob(".*tmp"))  # no temp file left behind


@pytest.mark.parametrize(
    "content, message",
    [("", "empty file"), ("{\"schema_version\": 1, \"run", "not valid JSON"), ("[1, 2]", "not a compilebench run file"),
     ("{\"a\": 1}", "no schema_version"), (json.dumps({"schema_version": 99}), "newer than this compilebench")],
)
def test_bad_run_files_give_clear_errors(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(RunFileError, match=message) as info:
        load_run(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_malformed_record_is_a_run_file_error():
    data = _run().to_dict()
    del data["records"][0]["case"]["workload"]
    with pytest.raises(RunFileError, match="malformed"):
        run_from_dict(data, "x.json")


def test_store_ingest_is_idempotent_and_loads_dataframe(tmp_path):
    db = tmp_path / "history.sqlite"
    run = _run(records=[_record("a"), _record("b", "fail_run", None)])
    with HistoryStore(db) as store:
        store.ingest(run)
        store.ingest(run)
        assert store.run_ids() == ["r1"]
        df = store.dataframe()
        assert len(df) == 2 and set(df["status"]) == {"ok", "fail_run"}
        assert store.load_run("r1").to_dict() == run.to_dict()
        assert store.version == 1
    with HistoryStore(db) as store:  # reopening does not re-run migrations
        assert store.version == 1 and len(store.dataframe()) == 2
    assert math.isclose(df.loc[df.workload == "a", "speedup"].iloc[0], 1.5)


def test_graph_break_inside_torch_is_attributed_to_the_user_frame_that_called_it():
    import os

    from harness.measure.compile_metrics import parse_graph_breaks

    torch_dir = os.path.dirname(torch.__file__)
    msg = (f"Graph break in user code at {torch_dir}/optim/optimizer.py:79\n"
           "Graph Break Reason: Call to `torch._dynamo.graph_break()`\n  Hint: ignore me\n"
           "User code traceback:\n"
           '  File "/home/u/train.py", line 12, in step\n    opt.step()\n'
           f'  File "{torch_dir}/optim/optimizer.py", line 79, in wrapper\n    graph_break()\n')
    (b,) = parse_graph_breaks([msg, msg])
    assert b["count"] == 2 and b["location"] == f"{torch_dir}/optim/optimizer.py:79"
    assert b["user_location"] == "/home/u/train.py:12"
    assert "Hint" not in b["reason"] and "graph_break" in b["reason"]
