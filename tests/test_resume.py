"""Interruptions: the journal keeps every finished case; --resume finishes the run.

In-process tests use a fake worker (deterministic records, counted calls) to prove the
logic: a resumed run equals a full run and runs only the missing cases. The subprocess
test SIGKILLs `python -m harness run` while its second case blocks, then resumes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.measure.spec import WorkerSpec
from harness.model.schema import Case, Record, RunFileError, load_run
from harness.run import runner
from harness.run.journal import Journal, ResumeError, journal_path, read_journal

ROOT = Path(__file__).resolve().parent.parent
FAULTS = ROOT / "tests" / "faults"
FAKE_ENV = {"host": "test-host", "python_executable": sys.executable, "torch_version": "x", "cpu_model": "cpu",
            "packages": {}, "devices": {}, "git_commit": "abc"}


class FakeWorker:
    """Stands in for run_worker: a record computed from the case alone, optionally raising
    KeyboardInterrupt (Ctrl-C) when asked for the N-th case."""

    def __init__(self, interrupt_at: int | None = None):
        self.calls: list[str] = []
        self.interrupt_at = interrupt_at

    def __call__(self, case: Case, spec: WorkerSpec, timeout_s: float, **kwargs) -> Record:
        if self.interrupt_at is not None and len(self.calls) + 1 == self.interrupt_at:
            raise KeyboardInterrupt
        self.calls.append(case.case_id)
        status = "fail_run" if case.workload == "mlp-deep" and case.compiler == "eager" else "ok"
        return Record(case, status, metrics={"latency_s": len(case.case_id) / 1000.0, "spec_keys": sorted(spec.to_dict())},
                      error={"type": "X", "message": "m", "traceback": "", "phase": "build"} if status != "ok" else None)


def _opts(out: Path) -> runner.RunOptions:
    return runner.RunOptions(workloads=["mlp-classic", "mlp-deep"], compilers=["eager", "inductor"], devices=["cpu"],
                             scenarios=["forward"], out_dir=str(out), label="resume-test")


def _comparable(run) -> dict:
    """A run file minus what legitimately differs between two runs of the same plan."""
    data = run.to_dict()
    for key in ("run_id", "created_at"):
        data.pop(key)
    data["config"] = {k: v for k, v in data["config"].items() if k not in ("wall_s", "resumed", "argv", "path")}
    return data


def test_resumed_run_equals_full_run_and_runs_only_missing_cases(tmp_path, monkeypatch):
    full_worker = FakeWorker()
    monkeypatch.setattr(runner, "run_worker", full_worker)
    full = runner.execute(_opts(tmp_path / "full"), environment=FAKE_ENV)
    assert len(full_worker.calls) == 4
    assert not journal_path(tmp_path / "full", full.run_id).exists()  # superseded by the run file

    out = tmp_path / "part"
    interrupted = FakeWorker(interrupt_at=3)
    monkeypatch.setattr(runner, "run_worker", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.execute(_opts(out), environment=FAKE_ENV)
    run_file = next((out / "runs").glob("*.json"))
    partial = load_run(run_file)
    assert partial.config["interrupted"] is True and len(partial.records) == 2
    state = read_journal(journal_path(out, partial.run_id))
    assert list(state.records) == interrupted.calls and len(state.missing()) == 2

    rest = FakeWorker()
    monkeypatch.setattr(runner, "run_worker", rest)
    resumed = runner.resume(partial.run_id, out, environment=FAKE_ENV)
    assert rest.calls == [c.case_id for c in state.missing()]  # only the missing cases ran
    assert resumed.run_id == partial.run_id and resumed.created_at == partial.created_at
    assert _comparable(resumed) == _comparable(full)
    assert _comparable(load_run(run_file)) == _comparable(full)  # the file on disk, not only the object
    assert resumed.config["resumed"][0]["cases_from_journal"] == 2
    assert not journal_path(out, partial.run_id).exists()

    from harness.run.store import HistoryStore

    with HistoryStore(out / "history.sqlite") as store:  # the interrupted ingest was replaced, not doubled
        assert store.run_ids() == [partial.run_id]
        assert len(store.load_run(partial.run_id).records) == 4


def _interrupted_run(out: Path, monkeypatch) -> str:
    """A run Ctrl-C'd as its 2nd case starts; returns its run id."""
    monkeypatch.setattr(runner, "run_worker", FakeWorker(interrupt_at=2))
    with pytest.raises(KeyboardInterrupt):
        runner.execute(_opts(out), environment=FAKE_ENV)
    return next((out / "runs").glob("*.journal.jsonl")).name.split(".")[0]


def test_interrupted_twice_keeps_both_resumes_and_a_torn_line_is_dropped(tmp_path, monkeypatch):
    out = tmp_path / "r"
    run_id = _interrupted_run(out, monkeypatch)
    monkeypatch.setattr(runner, "run_worker", FakeWorker(interrupt_at=2))
    with pytest.raises(KeyboardInterrupt):
        runner.resume(run_id, out, environment=FAKE_ENV)
    path = journal_path(out, run_id)
    with open(path, "ab") as fh:  # what a SIGKILL in the middle of an append leaves
        fh.write(b'{"kind":"record","record":{"case":')
    state = read_journal(path)
    assert state.torn_lines == 1 and len(state.records) == 2 and len(state.resumes) == 1
    worker = FakeWorker()
    monkeypatch.setattr(runner, "run_worker", worker)
    run = runner.resume(run_id, out, environment=FAKE_ENV)
    assert len(worker.calls) == 2 and len(run.records) == 4
    assert [r["cases_from_journal"] for r in run.config["resumed"]] == [1, 2]
    assert run.config["resumed"][1]["torn_lines_dropped"] == 1


def test_resume_refuses_what_it_cannot_merge(tmp_path, monkeypatch):
    out = tmp_path / "r"
    run_id = _interrupted_run(out, monkeypatch)
    with pytest.raises(ResumeError, match="torch_version differs"):
        runner.resume(run_id, out, environment={**FAKE_ENV, "torch_version": "y"})
    with Journal.reopen(journal_path(out, run_id)), pytest.raises(ResumeError, match="another compilebench process"):
        runner.resume(run_id, out, environment=FAKE_ENV)
    with pytest.raises(ResumeError, match="no journal"):
        runner.resume("no-such-run", out, environment=FAKE_ENV)
    monkeypatch.setattr(runner, "run_worker", FakeWorker())
    runner.resume(run_id, out, environment=FAKE_ENV)
    with pytest.raises(ResumeError, match="nothing to resume"):
        runner.resume(run_id, out, environment=FAKE_ENV)


def test_damaged_journal_is_a_clear_error(tmp_path):
    path = tmp_path / "runs" / f"x{'.journal.jsonl'}"
    path.parent.mkdir()
    path.write_text('{"kind":"header","journal_version":1,"run_id":"x","plan":[]}\nnot json\n{"kind":"record"}\n')
    with pytest.raises(RunFileError, match="line 2 is not valid JSON"):
        read_journal(path)
    path.write_text('{"kind":"header","journal_version":99,"run_id":"x","plan":[]}\n')
    with pytest.raises(RunFileError, match="newer"):
        read_journal(path)
    path.write_text("")
    with pytest.raises(RunFileError, match="empty journal"):
        read_journal(path)


# ---- real processes ------------------------------------------------------------------------

BLOCK_MARKER_ENV = "COMPILEBENCH_TEST_BLOCK_MARKER"


def _start_run(out: Path, mark: str, blocked: Path) -> subprocess.Popen:
    """Case 1 is a tiny ok case; case 2 blocks until killed once it has written `blocked`
    (tests/faults/blocking.py), so a signal sent after the marker lands mid-case 2, always."""
    cmd = [sys.executable, "-m", "harness", "run", "--workload-file", str(FAULTS / "suite.py"),
           "--workload-file", str(FAULTS / "blocking.py"), "-w", "fault-control-ok,fault-block-until-killed",
           "-c", "eager", "--scenario", "forward", "--min-time", "0.02", "--min-samples", "3", "--out", str(out)]
    env = {**os.environ, "COMPILEBENCH_TEST_MARK": mark, "PYTHONPATH": str(ROOT), BLOCK_MARKER_ENV: str(blocked)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_marker(proc: subprocess.Popen, marker: Path, timeout_s: float = 300) -> None:
    """Until the run has written `marker` (a condition, not a guess at how long a case takes)."""
    deadline = time.monotonic() + timeout_s
    while not marker.exists():
        assert proc.poll() is None, f"run ended before writing {marker.name}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{marker.name} not written in {timeout_s}s"
        time.sleep(0.05)


def marked_pids(mark: str) -> list[int]:
    """Processes (the runner's workers) started with our marker in their environment."""
    found = []
    needle = f"COMPILEBENCH_TEST_MARK={mark}".encode()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                pass
    return found


# SIGINT/SIGTERM at every point of a run: tests/test_signals.py

@pytest.mark.slow
def test_sigkill_loses_only_the_case_in_flight_and_resume_finishes(tmp_path):
    out, mark, blocked = tmp_path / "results", uuid.uuid4().hex, tmp_path / "blocked"
    proc = _start_run(out, mark, blocked)
    wait_for_marker(proc, blocked)
    proc.kill()
    proc.communicate(timeout=60)
    assert not list((out / "runs").glob("*.json"))  # no chance to write the run file...
    journal = next((out / "runs").glob("*.journal.jsonl"))
    before = read_journal(journal)
    assert [r.case.workload for r in before.records.values()] == ["fault-control-ok"]  # ...but case 1 is on disk
    deadline = time.monotonic() + 30
    while marked_pids(mark) and time.monotonic() < deadline:  # PR_SET_PDEATHSIG ends the orphan
        time.sleep(0.2)
    assert marked_pids(mark) == []

    # no BLOCK_MARKER_ENV this time: the blocking workload is the tiny healthy case
    res = subprocess.run([sys.executable, "-m", "harness", "run", "--resume", before.run_id, "--out", str(out)],
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    run = load_run(out / "runs" / f"{before.run_id}.json")
    assert [r.case_id for r in run.records] == [c.case_id for c in before.planned_cases()]
    assert all(r.status == "ok" for r in run.records)
    for case_id, record in before.records.items():  # journaled records kept as they were, not re-run
        assert run.record_map()[case_id].worker["pid"] == record.worker["pid"]
    assert run.config["resumed"][0]["cases_from_journal"] == len(before.records)
    assert not journal.exists()
    assert json.loads((out / "runs" / f"{before.run_id}.json").read_text())["config"]["interrupted"] is False


def test_ctrl_c_between_journal_and_memory_keeps_them_in_agreement(tmp_path, monkeypatch):
    """The race a real SIGINT hit: the record is journaled, the signal lands before the
    in-memory append. The interrupted run file must still hold it."""
    original = Journal.append

    def append_then_interrupt(self, record):
        original(self, record)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_worker", FakeWorker())
    monkeypatch.setattr(Journal, "append", append_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        runner.execute(_opts(tmp_path), environment=FAKE_ENV)
    run = load_run(next((tmp_path / "runs").glob("*.json")))
    assert [r.case_id for r in run.records] == list(read_journal(journal_path(tmp_path, run.run_id)).records)
    assert len(run.records) == 1


def test_a_torn_last_line_longer_than_the_read_window_keeps_every_line_before_it(tmp_path):
    """A 1.2 MB unterminated last line used to truncate the whole journal to 0 bytes."""
    import os

    from harness.run.journal import _drop_torn_tail

    path = tmp_path / "j.jsonl"
    whole = b'{"kind": "header"}\n' + b'{"kind": "record", "n": 1}\n' * 3
    path.write_bytes(whole + b'{"kind": "record", "blob": "' + b"x" * 1_200_000)
    fd = os.open(path, os.O_RDWR)
    try:
        assert _drop_torn_tail(fd) is True
        assert _drop_torn_tail(fd) is False  # now it ends on a newline
    finally:
        os.close(fd)
    assert path.read_bytes() == whole
    path.write_bytes(b"x" * 3_000_000)  # no newline anywhere: nothing of it was a whole line
    fd = os.open(path, os.O_RDWR)
    try:
        assert _drop_torn_tail(fd) is True
    finally:
        os.close(fd)
    assert path.read_bytes() == b""


@pytest.mark.parametrize("missing", ["options", "created_at"])
def test_a_journal_header_without_what_resume_rebuilds_from_is_one_line_exit_2(tmp_path, capsys, missing):
    from harness.cli.main import main

    header = {"kind": "header", "journal_version": 1, "run_id": "20260101-000000-x-aaaaaa", "plan": [],
              "created_at": "2026-01-01T00:00:00+00:00", "label": "x", "environment": {}, "config": {},
              "options": {"out_dir": str(tmp_path)}}
    del header[missing]
    path = tmp_path / "runs" / "20260101-000000-x-aaaaaa.journal.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(header) + "\n")
    assert main(["run", "--resume", "20260101-000000-x-aaaaaa", "--out", str(tmp_path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and f"the journal header lacks {missing}" in err[0], err


def test_a_resume_refuses_a_workload_file_changed_or_gone_since_the_run_began(tmp_path, capsys):
    from harness.cli.main import main
    from harness.model.schema import Run
    from harness.run.journal import Journal, journal_header
    from harness.run.runner import RunOptions, workload_file_hashes

    models = tmp_path / "my_models.py"
    models.write_text("# the user's workloads, version 1\n")
    opts = RunOptions(workloads=["mlp-classic"], compilers=["eager"], devices=["cpu"], sizes=["tiny"],
                      workload_files=[str(models)], out_dir=str(tmp_path))
    run_id = "20300101-000000-wf-aaaaaa"
    run = Run(run_id, "2030-01-01T00:00:00+00:00", "wf", {}, {"workload_file_sha256": workload_file_hashes([str(models)])})
    (tmp_path / "runs").mkdir()
    Journal.create(tmp_path / "runs" / f"{run_id}.journal.jsonl", journal_header(run, [], opts)).close()
    models.write_text("# the user's workloads, version 2: another model\n")
    assert main(["run", "--resume", run_id, "--out", str(tmp_path)]) == 2
    assert f"workload file {models} changed since the run began" in capsys.readouterr().err
    models.unlink()
    assert main(["run", "--resume", run_id, "--out", str(tmp_path)]) == 2
    assert f"its workload file {models} is gone" in capsys.readouterr().err


def test_a_workload_file_found_unchanged_under_a_moved_checkout_is_taken(tmp_path, monkeypatch):
    """The results folder copied to another machine (another checkout path): the same file at the
    same relative path is found by its content; another file of that name is not."""
    from harness.run.journal import JournalState, ResumeError, check_workload_files
    from harness.run.runner import workload_file_hashes

    here = tmp_path / "new-checkout" / "tests" / "faults"
    here.mkdir(parents=True)
    (here / "suite.py").write_text("# the suite, unchanged\n")
    planned = "/old/checkout/tests/faults/suite.py"
    hashes = {planned: workload_file_hashes([str(here / "suite.py")])[str(here / "suite.py")]}
    state = JournalState(tmp_path / "j.jsonl", {"run_id": "r", "config": {"workload_file_sha256": hashes}})
    monkeypatch.chdir(tmp_path / "new-checkout")
    assert check_workload_files(state) == {planned: str(here / "suite.py")}
    (here / "suite.py").write_text("# another suite of that name\n")
    with pytest.raises(ResumeError, match="is gone"):
        check_workload_files(state)
