import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

CORE_CASES = Path(__file__).parent / "workloads" / "core_cases.py"


@pytest.fixture
def results_dir(tmp_path):
    """A results folder of the test's own (run files + history DB)."""
    out = tmp_path / "results"
    out.mkdir()
    return out


@pytest.fixture(scope="session")
def known_breaks_run(tmp_path_factory):
    """One real Inductor run of tests/workloads/core_cases.py's `known-breaks` (a user workload
    file, no suite; two print() breaks), shared by the tests that each read it (the break
    counts in test_core_e2e, `expected update/check` in test_expected): (run, results folder).
    Spawned: for one case that costs less than starting a preloaded server (test_forkserver
    holds the two paths equal)."""
    from harness.run.runner import RunOptions, execute

    out = tmp_path_factory.mktemp("known-breaks")
    policy = {"min_time_s": 0.05, "min_samples": 5, "max_samples": 50, "warmup": 1, "max_time_s": 3.0}
    run = execute(RunOptions(workloads=["known-breaks"], workload_files=[str(CORE_CASES)], compilers=["inductor"],
                             devices=["cpu"], out_dir=str(out), policy=policy, ingest=False, preload=False))
    return run, out
