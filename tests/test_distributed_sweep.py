"""torchrun starts every rank in a session of its own, so a timeout's killpg of torchrun's
group leaves the ranks of a hung collective running: harness/run/distributed.py sweeps them
by the token they inherit."""

from __future__ import annotations

import importlib
import sys
import time

import pytest

from harness.run.distributed import launch
from suites.distributed import DistributedSpec
from tests.procs import alive

HANG = '''
import os, time
import torch
from harness import workload

@workload("dist-hang-sweep-test", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def hang(ctx):
    """each rank writes its pid, then hangs as in a collective that never completes"""
    with open(os.path.join(os.environ["CB_TEST_RANK_PIDS"], str(os.getpid())), "w"):
        pass
    time.sleep(600)
'''


@pytest.mark.slow
def test_a_timed_out_launch_leaves_no_rank_running(tmp_path, monkeypatch):
    (tmp_path / "cb_dist_hang.py").write_text(HANG)
    pids = tmp_path / "pids"
    pids.mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))  # the parent resolves the workload too
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # worker_env puts the checkout in front of it
    monkeypatch.setenv("CB_TEST_RANK_PIDS", str(pids))
    importlib.import_module("cb_dist_hang")
    spec = DistributedSpec(workload="dist-hang-sweep-test", size="tiny", strategy="ddp", compiler="eager", nproc=2,
                           steps=1, warmup=0, timeout_s=15, workload_modules=["cb_dist_hang"])
    record = launch(spec)  # both ranks hang within ~3 s (load 1): 15 s leaves room for a contended box
    assert record.status == "timeout", (record.error, record.logs)
    ranks = [int(p.name) for p in pids.iterdir()]
    assert len(ranks) == 2, (ranks, record.logs["stdout"][-2000:])  # both ranks reached the hang
    deadline = time.monotonic() + 10  # SIGKILLed: gone once the kernel has reaped them
    while any(alive(pid) for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in ranks)
    assert record.worker["escaped_processes_killed"] >= 2
    sys.modules.pop("cb_dist_hang", None)
