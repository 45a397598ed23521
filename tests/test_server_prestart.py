"""The GPU cases' preloaded servers started together before the first case
(harness/run/runner.py prestart_servers, harness/run/forkserver.py ServerPool.start_all):
which servers a plan asks for (a fake pool and a fake CUDA), and a real server started that
way on CPU, which the case that needs it then gets without a second start."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.model.schema import Case
from harness.run import forkserver, runner


class FakePool:
    def __init__(self) -> None:
        self.calls: list[list[tuple]] = []

    def start_all(self, wanted):
        self.calls.append(list(wanted))
        return {"servers": len(wanted), "wall_s": 0.0}

    def begin_all(self, wanted):
        self.begun = list(wanted)
        return len(wanted)


def gpu_case(workload: str, compiler: str, scenario: str = "forward") -> Case:
    return Case(workload, scenario, compiler, "cuda", "bfloat16", 1, "tiny", "gpu")


@pytest.fixture
def fake_gpu(monkeypatch):
    """CUDA 'available' here, the pool a fake, the modules per workload as the plan gives them."""
    import harness.measure.devices as devices

    pool = FakePool()
    monkeypatch.setattr(runner, "open_pool", lambda: pool)
    monkeypatch.setattr(devices, "parse_device",
                        lambda name: SimpleNamespace(availability=lambda: SimpleNamespace(available=True)))
    monkeypatch.setattr(runner, "case_preload", lambda spec: ("torch", spec.case.workload))
    monkeypatch.delenv(forkserver.GPU_PRELOAD_ENV, raising=False)
    runner.load_registries([])
    return pool


def test_one_server_per_module_set_of_the_cases_that_start_a_process(fake_gpu, tmp_path):
    cases = [gpu_case("mlp-deep", "eager"), gpu_case("mlp-deep", "inductor"), gpu_case("gemma-2b", "inductor"),
             gpu_case("llama-3.1-8b", "eager"), Case("mlp-deep", "forward", "inductor", "cpu", "float32", 1, "tiny", "gpu")]
    out = runner.prestart_servers(cases, runner.RunOptions(), {}, tmp_path, skip={cases[3].case_id})
    assert out == {"servers": 2, "wall_s": 0.0}
    (wanted,) = fake_gpu.calls
    assert [modules for _, _, modules in wanted] == [("torch", "mlp-deep"), ("torch", "gemma-2b")]
    python, env, _ = wanted[0]
    assert python == sys.executable and env["PYTHONPATH"].startswith(str(runner.PROJECT_ROOT))


def test_begin_prestart_starts_the_servers_prestart_then_waits_for(fake_gpu, tmp_path):
    cases = [gpu_case("mlp-deep", "inductor"), gpu_case("gemma-2b", "inductor")]
    assert runner.begin_prestart(cases, runner.RunOptions(), {}, tmp_path) == 2
    runner.prestart_servers(cases, runner.RunOptions(), {}, tmp_path)
    assert fake_gpu.begun == fake_gpu.calls[0]
    assert runner.begin_prestart([], runner.RunOptions(), {}, tmp_path) == 0  # nothing to start


@pytest.mark.parametrize("why", ["gpus", "trace", "spawned", "cpu only", "nothing left"])
def test_nothing_is_started_where_the_cases_would_not_fork_from_them(fake_gpu, monkeypatch, tmp_path, why):
    cases = [gpu_case("mlp-deep", "inductor")]
    opts = runner.RunOptions()
    skip: set[str] = set()
    if why == "gpus":
        opts = runner.RunOptions(gpus=[0, 1])
    elif why == "trace":
        opts = runner.RunOptions(trace=True)
    elif why == "spawned":
        monkeypatch.setenv(forkserver.GPU_PRELOAD_ENV, "0")
    elif why == "cpu only":
        cases = [Case("mlp-deep", "forward", "inductor", "cpu", "float32", 1, "tiny", "smoke")]
    else:
        skip = {cases[0].case_id}
    assert runner.prestart_servers(cases, opts, {}, tmp_path, skip=skip) is None
    assert fake_gpu.calls == []


def test_a_server_started_together_is_the_one_the_case_then_gets(tmp_path):
    """A real server (torch only) started by start_all: ready, counted, and returned by the
    pool's get() for the same python, environment and modules, with no second process."""
    pool = forkserver.ServerPool(str(Path(__file__).resolve().parents[1]))
    env = runner.worker_env(tmp_path / "cache")
    modules = ("torch", "harness.measure.worker")
    try:
        out = pool.start_all([(sys.executable, env, modules), (sys.executable, env, modules)])
        assert out["servers"] == 1 and out["wall_s"] > 0
        (server,) = pool.servers.values()
        assert server.info.get("ready") and server.broken is None and "torch" in server.info["preloaded"]
        other_case_env = {**env, forkserver.CACHE_ENV: str(tmp_path / "another-case")}  # per case: not in the key
        assert pool.get(sys.executable, other_case_env, None, modules) is server
        assert pool.start_all([(sys.executable, env, modules)])["servers"] == 0
    finally:
        pool.close()
    assert server.proc.returncode == 0  # it exited of its own accord when its stdin closed


def test_the_pool_tells_every_server_to_exit_before_it_waits_for_any():
    """ServerPool.close: every stdin closed first, then each exit awaited, so the servers'
    exits overlap instead of adding up (each skips the interpreter's teardown, os._exit)."""
    events: list[str] = []

    class Server:
        def __init__(self, name: str) -> None:
            self.name = name

        def begin_close(self) -> None:
            events.append(f"tell {self.name}")

        def close(self) -> None:
            events.append(f"wait {self.name}")

    pool = forkserver.ServerPool(".")
    pool.servers = {("a",): Server("a"), ("b",): Server("b")}
    pool.close()
    assert events == ["tell a", "tell b", "wait a", "wait b"] and pool.servers == {}


def test_a_closed_server_exits_without_the_interpreters_teardown(tmp_path):
    """A server leaves by os._exit once told: the teardown of the modules it preloaded (1.8 s
    of them on the 2-core box before) never runs, seen by an atexit hook one of them set."""
    mark = tmp_path / "atexit-ran"
    pool = forkserver.ServerPool(str(Path(__file__).resolve().parents[1]))
    env = {**runner.worker_env(tmp_path / "cache"), "CB_TEST_ATEXIT_MARK": str(mark)}
    pool.start_all([(sys.executable, env, ("tests.server_atexit_probe",))])
    (server,) = pool.servers.values()
    assert "tests.server_atexit_probe" in server.info["preloaded"]
    pool.close()
    assert server.proc.returncode == 0 and not mark.exists()


def test_servers_begun_early_are_awaited_and_counted_by_start_all(tmp_path):
    """begin_all starts a server without waiting for its imports; start_all then waits for it
    too (the first case must not overlap an import) and counts it once."""
    pool = forkserver.ServerPool(str(Path(__file__).resolve().parents[1]))
    env = runner.worker_env(tmp_path / "cache")
    wanted = [(sys.executable, env, ("torch",))]
    try:
        assert pool.begin_all(wanted) == 1 and pool.begin_all(wanted) == 0
        (server,) = pool.servers.values()
        assert not server.info  # not awaited yet
        out = pool.start_all(wanted)
        assert out["servers"] == 1 and server.info.get("ready") and server.broken is None
        assert pool.start_all(wanted)["servers"] == 0
    finally:
        pool.close()


def test_a_run_begins_its_gpu_servers_before_it_reads_the_environment(monkeypatch):
    """The GPU servers import while the runner reads the environment (its own imports and the
    CUDA query), inside the pool the case loop then uses."""
    import harness.measure.environment as environment

    events: list[str] = []
    monkeypatch.setattr(runner, "begin_prestart", lambda *a, **k: events.append(f"begin {forkserver.open_pool() is not None}"))
    monkeypatch.setattr(environment, "capture_environment", lambda devices: events.append("environment") or {})
    monkeypatch.setattr(runner, "_planned_run",
                        lambda *a: events.append(f"cases {forkserver.open_pool() is not None}") or "run")
    runner.load_registries([])
    opts = runner.RunOptions(suite="smoke", workloads=["mlp-classic"], scenarios=["forward"], compilers=["eager"])
    assert runner._execute(opts, None, None) == "run"
    assert events == ["begin True", "environment", "cases True"]
