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


# ---- real runs in the background (tests/background.py) ----------------------------------


def _background_keys(item: pytest.Item) -> list[str]:
    from tests.background import BACKGROUND

    return [name for name in getattr(item, "fixturenames", ()) if name in BACKGROUND]


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: only what will run is moved
def pytest_collection_modifyitems(session, config, items):
    """Tests that read a background run go last, so the run overlaps every other test."""
    late = [item for item in items if _background_keys(item)]
    if late:
        items[:] = [item for item in items if not _background_keys(item)] + late


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    from tests.background import BACKGROUND

    # in the order their tests run: the run read first is done first
    for key in dict.fromkeys(key for item in session.items for key in _background_keys(item)):
        BACKGROUND[key].start()


def pytest_sessionfinish(session, exitstatus):
    from tests.background import stop_all

    stop_all()


@pytest.fixture
def no_background_run():
    """For a test whose real run must not be contended by a background run (tests/background.py):
    waits until those are done. In a whole session they finished long before."""
    from tests.background import wait_idle

    wait_idle()


@pytest.fixture(autouse=True)
def dynamo_recompile_rule_left_off():
    """A test that leaves torch._dynamo.config.error_on_recompile on (the decode scenario's
    compiled first call sets it for its process) breaks every later compile in this process
    with a RecompileError far from the cause; fail the test that left it on instead."""
    import sys

    yield
    config = sys.modules.get("torch._dynamo.config")
    if config is not None and config.error_on_recompile:
        config.error_on_recompile = False
        pytest.fail("the test left torch._dynamo.config.error_on_recompile on (restore it, e.g. with "
                    "torch._dynamo.config.patch)")
