"""`compilebench noise --resume ID` (harness/cli/compare.py cmd_noise): an A/A session that a
stop signal interrupted keeps its journal, and the resume runs only the side-rounds it lacks,
then analyses every process, as `ab --resume` does for an A/B session."""

from __future__ import annotations

import itertools
import json
import re
import signal
import sys

import numpy as np
import pytest

from harness.cli.main import main
from harness.experiments import ab
from harness.model.schema import Case, Record
from harness.run import runner
from harness.run.signals import set_checkpoint_hook
from harness.testing.synthetic import synthetic_record
from tests.test_ab_resume import ENV, StopAt

SELECTION = ["-w", "mlp-classic", "--scenario", "forward", "-c", "eager", "-c", "inductor", "--device", "cpu",
             "--size", "tiny"]


@pytest.fixture
def fake_workers(monkeypatch):
    """Stand-in workers (synthetic records, numbered by call) and environment probe."""
    calls = itertools.count()
    started: list[tuple[str, str, int]] = []

    def fake(case: Case, spec, timeout_s, **kw) -> Record:
        n = next(calls)
        started.append((case.case_id, kw.get("python", ""), n))
        record = synthetic_record(case, np.random.default_rng(n))
        record.worker["call"] = n
        return record

    monkeypatch.setattr(ab, "run_worker", fake)
    monkeypatch.setattr(ab, "probe_environment", lambda python, devices: dict(ENV))
    yield started
    set_checkpoint_hook(None)


def test_an_interrupted_noise_session_resumes_and_runs_only_what_was_missing(tmp_path, fake_workers, capsys):
    out, noise_file = tmp_path / "out", tmp_path / "noise.json"
    set_checkpoint_hook(StopAt("next-case", 6, signal.SIGINT))  # 5 of 2 cases x 2 sides x 3 rounds finished
    assert main(["noise", *SELECTION, "--rounds", "3", "--out", str(out)]) == 130
    set_checkpoint_hook(None)
    err = capsys.readouterr().err
    found = re.search(r"finish it with: compilebench noise --resume (\S+) --out (\S+)", err)
    assert found and found.group(2) == str(out), err
    assert len(fake_workers) == 5
    journaled = {n for _, _, n in fake_workers}

    assert main(["noise", "--resume", found.group(1), "--out", str(out), "-o", str(noise_file)]) == 0
    assert len(fake_workers) == 12  # the 7 missing side-rounds, none of the 5 again
    folder = out / "ab" / found.group(1)
    assert not (folder / ab.JOURNAL_NAME).exists()  # finished: the round files hold everything
    records = [rec for side in ab.SIDES for f in sorted((folder / side).glob("round-*.json"))
               for rec in json.loads(f.read_text())["records"]]
    calls = sorted(rec["worker"]["call"] for rec in records)
    assert calls == list(range(12)) and journaled <= set(calls)  # the journaled records kept as they were
    data = json.loads(noise_file.read_text())
    assert data["rounds"] == 3 and len(data["run_ids"]) == 6
    assert len(data["cases"]) == 2
    for entry in data["cases"].values():
        assert entry["metrics"]["latency"]["n_processes"] == 6  # 3 rounds x 2 processes, both calls together


def test_noise_resume_refuses_the_options_the_session_fixed(capsys):
    assert main(["noise", "--resume", "whatever", "--rounds", "4", "-w", "mlp-classic"]) == 2
    assert "drop --rounds, --workload" in capsys.readouterr().err


def test_noise_resume_refuses_an_ab_session_of_two_sides(tmp_path, fake_workers, capsys):
    run = runner.RunOptions(workloads=["mlp-classic"], scenarios=["forward"], compilers=["eager"], devices=["cpu"],
                            sizes=["tiny"], out_dir=str(tmp_path / "out"), ingest=False)
    set_checkpoint_hook(StopAt("next-case", 2, signal.SIGINT))
    with pytest.raises(KeyboardInterrupt) as stopped:
        ab.run_ab(ab.AbOptions(run, sys.executable, "/other/python", 3), environments={"base": ENV, "head": ENV})
    set_checkpoint_hook(None)
    session = stopped.value.ab_session.name
    assert main(["noise", "--resume", session, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "not an A/A noise session" in err and f"compilebench ab --resume {session}" in err
    assert len(err.strip().splitlines()) == 1 and len(fake_workers) == 1  # nothing more ran
