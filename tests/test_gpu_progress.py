"""With `--gpus`, a case's "running" line comes when its GPU starts it (GpuPool `on_start`,
runner.start_announcer), not once it is back, and each finished line gives that case's own
time while others run beside it (ProgressPrinter keeps a start per case). Fake GPUs, fake
workers and a fake clock: no test sleeps for a duration."""

from __future__ import annotations

import io
import sys
import threading

from rich.console import Console

from harness.model.schema import Case, Record
from harness.report.display import ProgressPrinter
from harness.run import runner
from harness.run.multigpu import FAKE_GPUS_ENV, GpuPool
from tests.test_multigpu import DURATIONS, VirtualHost

ENV = {"host": "test-host", "python_executable": sys.executable, "torch_version": "x", "cpu_model": "cpu",
       "packages": {}, "devices": {}, "git_commit": "abc"}


def gpu_case(name: str) -> Case:
    return Case(name, "forward", "inductor", "cuda", "float32", 8, "tiny", "s")


def test_the_pool_announces_each_case_when_its_gpu_starts_it():
    cases = [gpu_case(n) for n in "abcdef"]
    host = VirtualHost(DURATIONS)
    announced: list[tuple[str, float]] = []
    host.pool = GpuPool(cases, host.run_one, [0, 1], {c.case_id: DURATIONS[c.workload] for c in cases},
                        clock=host.clock, on_start=lambda c: announced.append((c.workload, host.clock())))
    records = {r.case.workload: r for r in (host.pool.result(c) for c in host.pool.as_completed(cases))}
    assert sorted(w for w, _ in announced) == list("abcdef")  # each once
    for workload, at in announced:  # on the virtual clock: at the case's start, before its end
        stamp = records[workload].worker["gpu_pool"]
        assert at == stamp["start_s"] < stamp["end_s"], (workload, at, stamp)
    assert announced[:2] in ([("a", 0.0), ("b", 0.0)], [("b", 0.0), ("a", 0.0)])  # both GPUs at t=0


def test_a_failing_announcement_costs_no_case():
    host = VirtualHost({"a": 1.0})
    host.pool = GpuPool([gpu_case("a")], host.run_one, [0], clock=host.clock,
                        on_start=lambda c: 1 / 0)
    (case,) = host.pool.as_completed([gpu_case("a")])
    assert host.pool.result(case).status == "ok"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_finished_line_gives_its_own_cases_time_while_others_run():
    out, clock = io.StringIO(), FakeClock()
    printer = ProgressPrinter(Console(file=out, width=300), clock=clock)
    a, b = gpu_case("a"), gpu_case("b")
    printer("start", a, 0, 2, None)  # GPU 0 at t=0
    clock.now = 2.0
    printer("start", b, 1, 2, None)  # GPU 1 at t=2
    clock.now = 6.0
    printer("done", b, 0, 2, Record(b, "ok"))
    clock.now = 10.0
    printer("done", a, 1, 2, Record(a, "ok"))
    lines = out.getvalue().splitlines()
    assert lines[0] == f"[1/2] running {a.case_id} ..." and lines[1] == f"[2/2] running {b.case_id} ..."
    assert lines[2].startswith(f"[1/2] ok {b.case_id} in 4.0s (run 6s")
    assert lines[3].startswith(f"[2/2] ok {a.case_id} in 10.0s (run 10s")  # not 8.0 s since b started
    assert sorted(printer.eta.durations) == [4.0, 10.0] and not printer.running  # the ETA learns each own time


def test_a_run_on_two_fake_gpus_says_running_while_both_cases_run(tmp_path, monkeypatch):
    """Two cases on two fake GPUs whose workers each wait until the other has started (a
    barrier): both "running" events come before either case is done."""
    monkeypatch.setenv(FAKE_GPUS_ENV, "2")
    both = threading.Barrier(2, timeout=30)
    events: list[tuple[str, str, int]] = []

    def worker(case: Case, spec, timeout_s, **kwargs) -> Record:
        both.wait()  # a BrokenBarrierError ends the case as crashed: the assertions below then fail
        return Record(case, "ok", metrics={"latency_s": 0.001}, worker={"wall_s": 1.0})

    monkeypatch.setattr(runner, "run_worker", worker)
    opts = runner.RunOptions(workloads=["mlp-classic"], compilers=["eager", "inductor"], devices=["cpu"],
                             scenarios=["forward"], sizes=["tiny"], out_dir=str(tmp_path), ingest=False, gpus=[0, 1])
    run = runner.execute(opts, progress=lambda event, c, i, n, rec: events.append((event, c.compiler, i)),
                         environment=ENV)
    assert [r.status for r in run.records] == ["ok", "ok"]
    assert [e[0] for e in events] == ["start", "start", "done", "done"], events
    assert sorted(e[2] for e in events if e[0] == "start") == [0, 1]  # numbered in start order


def test_the_eta_divides_the_remaining_cases_among_the_cases_seen_running_at_once():
    out, clock = io.StringIO(), FakeClock()
    printer = ProgressPrinter(Console(file=out, width=300), clock=clock)
    cases = [gpu_case(n) for n in "abcdef"]
    printer("start", cases[0], 0, 6, None)
    printer("start", cases[1], 1, 6, None)  # two GPUs
    clock.now = 10.0
    printer("done", cases[0], 0, 6, Record(cases[0], "ok"))
    # 10 s a case, 5 cases left (one of them running) over 2 lanes: 25 s, not 50 s
    assert out.getvalue().splitlines()[-1].endswith("in 10.0s (run 10s, ETA 25s)")
    printer("start", cases[2], 2, 6, None)
    assert out.getvalue().splitlines()[-1].endswith("(ETA 20s) ...")  # 4 left from here, 2 at a time
    one_by_one, clock.now = io.StringIO(), 0.0
    serial = ProgressPrinter(Console(file=one_by_one, width=300), clock=clock)
    serial("start", cases[0], 0, 6, None)
    clock.now = 10.0
    serial("done", cases[0], 0, 6, Record(cases[0], "ok"))
    assert one_by_one.getvalue().splitlines()[-1].endswith("(run 10s, ETA 50s)")  # one case at a time: all 5 in a row
