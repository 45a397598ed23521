"""The fault corpus through the real runner: each fault ends as its own status, with its
message, and every other case of the run is kept (run file, history, no journal left)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.cli import main as cli
from harness.model.schema import load_run
from harness.run import runner
from harness.run.journal import journal_path
from harness.run.runner import LOG_TAIL_BYTES
from harness.run.store import HistoryStore
from tests.procs import alive

FAULTS = Path(__file__).resolve().parent / "faults"
FAULT_FILES = sorted(str(p) for p in FAULTS.glob("*.py"))
PIDS_ENV = "COMPILEBENCH_FAULT_PIDFILE"
MEMORY_CAP_GB = 6.0  # far above a tiny worker's ~0.7 GB of address space; the host-oom fault climbs to it


def _expected() -> list[tuple[str, str, str, str]]:
    """(workload, compiler, device, status) from tests/faults/suite.py, as the runner loaded it."""
    import sys

    from harness.model.workloads import WORKLOADS

    runner.load_registries(FAULT_FILES)
    return sys.modules[WORKLOADS["fault-control-ok"].source].EXPECTED


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


@pytest.fixture(scope="module")
def fault_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("faults")
    pidfile = out / "pids.txt"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(PIDS_ENV, str(pidfile))
        opts = runner.RunOptions(suite="faults", workload_files=FAULT_FILES, out_dir=str(out), max_memory_gb=MEMORY_CAP_GB)
        run = runner.execute(opts)
    return run, out, pidfile


def _by_workload(run) -> dict:
    return {r.case.workload: r for r in run.records}


@pytest.mark.slow
def test_every_fault_ends_as_its_status_and_every_record_is_kept(fault_run):
    run, out, _ = fault_run
    EXPECTED = _expected()
    got = {r.case.workload: r.status for r in run.records}
    want = {w: ("oom" if w == "fault-cuda-oom" and _cuda() else s) for w, _, _, s in EXPECTED}
    assert got == want
    assert len(load_run(runner.run_path(out, run.run_id)).records) == len(EXPECTED)
    with HistoryStore(out / "history.sqlite") as store:
        assert len(store.load_run(run.run_id).records) == len(EXPECTED)
    assert not journal_path(out, run.run_id).exists()


@pytest.mark.slow
def test_fault_messages_name_the_cause(fault_run):
    recs = _by_workload(fault_run[0])
    assert recs["fault-raise-build"].error["phase"] == "build"
    assert "factory failed" in recs["fault-raise-build"].error["message"]
    assert recs["fault-raise-compile"].error["phase"] == "compile"
    assert "injected compiler fault" in recs["fault-raise-compile"].error["message"]
    assert recs["fault-raise-timed-loop"].error["phase"] == "measure"
    assert "SIGSEGV" in recs["fault-segfault"].error["message"]
    assert "exited with code 3 without writing a record" in recs["fault-exit-no-record"].error["message"]
    assert "NaN" in recs["fault-nan-output"].error["message"]
    oom = recs["fault-host-oom"].error
    assert "host memory cap reached (--max-memory-gb 6" in oom["message"]
    assert oom["memory_cap_bytes"] == int(MEMORY_CAP_GB * (1 << 30))
    if not _cuda():
        assert "cuda not available" in recs["fault-cuda-oom"].error["message"]
    for record in recs.values():
        if record.status not in ("ok", "skipped"):
            assert record.error["traceback"] or record.status == "crashed" or record.error["type"] == "AccuracyError"


@pytest.mark.slow
def test_output_flood_is_truncated_not_buffered(fault_run):
    flood = _by_workload(fault_run[0])["fault-flood-output"]
    # 16 MiB per stream was written; the record keeps a bounded tail of each
    assert 0 < len(flood.logs["stdout"]) <= 2000 and 0 < len(flood.logs["stderr"]) <= 2000
    assert max(len(v) for r in fault_run[0].records for v in r.logs.values()) <= LOG_TAIL_BYTES + 100


@pytest.mark.slow
def test_processes_left_behind_are_killed(fault_run):
    run, _, pidfile = fault_run
    pids = _pids(pidfile)
    assert len(pids) == 2  # one child in the worker's session, one escaped with setsid
    assert not [p for p in pids if alive(p)]
    children = _by_workload(run)["fault-leave-children"]
    assert children.worker["escaped_processes_killed"] == 1
    assert any("outside its session" in n for n in children.notes)


@pytest.mark.slow
def test_hang_times_out_and_its_tree_is_killed_exit_code_1(tmp_path, monkeypatch, capsys):
    pidfile = tmp_path / "pids.txt"
    monkeypatch.setenv(PIDS_ENV, str(pidfile))
    # the suite's own 10 s: a forked worker reaches the hang in about a second (the server's
    # imports come before the case's clock), and every second here is waited out in full
    args = ["run", "--suite", "faults-hang", "--timeout", "10", "--out", str(tmp_path / "r")]
    for f in FAULT_FILES:
        args += ["--workload-file", f]
    assert cli.main(args) == cli.EXIT_FAILED  # CI notices: a case failed
    run = load_run(next((tmp_path / "r" / "runs").glob("*.json")))
    (record,) = run.records
    assert record.status == "timeout" and "--timeout 10s" in record.error["message"]
    pids = _pids(pidfile)
    assert pids, "the hang never started (worker start took the whole timeout?)"
    assert not [p for p in pids if alive(p)]


def test_memory_cap_applies_to_cpu_cases_only():
    from harness.run.isolation import memory_limit_bytes

    spec = {"limits": {"max_memory_bytes": 1 << 30}, "case": {"device": "cpu"}}
    assert memory_limit_bytes(spec) == 1 << 30
    assert memory_limit_bytes({**spec, "case": {"device": "cuda:0"}}) is None
    assert memory_limit_bytes({"case": {"device": "cpu"}}) is None


def test_ok_exit_code_and_max_memory_gb_validation(capsys):
    assert cli.main(["run", "-w", "mlp-classic", "--max-memory-gb", "0"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-memory-gb 0 must be a positive" in err[0]
    assert os.environ.get(PIDS_ENV) is None
