"""`run --gpus all`: the shared longest-first queue, greedy pulls, per-GPU busy/idle and the
scaling efficiency, on fake GPUs driven by a virtual clock (no test sleeps for a duration),
then the runner's Ctrl-C path and one real run on two fake GPUs that run tiny CPU cases."""

from __future__ import annotations

import signal
import threading

import pytest

from harness.cli.main import main
from harness.model.schema import Case, Record, load_run
from harness.run import multigpu, runner
from harness.run.journal import journal_path, read_journal
from harness.run.multigpu import (
    FAKE_GPU_ENV,
    FAKE_GPUS_ENV,
    GpuPlanError,
    GpuPool,
    check_cases,
    dispatch_order,
    pin_env,
    pool_summary,
    resolve_gpus,
    scaling_efficiency,
)
from harness.run.signals import set_checkpoint_hook


def _case(name: str, compiler: str = "inductor", scenario: str = "forward", device: str = "cuda") -> Case:
    return Case(name, scenario, compiler, device, "float32", 8, "tiny", "s")


class VirtualHost:
    """Fake GPUs on a virtual clock. A case 'runs' for its duration without sleeping: the
    clock moves only when every live GPU slot is inside a case, straight to the earliest
    end, so the schedule is exactly what a real host with those durations would do."""

    def __init__(self, durations: dict[str, float], crash: frozenset[str] = frozenset()):
        self.durations, self.crash = durations, crash
        self.now = 0.0
        self.cond = threading.Condition()
        self.ends: dict[int, float] = {}
        self.pool: GpuPool | None = None
        self.envs: dict[str, dict[str, str]] = {}

    def clock(self) -> float:
        with self.cond:
            return self.now

    def _advance(self) -> None:
        live = [t for t in (self.pool.threads if self.pool else []) if t.is_alive()]
        if live and all(t.ident in self.ends for t in live):
            self.now = min(self.ends.values())
            self.cond.notify_all()

    def run_one(self, case: Case, env) -> Record:
        me = threading.get_ident()
        with self.cond:
            self.envs[case.workload] = dict(env)
            self.ends[me] = self.now + self.durations[case.workload]
            while self.now < self.ends[me]:
                self._advance()
                self.cond.wait(0.002)  # a slot may end without calling back: look again
            del self.ends[me]
            self.cond.notify_all()
        if case.workload in self.crash:
            raise RuntimeError("worker died")
        return Record(case, "ok", worker={"wall_s": self.durations[case.workload]})

    def run(self, cases, gpus, costs=None) -> list[Record]:
        self.pool = GpuPool(cases, self.run_one, gpus, costs, clock=self.clock)
        return [self.pool.result(c) for c in self.pool.as_completed(cases)]


DURATIONS = {"a": 10.0, "b": 6.0, "c": 5.0, "d": 4.0, "e": 3.5, "f": 2.0}


def _by_gpu(records: list[Record]) -> dict[int, list[Record]]:
    out: dict[int, list[Record]] = {}
    for r in sorted(records, key=lambda r: r.worker["gpu_pool"]["start_s"]):
        out.setdefault(r.worker["gpu"], []).append(r)
    return out


def test_each_gpu_pulls_the_next_longest_case_when_it_is_free():
    cases = [_case(n) for n in "fedcba"]  # plan order is shortest first: the queue must reverse it
    host = VirtualHost(DURATIONS)
    records = host.run(cases, [0, 1], costs={f"{c.case_id}": DURATIONS[c.workload] for c in cases})
    stamps = {r.case.workload: r.worker["gpu_pool"] for r in records}
    assert [w for w, _ in sorted(stamps.items(), key=lambda kv: kv[1]["queue_position"])] == list("abcdef")
    assert sorted(stamps, key=lambda w: (stamps[w]["start_s"], stamps[w]["queue_position"])) == list("abcdef")
    lanes = {tuple(r.case.workload for r in lane) for lane in _by_gpu(records).values()}
    # LPT by hand: t=0 a|b, t=6 c on b's GPU, t=10 d on a's, t=11 e on c's, t=14 f on a's
    assert lanes == {("a", "d", "f"), ("b", "c", "e")}
    for lane in _by_gpu(records).values():  # greedy: a GPU never waits while the queue has work
        ends = [0.0] + [r.worker["gpu_pool"]["end_s"] for r in lane[:-1]]
        assert [r.worker["gpu_pool"]["start_s"] for r in lane] == pytest.approx(ends)
    assert {r.worker["gpu_pool"]["expected_from"] for r in records} == {"history"}
    assert [host.envs[w] for w in "ab"] in ([{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}],
                                            [{"CUDA_VISIBLE_DEVICES": "1"}, {"CUDA_VISIBLE_DEVICES": "0"}])


def test_busy_shares_and_efficiency_of_the_schedule():
    cases = [_case(n) for n in "abcdef"]
    records = VirtualHost(DURATIONS).run(cases, [0, 1], costs={c.case_id: DURATIONS[c.workload] for c in cases})
    summary = pool_summary(records)
    assert summary["wall_s"] == pytest.approx(16.0)  # f ends at 14 + 2
    busy = sorted((g["busy_s"], g["idle_s"], g["busy_share"], g["cases"]) for g in summary["per_gpu"])
    assert busy == [(14.5, 1.5, pytest.approx(14.5 / 16, abs=1e-4), 3), (16.0, 0.0, 1.0, 3)]
    own = summary["scaling"]["vs_own_walls"]
    assert own["one_gpu_s"] == pytest.approx(30.5)
    assert own["efficiency"] == pytest.approx(30.5 / 2 / 16, abs=1e-4)
    assert own["speedup"] == pytest.approx(30.5 / 16, abs=1e-4)
    assert summary["scaling"]["vs_history"]["efficiency"] is None  # no single-worker history given
    assert summary["busy_share_mean"] == pytest.approx((1.0 + 14.5 / 16) / 2, abs=1e-4)


def test_unknown_cases_count_as_the_median_and_no_history_uses_the_prior():
    cases = [_case("new1"), _case("big"), _case("small"), _case("new2")]
    order = dispatch_order(cases, {"big": 9.0, "small": 1.0, "mid": 5.0} | {c.case_id: v for c, v in
                                                                           zip(cases[1:3], (9.0, 1.0), strict=True)})
    assert [(c.workload, e, src) for c, e, src in order] == [
        ("big", 9.0, "history"), ("new1", 5.0, "median of known"), ("new2", 5.0, "median of known"),
        ("small", 1.0, "history")]
    plain = [_case("e1", "eager"), _case("f1"), _case("t1", scenario="train"), _case("t0", "eager", "train")]
    assert [(c.workload, e, src) for c, e, src in dispatch_order(plain, {})] == [
        ("t1", None, "prior"), ("f1", None, "prior"), ("t0", None, "prior"), ("e1", None, "prior")]


def test_a_case_that_crashes_on_one_gpu_does_not_stop_the_others():
    cases = [_case(n) for n in "abcdef"]
    records = VirtualHost(DURATIONS, crash=frozenset("b")).run(cases, [0, 1])
    statuses = {r.case.workload: r.status for r in records}
    assert statuses == {"a": "ok", "b": "crashed", "c": "ok", "d": "ok", "e": "ok", "f": "ok"}
    crashed = next(r for r in records if r.status == "crashed")
    assert crashed.error.message.startswith(f"GPU {crashed.worker['gpu']}: worker died")
    assert sum(len(lane) for lane in _by_gpu(records).values()) == 6


def test_cancel_hands_back_finished_cases_nobody_took():
    cases = [_case(n) for n in "abc"]
    host = VirtualHost({"a": 1.0, "b": 2.0, "c": 3.0})
    host.pool = pool = GpuPool(cases, host.run_one, [0, 1, 2], clock=host.clock)
    first = next(pool.as_completed(cases))
    assert first.workload == "a"
    taken = pool.result(first)
    while pool.finished_untaken() < 2:  # b and c finish on the virtual clock
        with host.cond:
            host.cond.wait(0.002)
    left = pool.cancel()
    assert taken.case.workload == "a" and [r.case.workload for r in left] == ["b", "c"]


def test_summary_adds_resumed_segments_and_uses_single_worker_history():
    def rec(name, gpu, pool, start, end, wall, one_gpu):
        return Record(_case(name), "ok", worker={"gpu": gpu, "wall_s": wall, "gpu_pool": {
            "pool": pool, "gpus": [0, 1], "start_s": start, "end_s": end, "one_gpu_s": one_gpu,
            "expected_from": "history", "queue_position": 0}})

    records = [rec("a", 0, "p1", 0, 6, 5.5, 7.0), rec("b", 1, "p1", 0, 4, 4.0, 4.5),
               rec("c", 0, "p2", 0, 4, 3.5, 4.5), rec("d", 1, "p2", 0.5, 3, 2.5, 2.0)]
    summary = pool_summary(records)
    assert summary["segments"] == 2 and summary["wall_s"] == 10.0  # 6 + 4
    assert [(g["gpu"], g["busy_s"], g["idle_s"]) for g in summary["per_gpu"]] == [(0, 10.0, 0.0), (1, 6.5, 3.5)]
    assert summary["scaling"]["vs_history"]["efficiency"] == pytest.approx(18.0 / 2 / 10.0)
    assert summary["scaling"]["vs_own_walls"]["efficiency"] == pytest.approx(15.5 / 2 / 10.0)
    records[3].worker["gpu_pool"]["one_gpu_s"] = None  # one case the store never saw run alone
    assert pool_summary(records)["scaling"]["vs_history"]["efficiency"] is None
    assert scaling_efficiency(56.0, 8, 8.0) == 0.875 and scaling_efficiency(1.0, 8, 0.0) is None
    assert pool_summary([Record(_case("x"), "ok")]) is None


def test_gpus_all_resolves_to_every_visible_gpu_and_bad_values_are_one_line():
    assert resolve_gpus(["all"], lambda: (8, "fake")) == list(range(8))
    assert resolve_gpus(["1,3"], lambda: (4, "fake")) == [1, 3]
    assert resolve_gpus([], lambda: (0, "none")) == []
    for values, count, match in ((["all"], 0, "no GPU is visible"), (["0,1"], 0, "no GPU is visible"),
                                 (["5"], 4, "GPU 5 is not visible"), (["all", "0"], 4, "cannot be combined")):
        with pytest.raises(GpuPlanError, match=match):
            resolve_gpus(values, lambda n=count: (n, "torch.cuda.device_count()"))


def test_pinning_follows_the_parents_mask_and_cpu_cases_need_fake_gpus(monkeypatch):
    assert pin_env(_case("a"), 1, {"CUDA_VISIBLE_DEVICES": "4,5"}) == {"CUDA_VISIBLE_DEVICES": "5"}
    assert pin_env(_case("a"), 1, {}) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert pin_env(_case("a", device="cpu"), 1, {FAKE_GPUS_ENV: "2"}) == {FAKE_GPU_ENV: "1"}
    monkeypatch.delenv(FAKE_GPUS_ENV, raising=False)
    with pytest.raises(GpuPlanError, match="--device cuda"):
        check_cases([_case("a", device="cpu")], [0, 1])
    with pytest.raises(GpuPlanError, match="pins each worker"):
        check_cases([_case("a", device="cuda:1")], [0, 1])


def test_gpus_on_a_cpu_only_box_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    """The real path: this box's torch sees no GPU (a CPU build, or no device)."""
    monkeypatch.delenv(FAKE_GPUS_ENV, raising=False)
    if multigpu.visible_gpus()[0]:
        pytest.skip("this host has a GPU")
    for gpus in ("all", "0,1"):
        assert main(["run", "--gpus", gpus, "-w", "mlp-classic", "-c", "eager", "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "no GPU is visible here" in err[0] and "run without --gpus" in err[0]
    assert not (tmp_path / "runs").exists()


# ---- the runner: Ctrl-C keeps every finished case, on every GPU ----------------------------

FAKE_ENV = {"host": "test-host", "torch_version": "x", "cpu_model": "cpu", "packages": {}, "devices": {},
            "git_commit": "abc"}


def test_ctrl_c_keeps_cases_finished_on_every_gpu(monkeypatch, tmp_path):
    """Two fake GPUs, three cases (batch sizes 1, 2, 3): 1 and 2 finish, 3 stays in flight.
    The stop lands while one finished record is in hand and the other is finished but not
    yet taken: both end up in the run file and the journal; the case in flight does not."""
    import harness.measure.environment

    release = threading.Event()

    def fake_worker(case, spec, timeout_s, **kw):
        if case.batch_size == 3:
            release.wait(30)  # in flight until the test ends (the runner has no process to kill)
        return Record(case, "ok", metrics={"latency_s": 0.001}, worker={"wall_s": 0.01})

    pools: list[GpuPool] = []
    real_start = multigpu.start_pool

    def capture(*args, **kw):
        pools.append(real_start(*args, **kw))
        return pools[-1]

    sent: list[str] = []

    def hook(name):
        if name == "record-in-hand" and not sent:
            while pools[0].finished_untaken() < 1:  # the other finished case, not taken yet
                release.wait(0.002)
            sent.append(name)
            signal.raise_signal(signal.SIGINT)  # held until the record is journaled, then raised

    monkeypatch.setenv(FAKE_GPUS_ENV, "2")
    monkeypatch.setattr(harness.measure.environment, "capture_environment", lambda devices: dict(FAKE_ENV))
    monkeypatch.setattr(runner, "run_worker", fake_worker)
    monkeypatch.setattr(multigpu, "start_pool", capture)
    set_checkpoint_hook(hook)
    try:
        assert main(["run", "--workload-file", "tests/faults/suite.py", "-w", "fault-control-ok", "-c", "eager",
                     "--scenario", "forward", "--batch-size", "1,2,3", "--gpus", "all", "--out", str(tmp_path)]) == 130
    finally:
        set_checkpoint_hook(None)
        release.set()
    assert sent == ["record-in-hand"]
    saved = load_run(next((tmp_path / "runs").glob("*.json")))
    assert saved.config["interrupted"] is True
    assert [r.case.batch_size for r in saved.records] == [1, 2] and all(r.status == "ok" for r in saved.records)
    assert sorted(read_journal(journal_path(tmp_path, saved.run_id)).records) == sorted(r.case_id for r in saved.records)
    assert saved.config["multi_gpu"]["cases"] == 2 and saved.config["multi_gpu"]["n_gpus"] == 2
    # --resume runs the third case in a second pool; the summary adds both segments up
    assert main(["run", "--resume", saved.run_id, "--out", str(tmp_path)]) == 0
    resumed = load_run(tmp_path / "runs" / f"{saved.run_id}.json")
    assert [r.case.batch_size for r in resumed.records] == [1, 2, 3]
    summary = resumed.config["multi_gpu"]
    assert summary["segments"] == 2 and summary["cases"] == 3 and len(pools) == 2


def test_real_run_on_two_fake_gpus(monkeypatch, tmp_path, capsys):
    """End to end on CPU: `--gpus all` sees two fake GPUs, each with its own worker (and fork
    server), two tiny eager MLP cases at once; the run file in plan order, the summary shown."""
    monkeypatch.setenv(FAKE_GPUS_ENV, "2")
    argv = ["run", "-w", "mlp-classic", "--scenario", "forward,train", "-c", "eager", "--min-time", "0.01",
            "--min-samples", "3", "--gpus", "all", "--out", str(tmp_path)]
    assert main(argv) == 0
    run = load_run(next((tmp_path / "runs").glob("*.json")))
    assert [r.case.scenario for r in run.records] == ["forward", "train"] and all(r.status == "ok" for r in run.records)
    assert {r.worker["gpu"] for r in run.records} == {0, 1}
    (a, b) = (r.worker["gpu_pool"] for r in run.records)
    assert a["start_s"] < b["end_s"] and b["start_s"] < a["end_s"]  # they ran at the same time
    summary = run.config["multi_gpu"]
    assert summary["n_gpus"] == 2 and summary["cases"] == 2 and 0 < summary["wall_s"] <= run.config["wall_s"]
    assert all(g["cases"] == 1 and g["busy_s"] > 0 for g in summary["per_gpu"])
    capsys.readouterr()
    assert main(["show", run.run_id, "--out", str(tmp_path), "--format", "plain"]) == 0
    out = capsys.readouterr().out
    assert "busy share" in out and "scaling vs this run's own case walls" in out
