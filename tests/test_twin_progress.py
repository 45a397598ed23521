"""A derived `eager` case (harness/run/twins.py) as the run shows it: no "running" line (it
runs no process), one line saying where its figures came from, and `memory_rounds` that say
they are the twin's eager reads, not rounds the eager case ran."""

from __future__ import annotations

import io
import sys

import pytest
from rich.console import Console

from harness.measure.spec import WorkerSpec
from harness.model.schema import Case, Record
from harness.report.display import ProgressPrinter
from harness.run import runner, twins

ENV = {"host": "test-host", "python_executable": sys.executable, "torch_version": "x", "cpu_model": "cpu",
       "packages": {}, "devices": {}, "git_commit": "abc"}


def case_id(compiler: str) -> str:
    return f"mlp-classic/forward/{compiler}/cpu/float32/bs16/tiny"


def block(median: float) -> dict:
    return {"samples_s": [median] * 5, "first_call_s": 0.5, "inner_loops": 1, "summary": {"n": 5, "median": median},
            "peak_memory_bytes": 1 << 20, "peak_memory_delta_bytes": 1024, "memory_kind": "device_allocator",
            "memory_source": "rounds"}


ROUNDS = {"probe_resident_bytes": 4096, "reads": {"eager": 6, "compiled": 6}, "spent_s": {"eager": 0.01, "compiled": 0.02}}


class Worker:
    """The one worker, faked: an ok compiled case with both blocks and its rounds' reads, or a failure."""

    def __init__(self, fail: bool = False):
        self.fail = fail
        self.calls: list[str] = []

    def __call__(self, c: Case, spec: WorkerSpec, timeout_s: float, **kwargs) -> Record:
        self.calls.append(c.case_id)
        if c.compiler == "eager":
            return Record(c, "ok", eager=block(0.003), metrics={"latency_s": 0.003})
        if self.fail:
            return Record.failure(c, "fail_compile", "X", "boom", phase="compile")
        return Record(c, "ok", eager=block(0.002), compiled=block(0.001),
                      metrics={"latency_s": 0.001, "speedup": 2.0, "memory_rounds": ROUNDS}, worker={"pid": 7, "wall_s": 3.0})


def _execute(tmp_path, monkeypatch, worker: Worker) -> tuple[list[tuple[str, str]], object]:
    monkeypatch.setenv(twins.TEST_ON_CPU_ENV, "1")
    monkeypatch.setattr(runner, "run_worker", worker)
    events: list[tuple[str, str]] = []
    opts = runner.RunOptions(workloads=["mlp-classic"], compilers=["eager", "inductor"], devices=["cpu"],
                             scenarios=["forward"], sizes=["tiny"], out_dir=str(tmp_path), ingest=False)
    run = runner.execute(opts, progress=lambda event, c, i, n, rec: events.append((event, c.case_id)),
                         environment=ENV)
    return events, run


def test_a_derived_eager_case_gets_no_running_event(tmp_path, monkeypatch):
    events, run = _execute(tmp_path, monkeypatch, Worker())
    assert events == [("start", case_id("inductor")), ("done", case_id("inductor")), ("done", case_id("eager"))]
    assert twins.is_derived(run.record_map()[case_id("eager")])


def test_an_eager_case_whose_twin_failed_is_shown_running(tmp_path, monkeypatch):
    worker = Worker(fail=True)
    events, run = _execute(tmp_path, monkeypatch, worker)
    assert ("start", case_id("eager")) in events and case_id("eager") in worker.calls
    assert not twins.is_derived(run.record_map()[case_id("eager")])


def test_the_derived_line_names_the_twin_and_no_time_of_its_own(tmp_path, monkeypatch):
    _, run = _execute(tmp_path, monkeypatch, Worker())
    out = io.StringIO()
    printer = ProgressPrinter(Console(file=out, width=300))
    twin, derived = run.record_map()[case_id("inductor")], run.record_map()[case_id("eager")]
    printer("start", twin.case, 0, 2, None)
    printer("done", twin.case, 0, 2, twin)
    printer("done", derived.case, 1, 2, derived)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and "running" not in lines[2]
    assert lines[2].startswith(f"[2/2] ok {case_id('eager')} derived: eager figures from {case_id('inductor')}, "
                               "no process of its own (run ")
    assert " in " not in lines[2]  # the previous case's elapsed time is not this one's
    assert printer.eta.durations and len(printer.eta.durations) == 1  # the derived microseconds teach the ETA nothing


def test_a_derived_records_memory_rounds_are_the_twins_eager_reads(tmp_path, monkeypatch):
    _, run = _execute(tmp_path, monkeypatch, Worker())
    rounds = run.record_map()[case_id("eager")].metrics["memory_rounds"]
    assert rounds == {"probe_resident_bytes": 4096, "reads": {"eager": 6}, "spent_s": {"eager": pytest.approx(0.01)},
                      "from_case": case_id("inductor")}
    assert run.record_map()[case_id("inductor")].metrics["memory_rounds"] == ROUNDS  # the twin's own untouched


def test_with_gpus_the_held_eager_case_gets_no_running_event_either(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILEBENCH_TEST_FAKE_GPUS", "2")
    monkeypatch.setenv(twins.TEST_ON_CPU_ENV, "1")
    worker = Worker()
    monkeypatch.setattr(runner, "run_worker", worker)
    events: list[tuple[str, str]] = []
    opts = runner.RunOptions(workloads=["mlp-classic"], compilers=["eager", "inductor"], devices=["cpu"],
                             scenarios=["forward"], sizes=["tiny"], out_dir=str(tmp_path), ingest=False, gpus=[0, 1])
    run = runner.execute(opts, progress=lambda event, c, i, n, rec: events.append((event, c.case_id)), environment=ENV)
    assert twins.is_derived(run.record_map()[case_id("eager")]) and worker.calls == [case_id("inductor")]
    assert ("start", case_id("eager")) not in events and ("done", case_id("eager")) in events
