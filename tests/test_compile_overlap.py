"""`run --compile-overlap N` (harness/run/overlap.py, harness/measure/quiet.py): the lock between
real processes, the twin-group scheduling of the pool, the overlap figures and their check, the
option's resolution and refusals, compare's warning, and one real overlapped run on CPU."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.analysis.compare import compare_runs, compile_overlap_mismatch
from harness.cli.main import main
from harness.measure import quiet
from harness.model.schema import Case, Record, load_run
from harness.run.multigpu import GpuPool
from harness.run.overlap import (
    OVERLAP_KEY,
    OverlapPlanError,
    RunAgainAlone,
    annotate,
    gang_order,
    resolve_width,
    start_overlap_pool,
)
from harness.testing.synthetic import synthetic_run

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_lock_left():
    quiet.reset_for_tests()
    yield
    quiet.reset_for_tests()


def _holder(lock: Path, mode: str, go: Path) -> subprocess.Popen:
    """A process that takes the lock (`shared` or `exclusive` after shared), says so on stdout,
    and holds it until `go` exists."""
    code = (f"import time, pathlib; from harness.measure import quiet; quiet.hold_shared({str(lock)!r}); "
            + ("quiet.take_exclusive(); " if mode == "exclusive" else "")
            + f"print('held', flush=True)\nwhile not pathlib.Path({str(go)!r}).exists(): time.sleep(0.01)")
    return subprocess.Popen([sys.executable, "-c", code], cwd=PROJECT, stdout=subprocess.PIPE, text=True)


def _returns_within(fn, seconds: float) -> bool:
    done = threading.Event()
    threading.Thread(target=lambda: (fn(), done.set()), daemon=True).start()
    return done.wait(seconds)


def test_exclusive_waits_for_every_shared_holder_and_blocks_new_ones(tmp_path: Path) -> None:
    lock, go = tmp_path / "quiet.lock", tmp_path / "go"
    other = _holder(lock, "shared", go)  # a worker still compiling
    try:
        assert other.stdout.readline().strip() == "held"
        assert quiet.hold_shared(str(lock))
        # this worker's measure must wait for the other's compile to end
        assert not _returns_within(quiet.take_exclusive, 0.5)
        go.touch()
        other.wait(10)
        deadline = time.monotonic() + 10
        while quiet.times().get("exclusive_at") is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert quiet.times()["exclusive_at"] >= quiet.times()["exclusive_asked"]
        go.unlink()
        # a worker starting now waits at its start, before doing anything
        late = _holder(lock, "shared", go)
        said = threading.Event()
        threading.Thread(target=lambda: late.stdout.readline() and said.set(), daemon=True).start()
        assert not said.wait(0.5)
        quiet.release()
        assert said.wait(10)
        go.touch()
        late.wait(10)
    finally:
        go.touch()
        other.kill()


def test_a_killed_measurer_frees_the_lock(tmp_path: Path) -> None:
    lock, go = tmp_path / "quiet.lock", tmp_path / "never"
    measurer = _holder(lock, "exclusive", go)
    assert measurer.stdout.readline().strip() == "held"
    assert not _returns_within(lambda: quiet.hold_shared(str(lock)), 0.3)
    measurer.kill()  # the kernel drops a dead process's lock: a crash or a timeout never wedges the run
    measurer.wait(10)
    deadline = time.monotonic() + 10
    while not quiet.active() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert quiet.active()


def test_a_case_run_alone_takes_the_lock_exclusive_at_its_start(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    lock, go = tmp_path / "quiet.lock", tmp_path / "go"
    other = _holder(lock, "shared", go)  # another worker compiling
    try:
        assert other.stdout.readline().strip() == "held"
        monkeypatch.setenv(quiet.ALONE_ENV, "1")
        assert not _returns_within(lambda: quiet.hold_shared(str(lock)), 0.5)
        go.touch()
        other.wait(10)
        deadline = time.monotonic() + 10
        while not quiet.active() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert quiet.active()
        assert _returns_within(quiet.take_exclusive, 1.0)  # already exclusive: no wait
    finally:
        go.touch()
        other.kill()


def test_no_lock_named_records_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(quiet.QUIET_LOCK_ENV, raising=False)
    assert not quiet.hold_shared()
    quiet.mark("compile_start")
    assert quiet.times() == {}
    with pytest.raises(RuntimeError):
        quiet.take_exclusive()


@pytest.mark.parametrize(("window", "others", "expected"), [
    ((0.0, 10.0), [], 0.0),
    ((0.0, 10.0), [(2.0, 4.0), (3.0, 6.0)], 4.0),  # a union, not a sum
    ((0.0, 10.0), [(-5.0, 1.0), (9.0, 20.0)], 2.0),  # clipped to the window
    ((0.0, 10.0), [(10.0, 12.0), (-3.0, 0.0)], 0.0),  # touching is not overlapping
    ((0.0, 10.0), [(1.0, 2.0), (5.0, 7.0)], 3.0),
])
def test_overlap_seconds(window, others, expected) -> None:
    assert quiet.overlap_seconds(window, others) == pytest.approx(expected)


def _case(workload: str, compiler: str, scenario: str = "forward") -> Case:
    return Case(workload, scenario, compiler, "cuda", "float32", 8, "tiny", "s")


def _pooled(case: Case, start: float, times: dict[str, float], end: float) -> Record:
    rec = Record(case=case, status="ok", metrics={"phase_s": {}})
    rec.worker = {"overlap_pool": {"started_at": start, "ended_at": end, "slot": 0}, "quiet": times}
    return rec


def test_annotate_measures_the_compile_beside_others_and_checks_each_measurement() -> None:
    a = _pooled(_case("m", "inductor"), 0.0, {"shared_asked": 0.0, "shared_at": 0.0, "compile_start": 1.0,
                                               "compile_end": 9.0, "exclusive_asked": 9.0, "exclusive_at": 12.0,
                                               "record_at": 14.0}, 14.1)
    b = _pooled(_case("m", "inductor-reduce-overhead"), 0.0,
                {"shared_asked": 0.0, "shared_at": 0.0, "compile_start": 1.0, "compile_end": 12.0,
                 "exclusive_asked": 12.0, "exclusive_at": 14.05, "record_at": 16.0}, 16.1)
    # started while b measured: it waited at its start, its busy window opens when b exits
    c = _pooled(_case("n", "inductor"), 14.1, {"shared_asked": 14.15, "shared_at": 16.1, "compile_start": 17.0,
                                                "compile_end": 20.0, "exclusive_asked": 20.0,
                                                "exclusive_at": 20.0, "record_at": 21.0}, 21.1)
    annotate([a, b, c])
    assert a.metrics[OVERLAP_KEY]["overlapped_s"] == pytest.approx(8.0)  # b busy all through a's compile
    assert a.metrics[OVERLAP_KEY]["share"] == pytest.approx(1.0)
    assert a.metrics[OVERLAP_KEY]["beside"] == [b.case_id]
    assert b.metrics[OVERLAP_KEY]["overlapped_s"] == pytest.approx(8.0)  # a asked to measure at 9.0
    assert c.metrics[OVERLAP_KEY]["overlapped_s"] == 0.0
    assert c.metrics[OVERLAP_KEY]["start_wait_s"] == pytest.approx(1.95)
    for rec in (a, b, c):
        assert rec.metrics[OVERLAP_KEY]["measured_beside_s"] == 0.0
        assert not rec.notes


def test_annotate_flags_a_measurement_another_worker_was_busy_in() -> None:
    a = _pooled(_case("m", "inductor"), 0.0, {"shared_at": 0.0, "compile_start": 1.0, "compile_end": 2.0,
                                               "exclusive_asked": 2.0, "exclusive_at": 2.0, "record_at": 6.0}, 6.1)
    # a lock that did not hold: b compiled from 3 to 5 while a measured
    b = _pooled(_case("m", "inductor-reduce-overhead"), 2.5, {"shared_at": 3.0, "compile_start": 3.0,
                                                              "compile_end": 5.0, "exclusive_asked": 5.0,
                                                              "exclusive_at": 6.2, "record_at": 7.0}, 7.1)
    annotate([a, b])
    assert a.metrics[OVERLAP_KEY]["measured_beside_s"] == pytest.approx(2.0)
    assert any("quiet lock did not hold" in n for n in a.notes)
    assert not b.notes


def test_annotate_compares_one_pools_records_only() -> None:
    """A resumed run's first pool ran at another time (maybe before a reboot reset the clock)."""
    a = _pooled(_case("m", "inductor"), 0.0, {"shared_at": 0.0, "compile_start": 1.0, "compile_end": 2.0,
                                               "exclusive_asked": 2.0, "exclusive_at": 2.0, "record_at": 6.0}, 6.1)
    b = _pooled(_case("n", "inductor"), 0.0, {"shared_at": 0.5, "compile_start": 1.0, "compile_end": 5.0,
                                               "exclusive_asked": 5.0, "exclusive_at": 6.2, "record_at": 7.0}, 7.1)
    a.worker["overlap_pool"]["pool"], b.worker["overlap_pool"]["pool"] = "first", "resumed"
    annotate([a, b])
    assert a.metrics[OVERLAP_KEY]["measured_beside_s"] == 0.0 and not a.notes
    assert a.metrics[OVERLAP_KEY]["overlapped_s"] == 0.0 and a.metrics[OVERLAP_KEY]["beside"] == []


def test_the_runner_holds_the_lock_while_it_readies_a_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork server started on first use imports in the runner's time: no worker may measure
    then. The hold goes when the launch fails too."""
    import fcntl
    import os

    from harness.measure.spec import WorkerSpec
    from harness.run import runner

    lock = tmp_path / "quiet.lock"
    seen = []

    def server_for(spec, python, env, trace_dir):
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a measurer's request
            seen.append("free")
        except BlockingIOError:
            seen.append("held")
        finally:
            os.close(fd)
        raise RuntimeError("stop here")

    monkeypatch.setattr(runner, "_server_for", server_for)
    with pytest.raises(RuntimeError, match="stop here"):
        runner.launch(WorkerSpec(case=_case("m", "inductor")), tmp_path, "cold", tmp_path / "cache", 10.0,
                      extra_env={quiet.QUIET_LOCK_ENV: str(lock)})
    assert seen == ["held"]
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released after the failure
    os.close(fd)


def test_annotate_leaves_records_no_pool_ran_alone() -> None:
    derived = Record(case=_case("m", "eager"), status="ok", metrics={"phase_s": {}})
    annotate([derived])
    assert OVERLAP_KEY not in derived.metrics


def test_gang_order_keeps_twins_together_compiled_first() -> None:
    cases = [_case("m", "eager", "train"), _case("m", "inductor", "train"), _case("n", "inductor"),
             _case("m", "inductor-reduce-overhead", "train"), _case("n", "eager")]
    assert [(c.workload, c.compiler) for c in gang_order(cases)] == [
        ("m", "inductor"), ("m", "inductor-reduce-overhead"), ("m", "eager"), ("n", "inductor"), ("n", "eager")]


class Gate:
    """run_one for a pool: each case blocks until the test releases it; starts are recorded."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.started: list[str] = []
        self.running: set[str] = set()
        self.max_groups = 0
        self.released: set[str] = set()
        self.envs: dict[str, dict[str, str]] = {}

    def run_one(self, case: Case, env) -> Record:
        with self.cond:
            self.started.append(case.workload + "/" + case.compiler)
            self.running.add(case.case_id)
            self.envs[case.case_id] = dict(env)
            self.max_groups = max(self.max_groups, len({cid.split("/")[0] for cid in self.running}))
            self.cond.notify_all()
            self.cond.wait_for(lambda: case.case_id in self.released, timeout=30)
            self.running.discard(case.case_id)
        return Record(case=case, status="ok", metrics={"phase_s": {}})

    def wait_started(self, n: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.started) >= n, timeout=30), self.started

    def release(self, case: Case) -> None:
        with self.cond:
            self.released.add(case.case_id)
            self.cond.notify_all()


def test_pool_starts_a_group_only_when_the_last_one_is_done(tmp_path: Path) -> None:
    a1, a2, b1, b2 = _case("a", "inductor"), _case("a", "inductor-reduce-overhead"), _case("b", "inductor"), \
        _case("b", "inductor-reduce-overhead")
    gate = Gate()
    pool = start_overlap_pool([a1, a2, b1, b2], gate.run_one, 2, tmp_path / "quiet.lock")
    gate.wait_started(2)
    assert sorted(gate.started) == ["a/inductor", "a/inductor-reduce-overhead"]  # the twins, side by side
    gate.release(a1)
    pool.result(a1)
    time.sleep(0.3)  # a free slot must not start b1 beside a2 (the negative needs a moment)
    assert len(gate.started) == 2
    gate.release(a2)
    gate.wait_started(4)  # both of b's cases start together once a is done
    gate.release(b1)
    gate.release(b2)
    assert [pool.result(c).status for c in (a2, b1, b2)] == ["ok"] * 3
    assert gate.max_groups == 1
    lock_env = {env[quiet.QUIET_LOCK_ENV] for env in gate.envs.values()}
    assert lock_env == {str(tmp_path / "quiet.lock")}
    slots = {env["COMPILEBENCH_OVERLAP_SLOT"] for env in gate.envs.values()}
    assert slots == {"0", "1"}  # one fork server per slot: a server runs one case at a time


def test_a_gpus_pool_is_unchanged_by_groups() -> None:
    """Without group_of (--gpus), a free GPU takes the next case whatever its group."""
    cases = [_case("a", "inductor"), _case("b", "inductor")]
    gate = Gate()
    pool = GpuPool(cases, gate.run_one, [0, 1], {})
    gate.wait_started(2)
    assert gate.max_groups == 2
    for c in cases:
        gate.release(c)
    assert [pool.result(c).status for c in cases] == ["ok", "ok"]


@pytest.mark.parametrize(("asked", "default", "gpus", "warm", "expected"), [
    (None, 2, [], False, 2),  # the suite's default (gpu: 2)
    (None, 1, [], False, 1),
    (None, 2, [0, 1], False, 1),  # gives way to --gpus
    (None, 2, [], True, 1),  # and to --warm-compile
    (3, 1, [], False, 3),
    (1, 2, [0, 1], False, 1),
])
def test_resolve_width(asked, default, gpus, warm, expected) -> None:
    assert resolve_width(asked, default, gpus, warm) == expected


@pytest.mark.parametrize(("asked", "gpus", "warm", "fix"), [
    (0, [], False, "use 1 (off) to 8"), (9, [], False, "use 1 (off) to 8"),
    (2, [0, 1], False, "--gpus"), (2, [], True, "--warm-compile"),
])
def test_resolve_width_refuses(asked, gpus, warm, fix) -> None:
    with pytest.raises(OverlapPlanError, match=fix.replace("(", r"\(").replace(")", r"\)")):
        resolve_width(asked, 1, gpus, warm)


def test_trace_turns_the_default_off_and_refuses_the_option() -> None:
    assert resolve_width(None, 2, [], False, trace=True) == 1
    with pytest.raises(OverlapPlanError, match="--trace"):
        resolve_width(2, 1, [], False, trace=True)


def test_cli_refuses_a_bad_width_before_any_case(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "-w", "mlp-classic", "-c", "eager", "--device", "cpu", "--compile-overlap", "0",
                 "--out", str(tmp_path)]) == 2
    assert "--compile-overlap 0" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())
    assert main(["run", "--resume", "x", "--compile-overlap", "2", "--out", str(tmp_path)]) == 2
    assert "drop --compile-overlap" in capsys.readouterr().err


def test_compare_warns_when_the_widths_differ() -> None:
    base, head = synthetic_run(3, 1), synthetic_run(3, 2)
    base.config["compile_overlap"], head.config["compile_overlap"] = 1, 2
    assert "base 1 vs head 2" in compile_overlap_mismatch([base], [head])
    assert any("--compile-overlap" in w for w in compare_runs([base], [head]).warnings)
    head.config["compile_overlap"] = 1
    assert compile_overlap_mismatch([base], [head]) is None
    del base.config["compile_overlap"]  # a run from before the option: one at a time
    assert compile_overlap_mismatch([base], [head]) is None
    # a merge of shards that ran at different widths keeps each under config.sources
    head.config = {"sources": {"s1": {"compile_overlap": 2}, "s2": {"compile_overlap": 1}}}
    assert "base 1 vs head 1/2" in compile_overlap_mismatch([base], [head])


def test_width_is_cut_to_the_largest_group() -> None:
    from harness.run.overlap import slots_needed

    twins = [_case("m", "inductor"), _case("m", "inductor-reduce-overhead")]
    assert slots_needed(twins, 8) == 2
    assert slots_needed(twins[:1] + [_case("n", "inductor")], 2) == 1  # one case a group: one at a time
    assert slots_needed([], 2) == 1


def test_real_overlapped_run_on_cpu(tmp_path: Path) -> None:
    """Tiny CPU cases, two workers at once: every measurement alone by the lock's own moments,
    each compiled twin's overlap with the other read from the same moments."""
    assert main(["run", "-w", "mlp-classic", "--scenario", "forward", "-c", "eager,inductor,inductor-reduce-overhead",
                 "--device", "cpu", "--compile-overlap", "2", "--out", str(tmp_path), "--no-ingest",
                 "--min-time", "0.05", "--warmup", "1"]) == 0
    run = load_run(next((tmp_path / "runs").glob("*.json")))
    assert run.config["compile_overlap"] == 2
    assert [r.status for r in run.records] == ["ok"] * 3
    times = {r.case_id: r.worker["quiet"] for r in run.records}
    busy = {cid: (t["shared_at"], t["exclusive_asked"]) for cid, t in times.items()}
    for cid, t in times.items():
        assert t["shared_at"] <= t["exclusive_asked"] <= t["exclusive_at"] <= t["record_at"]
        others = [w for other, w in busy.items() if other != cid]
        assert quiet.overlap_seconds((t["exclusive_at"], t["record_at"]), others) == 0.0
    compiled = [r for r in run.records if r.case.compiler != "eager"]
    for rec in compiled:
        block = rec.metrics[OVERLAP_KEY]
        window = (rec.worker["quiet"]["compile_start"], rec.worker["quiet"]["compile_end"])
        twin = next(r for r in compiled if r is not rec)
        expected = quiet.overlap_seconds(window, [busy[twin.case_id]])
        assert block["overlapped_s"] == pytest.approx(expected, abs=2e-3)
        assert (twin.case_id in block["beside"]) == (expected > 0)
        assert block["measured_beside_s"] == 0.0
        assert rec.metrics["phase_s"]["quiet"] >= 0.0


def _oom(case: Case) -> Record:
    rec = Record.failure(case, "oom", "OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB",
                         phase="build")
    rec.worker["wall_s"] = 3.5
    return rec


def test_again_alone_reruns_an_oom_or_timeout_with_the_lock_exclusive_from_its_start() -> None:
    case, envs = _case("llama", "inductor"), []
    again = RunAgainAlone(lambda c, env: envs.append(dict(env)) or Record(case=c, status="ok", metrics={"phase_s": {}}))
    first = _oom(case)
    assert again.wanted(first)
    record = again.run(case, {quiet.QUIET_LOCK_ENV: "/tmp/x"}, first)
    assert record.status == "ok"
    assert envs == [{quiet.QUIET_LOCK_ENV: "/tmp/x", quiet.ALONE_ENV: "1"}]
    assert record.worker["overlap_retry"] == {"status": "oom", "wall_s": 3.5,
                                              "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}
    assert any("ran out of memory beside another worker" in n and "then ok" in n for n in record.notes)
    timed_out = Record.failure(case, "timeout", "Timeout", "no result after 600s", phase="run")
    assert again.wanted(timed_out)
    assert not again.wanted(Record.failure(case, "fail_compile", "BackendCompilerFailed", "x", phase="compile"))
    capped = _oom(case)
    capped.error = capped.error.with_fields(memory_cap_bytes=1 << 30)  # --max-memory-gb: the same cap alone
    assert not again.wanted(capped)


class Rerun:
    """again_alone for a pool test: the first try of `case` 'runs out of memory'."""

    def __init__(self, gate: Gate, target: Case) -> None:
        self.gate, self.target = gate, target
        self.alone_with: list[set[str]] = []

    def wanted(self, record: Record) -> bool:
        return record.case_id == self.target.case_id and record.status == "oom"

    def run(self, case: Case, env, first: Record) -> Record:
        with self.gate.cond:
            self.alone_with.append(set(self.gate.running))
        return Record(case=case, status="ok", metrics={"phase_s": {}})


def test_pool_reruns_a_crowded_case_only_once_no_other_case_runs(tmp_path: Path) -> None:
    a1, a2, a3, b1 = (_case("a", "inductor"), _case("a", "inductor-reduce-overhead"), _case("a", "aot_eager"),
                      _case("b", "inductor"))
    gate, tried = Gate(), set()

    def run_one(case: Case, env) -> Record:
        if case == a1 and case.case_id not in tried:  # its first try 'runs out of memory' beside a2
            tried.add(case.case_id)
            gate.wait_started(1)
            return _oom(case)
        return gate.run_one(case, env)

    rerun = Rerun(gate, a1)
    pool = GpuPool([a1, a2, a3, b1], run_one, [0, 1], None, slot_env=lambda case, slot: {},
                   group_of=lambda c: c.workload, again_alone=rerun)
    gate.wait_started(1)  # a2 (a1 'ran out' once a2 had started beside it)
    time.sleep(0.3)  # the negative needs a moment: neither the rerun nor a3 may start beside a2
    assert not rerun.alone_with and gate.started == ["a/inductor-reduce-overhead"]
    gate.release(a2)
    assert pool.result(a1).status == "ok"
    assert rerun.alone_with == [set()]  # nothing else ran beside it
    gate.wait_started(2)  # then a3, then b once a is done
    assert gate.started[1] == "a/aot_eager"
    gate.release(a3)
    gate.wait_started(3)
    gate.release(b1)
    assert [pool.result(c).status for c in (a2, a3, b1)] == ["ok"] * 3


def test_pool_does_not_rerun_a_case_that_ran_alone(tmp_path: Path) -> None:
    a1 = _case("a", "inductor")
    rerun = Rerun(Gate(), a1)
    pool = GpuPool([a1], lambda c, env: _oom(c), [0, 1], None, slot_env=lambda case, slot: {},
                   group_of=lambda c: c.workload, again_alone=rerun)
    assert pool.result(a1).status == "oom" and not rerun.alone_with


def test_report_shows_the_share_beside_another_next_to_the_compile() -> None:
    from harness.report.report import compile_beside_share, render_report

    run = synthetic_run(2, 3)
    run.records[0].metrics[OVERLAP_KEY] = {"overlapped_s": 4.2, "share": 0.42, "beside": [run.records[1].case_id]}
    run.records[1].metrics[OVERLAP_KEY] = {"overlapped_s": 0.0, "share": 0.0, "beside": []}
    html = render_report(run, charts=False)
    assert html.count("% beside another") == 1 and "(42% beside another)" in html
    assert compile_beside_share({}) is None and compile_beside_share({OVERLAP_KEY: {"share": "x"}}) is None


class Tracker:
    """run_one / again_alone for pool tests on real threads: each 'worker' lasts `seconds`; the
    log keeps, at every start, which cases were running then."""

    def __init__(self, seconds: dict[str, float], oom: frozenset[str] = frozenset()) -> None:
        self.seconds, self.oom = seconds, oom
        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.log: list[tuple[str, str, frozenset[str]]] = []

    def _go(self, kind: str, case: Case) -> None:
        name = f"{case.workload}/{case.compiler}"
        with self.lock:
            self.running.add(name)
            self.log.append((kind, name, frozenset(self.running)))
        time.sleep(self.seconds.get(name, 0.2))
        with self.lock:
            self.running.discard(name)

    def run_one(self, case: Case, env) -> Record:
        self._go("start", case)
        status = "oom" if f"{case.workload}/{case.compiler}" in self.oom else "ok"
        return Record(case=case, status=status, metrics={"phase_s": {}})

    def wanted(self, record: Record) -> bool:
        return record.status == "oom"

    def run(self, case: Case, env, first: Record) -> Record:
        self._go("alone", case)
        return Record(case=case, status="ok", metrics={"phase_s": {}})


def test_two_reruns_run_back_to_back_before_the_next_group() -> None:
    """Both twins ran out of memory beside each other: each reruns alone, one after the other,
    and the next model's twins start together only after both (not one of them in between)."""
    cases = [_case("a", "inductor"), _case("a", "inductor-reduce-overhead"), _case("b", "inductor"),
             _case("b", "inductor-reduce-overhead")]
    t = Tracker({}, oom=frozenset({"a/inductor", "a/inductor-reduce-overhead"}))
    pool = GpuPool(cases, t.run_one, [0, 1], None, slot_env=lambda c, s: {}, group_of=lambda c: c.workload,
                   again_alone=t)
    assert [pool.result(c).status for c in cases] == ["ok"] * 4
    kinds = [(kind, name) for kind, name, _ in t.log]
    assert {k for k, n in kinds[:2]} == {"start"} and {n for k, n in kinds[:2]} == {"a/inductor", "a/inductor-reduce-overhead"}
    assert {k for k, n in kinds[2:4]} == {"alone"}
    for kind, name, running in t.log:
        if kind == "alone":
            assert running == {name}
    assert {n for k, n in kinds[4:]} == {"b/inductor", "b/inductor-reduce-overhead"}
    assert any(len(running) == 2 for kind, name, running in t.log[4:])  # b's twins side by side


def test_a_requeued_eager_case_runs_with_its_group_when_its_twin_ends_last() -> None:
    a_ind, a_ro, a_e = _case("a", "inductor"), _case("a", "inductor-reduce-overhead"), _case("a", "eager")
    b_ind, b_ro = _case("b", "inductor"), _case("b", "inductor-reduce-overhead")
    t = Tracker({"a/inductor": 0.4, "a/inductor-reduce-overhead": 0.2, "a/eager": 0.3})
    pool = GpuPool([a_ind, a_ro, a_e, b_ind, b_ro], t.run_one, [0, 1], None, slot_env=lambda c, s: {},
                   group_of=lambda c: c.workload, held={a_e.case_id: a_ind.case_id},
                   derive=lambda case, twins: time.sleep(0.2))  # no eager figures after all: the case runs
    for c in (a_ind, a_ro, a_e, b_ind, b_ro):
        assert pool.result(c).status == "ok"
    order = [name for _, name, _ in t.log]
    assert order.index("a/eager") < order.index("b/inductor") and order.index("a/eager") < order.index(
        "b/inductor-reduce-overhead")
    b_starts = [running for _, name, running in t.log if name.startswith("b/")]
    assert any(len(r) == 2 for r in b_starts)  # b's twins still together


def test_a_slot_that_gets_the_lock_after_its_run_stopped_starts_no_worker(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The run killed its workers while this slot waited for the lock: the worker it then starts
    is killed at once instead of running a case after the stop."""
    from harness.measure.spec import WorkerSpec
    from harness.run import runner

    lock = str(tmp_path / "quiet.lock")
    monkeypatch.setattr(runner, "STOPPED_LOCKS", {lock})
    monkeypatch.setattr(runner, "_server_for", lambda spec, python, env, trace_dir: (None, {"start": "spawn"}))
    case = Case("mlp-classic", "forward", "eager", "cpu", "float32", 16, "tiny", "s")
    started = time.monotonic()
    outcome = runner.launch(WorkerSpec(case=case), tmp_path, "cold", tmp_path / "cache", 120.0,
                            extra_env={quiet.QUIET_LOCK_ENV: lock})
    assert outcome.returncode is not None and outcome.returncode < 0  # killed, not finished
    assert outcome.result() is None and time.monotonic() - started < 60
