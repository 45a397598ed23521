"""SIGINT and SIGTERM stop a run at every point of its life: exit 130, every finished case kept.

Signals are placed, never raced. In process, a checkpoint hook (harness/run/signals.py)
raises a real signal at a named point of the run (`signal.raise_signal`: the runner's own
handler runs right there), through the CLI's `main`, so the exit code is the CLI's. One
real `python -m harness run` is stopped while its case blocks until killed
(tests/faults/blocking.py writes a marker first), started the way issue 18's failing run
was: with SIGINT inherited as ignored.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from harness.cli.main import EXIT_INTERRUPTED, main
from harness.model.schema import Case, Record, load_run
from harness.run import runner
from harness.run.journal import journal_path, read_journal
from harness.run.signals import PAUSE_ENV, set_checkpoint_hook
from harness.run.store import HistoryStore
from tests.test_resume import BLOCK_MARKER_ENV, marked_pids, wait_for_marker

ROOT = Path(__file__).resolve().parent.parent
FAULTS = ROOT / "tests" / "faults"
OK, OK_2, BLOCK = "fault-control-ok", "fault-control-ok-2", "fault-block-until-killed"
FAKE_ENV = {"host": "test-host", "python_executable": sys.executable, "torch_version": "x", "cpu_model": "cpu",
            "packages": {}, "devices": {}, "git_commit": "abc"}
REAL_RUN_WORKER = runner.run_worker  # before any test replaces it
# exec keeps an ignored SIGINT, as a non-interactive shell's `compilebench run ... &` does
EXEC_WITH_SIGINT_IGNORED = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                            "os.execv(sys.executable, [sys.executable, '-m', 'harness', *sys.argv[1:]])")


def _run_args(out: Path, workloads: list[str]) -> list[str]:
    return ["run", "--workload-file", str(FAULTS / "suite.py"), "--workload-file", str(FAULTS / "blocking.py"),
            "-w", ",".join(workloads), "-c", "eager", "--scenario", "forward",
            "--min-time", "0.02", "--min-samples", "3", "--out", str(out)]


def _check_interrupted(out: Path, finished: list[str]) -> None:
    """The run file holds exactly the finished cases, in agreement with the journal (kept
    for --resume) and the history store."""
    saved = load_run(next((out / "runs").glob("*.json")))
    assert saved.config["interrupted"] is True
    assert [r.case.workload for r in saved.records] == finished
    assert all(r.status == "ok" for r in saved.records)
    state = read_journal(journal_path(out, saved.run_id))
    assert list(state.records) == [r.case_id for r in saved.records]
    with HistoryStore(out / "history.sqlite") as store:
        assert len(store.load_run(saved.run_id).records) == len(finished)


# ---- in process: a real signal at each named point ---------------------------------------

class SignalAt:
    """Checkpoint hook: raise `sig` the `nth` time the run reaches `point` (several pairs
    for a second signal); remembers the points reached."""

    def __init__(self, *plan: tuple[str, int, signal.Signals]):
        self.plan = list(plan)
        self.reached: list[str] = []
        self.sent: list[str] = []

    def __call__(self, name: str) -> None:
        self.reached.append(name)
        for point, nth, sig in self.plan:
            if point == name and self.reached.count(name) == nth:
                self.sent.append(name)
                signal.raise_signal(sig)  # the handler runs before this returns


def _fake_record(case: Case) -> Record:
    return Record(case, "ok", metrics={"latency_s": 0.001})


@pytest.fixture
def in_process(monkeypatch):
    """A run whose workers are stand-ins (deterministic records), with a fake environment."""
    import harness.measure.environment

    monkeypatch.setattr(harness.measure.environment, "capture_environment", lambda devices: dict(FAKE_ENV))
    monkeypatch.setattr(runner, "run_worker", lambda case, spec, timeout_s, **kw: _fake_record(case))
    yield monkeypatch
    set_checkpoint_hook(None)


@pytest.mark.parametrize(("point", "nth", "sig"), [
    ("next-case", 2, signal.SIGTERM),  # between cases: case 1 journaled, case 2 not started
    ("record-in-hand", 1, signal.SIGINT),  # case 1's worker exited, its record not yet journaled: kept
])
def test_signal_in_the_case_loop(in_process, tmp_path, point, nth, sig):
    hook = SignalAt((point, nth, sig))
    set_checkpoint_hook(hook)
    assert main(_run_args(tmp_path, [OK, OK_2])) == EXIT_INTERRUPTED
    assert hook.sent == [point]
    _check_interrupted(tmp_path, [OK])
    assert hook.reached.count("record-in-hand") == 1  # case 2 never ran


def test_signal_while_a_worker_starts(in_process, tmp_path):
    """A real worker is spawned for case 2; the signal lands before the runner waits on it:
    held until the worker is registered, then the worker is killed."""
    calls: list[str] = []

    def first_fake_then_real(case, spec, timeout_s, **kw):
        calls.append(case.workload)
        return _fake_record(case) if len(calls) == 1 else REAL_RUN_WORKER(case, spec, timeout_s, **kw)

    in_process.setattr(runner, "run_worker", first_fake_then_real)
    spawned: list = []

    def hook(name: str) -> None:
        if name == "worker-started":
            spawned.extend(runner.LIVE_WORKERS)
            signal.raise_signal(signal.SIGINT)

    set_checkpoint_hook(hook)
    assert main(_run_args(tmp_path, [OK, OK_2])) == EXIT_INTERRUPTED
    _check_interrupted(tmp_path, [OK])
    assert len(spawned) == 1 and spawned[0].returncode == -signal.SIGKILL  # the worker in flight was killed
    assert not runner.LIVE_WORKERS


def test_signal_while_writing_the_complete_run_file(in_process, tmp_path):
    """Every case is done; the signal lands between the run file and its history rows. Both
    are completed (the signal is held), the journal is removed, and the run reports 130."""
    set_checkpoint_hook(SignalAt(("run-file-written", 1, signal.SIGTERM)))
    assert main(_run_args(tmp_path, [OK, OK_2])) == EXIT_INTERRUPTED
    saved = load_run(next((tmp_path / "runs").glob("*.json")))
    assert saved.config["interrupted"] is False and [r.case.workload for r in saved.records] == [OK, OK_2]
    assert not journal_path(tmp_path, saved.run_id).exists()
    with HistoryStore(tmp_path / "history.sqlite") as store:
        assert store.run_ids() == [saved.run_id]


def test_second_signal_while_saving_the_interrupted_run(in_process, tmp_path):
    """Ctrl-C between cases, then SIGTERM while the interrupted run file is being written:
    the second signal waits for the save (run file and history) instead of cutting it short."""
    hook = SignalAt(("next-case", 2, signal.SIGINT), ("run-file-written", 1, signal.SIGTERM))
    set_checkpoint_hook(hook)
    assert main(_run_args(tmp_path, [OK, OK_2])) == EXIT_INTERRUPTED
    assert hook.sent == ["next-case", "run-file-written"]
    _check_interrupted(tmp_path, [OK])


@pytest.mark.parametrize("step", ["warm-worker", "tlparse"])
def test_signal_during_warm_compile_or_tlparse_is_not_held(in_process, tmp_path, step):
    """Case 2's cold worker has exited; the signal lands in its warm-compile worker or in
    tlparse (up to 300 s). It stops the run right there, not when that step ends: the step
    goes no further, case 2 (in flight) is dropped, case 1 is kept."""
    from harness.model.payloads import Timing

    steps: list[str] = []  # each step, and whether it went on after the signal

    def fake_process(case, spec, tmp, name, *args):
        if name == "warm" and case.workload == OK_2 and step == "warm-worker":
            steps.append("warm")
            signal.raise_signal(signal.SIGINT)
            steps.append("warm went on")
        return Record(case, "ok", metrics={"compile_time_s": 1.0}, compiled=Timing(samples_s=[0.001]))

    def fake_attach(record, trace_dir, max_bytes, key="trace"):
        if key == "trace" and record.case.workload == OK_2 and step == "tlparse":
            steps.append("tlparse")
            signal.raise_signal(signal.SIGINT)
            steps.append("tlparse went on")

    in_process.setattr(runner, "run_worker", REAL_RUN_WORKER)  # the real one, around stand-in processes
    in_process.setattr(runner, "_run_process", fake_process)
    in_process.setattr(runner, "attach_trace", fake_attach)
    assert main([*_run_args(tmp_path, [OK, OK_2]), "--warm-compile", "--trace"]) == EXIT_INTERRUPTED
    assert steps == [{"warm-worker": "warm", "tlparse": "tlparse"}[step]]
    _check_interrupted(tmp_path, [OK])


def test_handlers_are_restored_after_a_run(in_process, tmp_path):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    assert main(_run_args(tmp_path, [OK])) == 0
    assert {s: signal.getsignal(s) for s in before} == before


# ---- a real run, a real Ctrl-C -------------------------------------------------------------

@pytest.mark.slow
def test_ctrl_c_mid_case_with_sigint_inherited_as_ignored(tmp_path):
    """Issue 18's failure: started from `cmd &` in a script, the runner inherited SIGINT
    ignored, dropped Ctrl-C and ran on to exit 0. Here the case in flight blocks until
    killed; SIGINT stops the run, and a SIGTERM sent while the interrupted run file is being
    written waits for the save."""
    out, mark = tmp_path / "results", uuid.uuid4().hex
    blocked, paused = tmp_path / "blocked", tmp_path / "paused"
    env = {**os.environ, "COMPILEBENCH_TEST_MARK": mark, "PYTHONPATH": str(ROOT), BLOCK_MARKER_ENV: str(blocked),
           PAUSE_ENV: f"run-file-written:1:{paused}"}
    proc = subprocess.Popen([sys.executable, "-c", EXEC_WITH_SIGINT_IGNORED, *_run_args(out, [OK, BLOCK])],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_marker(proc, blocked)
    proc.send_signal(signal.SIGINT)
    wait_for_marker(proc, paused)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, stderr
    _check_interrupted(out, [OK])
    assert marked_pids(mark) == []  # the blocked worker was killed with its tree
