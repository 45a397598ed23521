"""bisect closes an env's fork server once the search will not measure that env again
(harness/experiments/bisect.py `release`, harness/cli/envs.py server_releaser,
harness/run/forkserver.py ServerPool.close_python), instead of keeping one per env measured
until the search ends."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.cli.envs import server_releaser
from harness.cli.main import main
from harness.experiments.bisect import BAD, GOOD, NOISY, BisectState, run_bisect, state_key
from harness.model.schema import Case
from harness.run import forkserver
from harness.testing.synthetic import synthetic_record
from tests.fake_envs import make_fake_python

CASE = Case("mlp-classic", "forward", "inductor", "cpu", "float32", 16, "tiny", "smoke")
ROOT = Path(__file__).resolve().parent.parent


def _search(n: int, first_bad: int | None, noisy_at=(), max_repeats: int = 2) -> list[tuple[str, int]]:
    """The events of a search over synthetic measurements: ("measure", i) and ("release", i)."""
    envs = [{"name": f"e{i}", "spec": f"torch==2.{i}.0"} for i in range(n)]
    state = BisectState(state_key(CASE.case_id, "latency", None, "worse", envs), envs)
    events: list[tuple[str, int]] = []

    def measure(i):
        events.append(("measure", i))
        record = synthetic_record(CASE, np.random.default_rng(len(events)))
        record.worker["env_index"] = i
        return record

    def decide(ref, cand):  # bad from first_bad on, noisy at noisy_at until 3 processes
        i = cand[0].worker["env_index"]
        verdict = (NOISY if i in noisy_at and len(cand) < 3 else
                   BAD if first_bad is not None and i >= first_bad else GOOD)
        return {"verdict": verdict, "beyond_threshold": verdict == BAD}

    run_bisect(state, measure, decide, max_repeats=max_repeats, release=lambda i: events.append(("release", i)))
    return events


def _live_at_most(events: list[tuple[str, int]]) -> int:
    """The most envs measured and not released at once (each holds a server)."""
    live: set[int] = set()
    most = 0
    for kind, i in events:
        if kind == "measure":
            live.add(i)
        else:
            live.discard(i)
        most = max(most, len(live))
    return most


@pytest.mark.parametrize(("n", "first_bad", "noisy_at"), [(8, 5, ()), (8, 5, (4,)), (16, None, (8, 12)), (33, 1, ())])
def test_an_env_is_released_once_and_never_measured_after(n, first_bad, noisy_at):
    events = _search(n, first_bad, noisy_at)
    released = [i for kind, i in events if kind == "release"]
    measured = {i for kind, i in events if kind == "measure"}
    assert sorted(released) == sorted(measured)  # every env measured is released, each once
    for at, (kind, i) in enumerate(events):
        if kind == "release":
            assert ("measure", i) not in events[at:], (i, events)
    assert _live_at_most(events) == 2  # the reference and one candidate, whatever n is


def test_a_reference_that_no_probe_will_measure_again_goes_at_once():
    """--repeats 0: the reference is measured once, so its server goes before the first probe."""
    events = _search(8, 5, max_repeats=0)
    assert events[:2] == [("measure", 0), ("release", 0)]
    assert _live_at_most(events) == 1


def test_the_reference_stays_while_a_noisy_probe_may_measure_it_again():
    events = _search(8, 5, noisy_at=(4,), max_repeats=2)
    # env 4 (the first probe) is noisy twice: the reference is measured 3 times, then released
    assert [e for e in events if e[1] in (0, 4)] == [
        ("measure", 0), ("measure", 4), ("measure", 4), ("measure", 0), ("measure", 4), ("measure", 0),
        ("release", 4), ("release", 0)]


def test_a_python_shared_by_two_envs_keeps_its_server_until_both_are_released():
    closed: list[str] = []

    class Pool:
        def close_python(self, python):
            closed.append(python)

    release = server_releaser(Pool(), ["/py/a", "/py/b", "/py/a"])
    release(1)
    release(0)
    assert closed == ["/py/b"]  # env 2 has /py/a too and was not released
    release(2)
    assert closed == ["/py/b", "/py/a"]
    server_releaser(None, ["/py/a"])(0)  # --no-preload: no pool, nothing to close


def test_close_python_stops_that_pythons_servers_only(tmp_path):
    """Two real (json-only) servers, one per interpreter path; closing one leaves the other."""
    other = tmp_path / "python"
    os.symlink(sys.executable, other)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    pool = forkserver.ServerPool(str(ROOT))
    try:
        mine, theirs = (pool.get(python, env, None, ("json",)) for python in (sys.executable, str(other)))
        assert mine.broken is None and theirs.broken is None
        assert pool.close_python(sys.executable) == 1
        assert mine.proc.poll() is not None and theirs.proc.poll() is None
        assert [s["python"] for s in pool.describe()] == [str(other)]
        assert pool.close_python(sys.executable) == 0
    finally:
        pool.close()


def test_cli_bisect_over_eight_envs_holds_at_most_two_servers(tmp_path, monkeypatch):
    """The real command over 8 fake interpreters (their servers fail to start, so every
    measurement is spawned, but each is pooled as a real one would be): never more than two
    servers open, and none left once the search is done."""
    held: list[int] = []
    pools: list[forkserver.ServerPool] = []
    real_get = forkserver.ServerPool.get

    def get(self, *args, **kwargs):
        server = real_get(self, *args, **kwargs)
        held.append(len(self.servers))
        pools.append(self)
        return server

    monkeypatch.setattr(forkserver.ServerPool, "get", get)
    fakes = [make_fake_python(tmp_path / "py", f"e{i}", slowdown=0.3 if i >= 5 else 0.0) for i in range(8)]
    argv = ["bisect", "-w", "mlp-classic", "--scenario", "forward", "-c", "inductor", "--metric", "latency",
            "--state", str(tmp_path / "state.json"), "--out", str(tmp_path / "out"),
            *[a for i, f in enumerate(fakes) for a in ("--env", f"e{i}={f}")]]
    assert main(argv) == 0
    assert len(held) >= 4 and max(held) <= 2, held  # 4 measurements (1 + log2 8), 2 servers at most
    assert not pools[0].servers
