"""The preloaded worker (harness/run/forkserver.py): a forked case is as cold and as boxed
in as a spawned one, and the runner says which path each case took."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from harness.run import forkserver, runner
from tests.procs import alive

ROOT = Path(__file__).resolve().parent.parent
POLICY = {"min_time_s": 0.05, "min_samples": 5, "max_samples": 50, "warmup": 1, "max_time_s": 2.0}

# Every module-level copy of the Inductor cache folder the server's imports make, and how
# a case re-points it (forkserver.repoint_caches). A new torch that adds one fails this test.
KNOWN_IMPORT_TIME_COPIES = {"torch._dynamo.package.DynamoCache._path_prefix",
                            "torch._dynamo.precompile_context.DynamoCache._path_prefix"}

SCAN = r'''
import json, os, sys, tempfile
sentinel = tempfile.mkdtemp(prefix="cb-sentinel-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = sentinel
from harness.run.forkserver import PRELOAD, preload, repoint_caches, warm_isa
loaded = preload(PRELOAD)["preloaded"]
del os.environ["TORCHINDUCTOR_CACHE_DIR"]
isa = warm_isa(sys.argv[1])

def scan(needle):
    hits, seen = [], set()
    def walk(obj, path, depth):
        if isinstance(obj, str):
            if needle in obj:
                hits.append(path)
            return
        if depth == 0 or id(obj) in seen or isinstance(obj, type(sys)):
            return
        seen.add(id(obj))
        if isinstance(obj, (list, tuple, set, frozenset)):
            for i, v in enumerate(list(obj)[:100]):
                walk(v, f"{path}[{i}]", depth - 1)
        elif isinstance(obj, dict):
            for k, v in list(dict.items(obj))[:500]:  # the stored items: a lazy mapping (transformers auto) must not import
                walk(v, f"{path}[{k!r}]", depth - 1)
        else:
            try:
                attrs = vars(obj)
            except TypeError:
                return
            for k, v in list(attrs.items()):
                walk(v, f"{path}.{k}", depth - 1)
    for name, mod in list(sys.modules.items()):
        if mod is not None and name not in ("__main__", "__mp_main__"):
            seen.clear()
            for k, v in list(vars(mod).items()):
                walk(v, f"{name}.{k}", 4)
    return hits

before = scan(sentinel)
os.environ["TORCHINDUCTOR_CACHE_DIR"] = case_dir = tempfile.mkdtemp(prefix="cb-case-")
repoint_caches()
import torch._dynamo.package as package
print(json.dumps({"before": before, "after": scan(sentinel), "written": os.listdir(sentinel), "loaded": loaded,
                  "prefix": package.DynamoCache._path_prefix, "case_dir": case_dir,
                  "env_after_preload": "TORCHINDUCTOR_CACHE_DIR" in os.environ}), flush=True)
os._exit(0)  # the answer is printed: no interpreter teardown of everything the server imports (seconds)
'''


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


@pytest.mark.slow
def test_nothing_imported_keeps_the_cache_folder_but_what_each_case_repoints(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCAN, str(tmp_path / "isa")], capture_output=True, text=True,
                         cwd=ROOT, env=_env(), timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "torch" in result["loaded"] and "harness.measure.worker" in result["loaded"]
    assert set(result["before"]) <= KNOWN_IMPORT_TIME_COPIES, result["before"]
    assert result["after"] == []  # re-pointed: no copy of the server's folder is left
    assert result["prefix"] == os.path.join(result["case_dir"], "dynamo")
    assert result["written"] == []  # the imports wrote nothing into the cache folder


def _run(tmp_path: Path, name: str, **kw) -> runner.Run:
    opts = runner.RunOptions(workloads=["mlp-classic"], scenarios=["forward"], compilers=["inductor"], devices=["cpu"],
                             out_dir=str(tmp_path / name), ingest=False, policy=POLICY, **kw)
    return runner.execute(opts)


def _cache_counts(record) -> dict[str, tuple[int, int]]:
    layers = record.metrics["cache_layers"]
    return {layer: (layers[layer]["hits"], layers[layer]["misses"]) for layer in ("fx_graph", "aot_autograd")}


@pytest.fixture(scope="module")
def forked_run(tmp_path_factory) -> runner.Run:
    """One forked (preloaded) inductor case of mlp-classic, read by the two tests below that each
    ran this very case on their own: they only read its record and run config."""
    return _run(tmp_path_factory.mktemp("forked"), "forked")


@pytest.mark.slow
def test_a_forked_case_is_a_cold_compile_like_a_spawned_one(tmp_path, forked_run):
    forked = forked_run.records[0]
    spawned = _run(tmp_path, "spawned", preload=False).records[0]
    assert forked.status == spawned.status == "ok"
    assert forked.worker["start"] == "preloaded" and spawned.worker["start"] == "spawn"
    assert _cache_counts(forked) == _cache_counts(spawned)
    assert _cache_counts(forked)["fx_graph"][0] == 0 and _cache_counts(forked)["fx_graph"][1] >= 1  # a miss, no hit
    assert _cache_counts(forked)["aot_autograd"][0] == 0
    for key in ("graphs", "graph_breaks", "recompiles"):
        assert forked.metrics[key] == spawned.metrics[key], key
    assert forked.metrics["accuracy"]["status"] == "pass"
    # the server's pages were the case's own before it started, so its compile took the page
    # faults a spawned one takes, not ~30k copy-on-write copies more (forkserver.own_inherited_pages)
    owned = forked.worker["owned_pages"]
    assert owned["bytes"] > 50 << 20 and owned["refused"] == 0, owned
    assert "owned_pages" not in spawned.worker
    assert forked.metrics["compile_minor_faults"] <= 1.2 * spawned.metrics["compile_minor_faults"] + 2000, \
        (forked.metrics["compile_minor_faults"], spawned.metrics["compile_minor_faults"])
    for record in (forked, spawned):  # a compile allocates enough for young collections in either process
        pauses = record.metrics["compile_gc"]
        assert pauses["collections"][0] > 10 and 0 < pauses["seconds"] < record.metrics["compile_time_s"], pauses
        assert record.metrics["compile_cpu_with_workers_s"] >= record.metrics["compile_cpu_s"] - 1e-6


@pytest.mark.slow
def test_the_run_file_says_which_path_each_case_took(tmp_path, forked_run):
    run = forked_run
    ws = run.config["worker_start"]
    assert ws["preload"] is True and ws["servers"] and "torch" in ws["servers"][0]["preloaded"]
    assert run.records[0].worker["start"] == "preloaded"
    assert run.records[0].metrics["phase_s"]["setup"] < 1.0  # the imports were paid once, by the server
    traced = _run(tmp_path, "traced", trace=True).records[0]
    assert traced.worker["start"] == "spawn" and "TORCH_TRACE" in traced.worker["start_note"]


FAULTS = '''
import os, signal, sys, time
import torch
from harness import workload

PIDS = os.environ["CB_TEST_PIDS"]

def linear(ctx):
    return torch.nn.Linear(4, 4).to(ctx.device), (torch.randn(ctx.batch_size, 4, device=ctx.device),)

@workload("fs-fork-escape", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def fork_escape(ctx):
    """a child forked without exec that leaves the session: it carries no case token"""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        time.sleep(600)
        os._exit(0)
    with open(PIDS, "a") as fh:
        fh.write(f"{pid}\\n")
    return linear(ctx)

@workload("fs-segfault", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def segfault(ctx):
    os.kill(os.getpid(), signal.SIGSEGV)

@workload("fs-hang", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def hang(ctx):
    time.sleep(600)

@workload("fs-kill-server", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def kill_server(ctx):
    """the fork server dies under its case (an OOM killer's choice, a stray kill)"""
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(600)

@workload("fs-ok", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def ok(ctx):
    return linear(ctx)

@workload("fs-hang-tell", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def hang_tell(ctx):
    """hangs, having said who its parent is (the fork server, which the test stops)"""
    with open(PIDS, "a") as fh:
        fh.write(f"server {os.getppid()}\\n")
    time.sleep(600)

@workload("fs-ok-tell", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def ok_tell(ctx):
    with open(PIDS, "a") as fh:
        fh.write("ok\\n")
    return linear(ctx)
'''


@pytest.mark.slow
def test_a_forked_case_keeps_its_isolation(tmp_path, monkeypatch):
    faults = tmp_path / "fs_faults.py"
    faults.write_text(FAULTS)
    pids = tmp_path / "pids.txt"
    monkeypatch.setenv("CB_TEST_PIDS", str(pids))
    opts = runner.RunOptions(workloads=["fs-fork-escape", "fs-segfault", "fs-hang"], workload_files=[str(faults)],
                             compilers=["eager"], devices=["cpu"], out_dir=str(tmp_path / "out"), ingest=False,
                             policy=POLICY, timeout_s=10)  # the hang waits it out in full; a forked eager case takes ~1 s
    started = time.monotonic()
    run = runner.execute(opts)
    by = {r.case.workload: r for r in run.records}
    assert all(r.worker["start"] == "preloaded" for r in run.records), [r.worker for r in run.records]
    assert by["fs-fork-escape"].status == "ok"
    assert by["fs-fork-escape"].worker["escaped_processes_killed"] == 1  # found by the server's token
    (escapee,) = [int(p) for p in pids.read_text().split()]
    assert not alive(escapee)
    assert by["fs-segfault"].status == "crashed" and "SIGSEGV" in by["fs-segfault"].error["message"]
    assert by["fs-segfault"].worker["returncode"] == -11
    assert by["fs-hang"].status == "timeout"
    assert time.monotonic() - started < 120


@pytest.mark.slow
def test_a_server_that_dies_under_its_case_costs_that_case_only(tmp_path, monkeypatch):
    """The case is recorded (crashed, with a note naming the server's death) and the run goes
    on: the next case is spawned, as from any broken server."""
    faults = tmp_path / "fs_faults.py"
    faults.write_text(FAULTS)
    monkeypatch.setenv("CB_TEST_PIDS", str(tmp_path / "pids.txt"))
    opts = runner.RunOptions(workloads=["fs-kill-server", "fs-ok"], workload_files=[str(faults)], compilers=["eager"],
                             devices=["cpu"], out_dir=str(tmp_path / "out"), ingest=False, policy=POLICY, timeout_s=60,
                             override_workloads=True)  # the isolation test may have registered this file's names
    started = time.monotonic()
    by = {r.case.workload: r for r in runner.execute(opts).records}
    assert by["fs-kill-server"].status == "crashed" and by["fs-kill-server"].worker["start"] == "preloaded"
    assert by["fs-kill-server"].worker["returncode"] == -9 and "fork server exited" in by["fs-kill-server"].worker["server_died"]
    assert any("exited while it ran" in n for n in by["fs-kill-server"].notes)
    assert by["fs-ok"].status == "ok" and by["fs-ok"].worker["start"] == "spawn"
    assert "fork server unusable" in by["fs-ok"].worker["start_note"]
    assert time.monotonic() - started < 50  # not the case's 60 s timeout: the death is seen at once


@pytest.mark.slow
def test_a_killed_worker_its_server_never_reaps_breaks_that_server_not_the_run(tmp_path, monkeypatch):
    """A stopped server (as one whose killed worker sits in uninterruptible sleep) never sends
    the worker's returncode: the next case's start waits REAP_WAIT_S for it, then spawns that
    case and says why, instead of waiting on the server's busy lock for ever."""
    faults = tmp_path / "fs_faults.py"
    faults.write_text(FAULTS)
    pids = tmp_path / "pids.txt"
    monkeypatch.setenv("CB_TEST_PIDS", str(pids))
    monkeypatch.setattr(forkserver, "REAP_WAIT_S", 1.0)
    stopped: list[int] = []

    def stop_the_server_then_resume_it():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            lines = pids.read_text().split("\n") if pids.exists() else []
            servers = [int(line.split()[1]) for line in lines if line.startswith("server ")]
            if servers and not stopped:
                os.kill(servers[0], signal.SIGSTOP)  # the hang's worker becomes a zombie nobody reaps
                stopped.append(servers[0])
            if stopped and "ok" in lines:  # the next case runs, spawned: let the server exit at close
                os.kill(stopped[0], signal.SIGCONT)
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=stop_the_server_then_resume_it, daemon=True)
    watcher.start()
    opts = runner.RunOptions(workloads=["fs-hang-tell", "fs-ok-tell"], workload_files=[str(faults)],
                             compilers=["eager"], devices=["cpu"], out_dir=str(tmp_path / "out"), ingest=False,
                             policy=POLICY, timeout_s=4, override_workloads=True)
    started = time.monotonic()
    try:
        by = {r.case.workload: r for r in runner.execute(opts).records}
    finally:
        watcher.join(timeout=5)
        for pid in stopped:  # never leave a stopped process behind, whatever failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert stopped, "the hanging case never said who its server was"
    assert by["fs-hang-tell"].status == "timeout" and by["fs-hang-tell"].worker["start"] == "preloaded"
    assert by["fs-ok-tell"].status == "ok" and by["fs-ok-tell"].worker["start"] == "spawn"
    assert "was not reaped" in by["fs-ok-tell"].worker["start_note"], by["fs-ok-tell"].worker
    assert time.monotonic() - started < 90


def test_only_the_runner_starts_worker_processes():
    """One isolation path: no module but run/runner.py (launch) and run/forkserver.py (the
    server) starts a `-m harness...` process. run/distributed.py starts torchrun, which starts
    and watches the ranks itself (no worker record, nothing to fork from a server): it keeps
    the same token, killpg and escaped-child sweep (tests/test_distributed_sweep.py)."""
    import re

    allowed = {"harness/run/runner.py", "harness/run/forkserver.py", "harness/run/distributed.py"}
    starts = re.compile(r"""["']-m["'],\s*["']harness\.""")  # an argv list that runs a harness module
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "harness").rglob("*.py")
                 if str(p.relative_to(ROOT)) not in allowed and starts.search(p.read_text())]
    assert offenders == []


@pytest.mark.slow
def test_sweep_and_coldstart_go_through_the_one_launch(tmp_path, monkeypatch):
    from harness.experiments.lifecycle import ColdStartOptions, coldstart
    from harness.experiments.shapes import SweepOptions, sweep

    seen = []
    real = runner.launch

    def counting(spec, *args, **kwargs):
        seen.append(spec.task)
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(runner, "launch", counting)
    swept = sweep(SweepOptions(workload="mlp-classic", batch_sizes=(2, 4), policies=("dynamic",), steady_calls=2))
    (policy,) = swept["policies"]
    assert policy["status"] == "ok" and policy["recompiles"] == 0 and policy["worker"]["start"] == "preloaded"
    cold = coldstart(ColdStartOptions(workload="mlp-classic", rows=("jit_cold",), steady_calls=3,
                                      workdir=str(tmp_path / "cs")))
    (row,) = cold["rows"]
    assert row["status"] == "ok" and row["import_s"] > 0.05  # spawned: the imports are part of a cold start
    assert seen == ["harness.experiments.shapes:run_policy_task", "harness.experiments.lifecycle:run_step_task"]


# A stand-in for a CUDA driver: a real shared library named libcuda.so.1 whose cuCtxGetCurrent
# answers like the driver does after cuInit (0) or before it (3, CUDA_ERROR_NOT_INITIALIZED);
# a module that loads it at import stands in for a module that maps (or starts) the driver
FAKE_DRIVER_C = "int cuCtxGetCurrent(void **ctx) { *ctx = 0; return STATE; }\n"
FAKE_DRIVER_MODULE = """
import ctypes, os
LIB = ctypes.CDLL(os.path.join(os.environ["CB_FAKE_DRIVER_DIR"], "libcuda.so.1"))
"""


def _fake_driver(tmp_path: Path, initialised: bool) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in driver library")
    folder = tmp_path / "driver"
    folder.mkdir()
    (folder / "fake.c").write_text(FAKE_DRIVER_C)
    subprocess.run([compiler, "-shared", "-fPIC", f"-DSTATE={0 if initialised else 3}", "-o",
                    str(folder / "libcuda.so.1"), str(folder / "fake.c")], check=True)
    return folder


def _start_server(tmp_path: Path, preload: str, initialised: bool = True) -> tuple[subprocess.Popen, dict]:
    (tmp_path / "fake_driver_mod.py").write_text(FAKE_DRIVER_MODULE)
    env = {**_env(), "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}",
           "CB_FAKE_DRIVER_DIR": str(_fake_driver(tmp_path, initialised))}
    proc = subprocess.Popen([sys.executable, "-m", "harness.run.forkserver", f"--preload={preload}"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def _stop(proc: subprocess.Popen) -> str:
    assert proc.stdin is not None and proc.stderr is not None
    proc.stdin.close()
    proc.wait(timeout=60)
    return proc.stderr.read().decode()


def test_a_module_that_starts_the_driver_is_left_out_and_the_server_starts_again(tmp_path):
    proc, info = _start_server(tmp_path, "json,fake_driver_mod,csv")
    log = _stop(proc)
    assert info["driver_started_by"] is None and info["cuda_started"] is False, info
    assert info["skipped_for_driver"] == ["fake_driver_mod"]
    assert info["preloaded"] == ["json", "csv"]  # the rest is still preloaded
    assert "fake_driver_mod started the CUDA driver at import" in log


def test_a_driver_mapped_but_not_initialised_keeps_the_server_whole(tmp_path):
    # torch 2.11+cu130 maps libcuda at `import torch` and never calls cuInit there: forking is safe
    proc, info = _start_server(tmp_path, "json,fake_driver_mod,csv", initialised=False)
    _stop(proc)
    assert info["driver_started_by"] is None and info["cuda_started"] is False, info
    assert info["skipped_for_driver"] == [] and info["preloaded"] == ["json", "fake_driver_mod", "csv"]


def test_a_server_that_cannot_do_without_the_culprit_says_so_and_stays(tmp_path):
    # "torch" is essential: a server without it is no use, so it stays and refuses CUDA cases
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_DRIVER_MODULE)
    proc, info = _start_server(tmp_path, "torch,json")
    _stop(proc)
    assert info["driver_started_by"] == "torch" and info["cuda_started"] is True, info
    assert info["skipped_for_driver"] == [] and info["preloaded"] == ["torch"]


def test_restarts_stop_at_the_limit_and_never_drop_an_essential_module():
    info = {"driver_started_by": "diffusers"}
    assert forkserver.restart_without(info, []) == ["diffusers"]
    assert forkserver.restart_without(info, ["diffusers"]) is None  # skipped already: nothing left to try
    assert forkserver.restart_without(info, [f"m{i}" for i in range(forkserver.MAX_RESTARTS)]) is None
    assert forkserver.restart_without({"driver_started_by": "torch"}, []) is None
    assert forkserver.restart_without({"driver_started_by": None}, []) is None


def test_the_driver_check_is_false_where_no_driver_is_mapped():
    # in a fresh interpreter that imported no torch: this test process may have libcuda
    # mapped (a CUDA torch maps it at import), which would make the check answer for it
    code = ("import sys; from harness.run import forkserver as f; assert 'torch' not in sys.modules; "
            "print(f.mapped_libcuda(), f.cuda_driver_started())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=60)
    assert done.returncode == 0 and done.stdout.split() == ["None", "False"], done.stdout + done.stderr


def test_a_module_that_starts_the_driver_and_then_fails_is_the_one_left_out(tmp_path):
    # the driver check must follow a failed import too: else the next (innocent) module is
    # blamed, skipped, and the restarted server still has the driver started
    (tmp_path / "fails_after_driver.py").write_text(FAKE_DRIVER_MODULE + "raise ImportError('half-imported')\n")
    proc, info = _start_server(tmp_path, "json,fails_after_driver,csv")
    _stop(proc)
    assert info["skipped_for_driver"] == ["fails_after_driver"], info
    assert info["cuda_started"] is False and info["preloaded"] == ["json", "csv"], info


def test_a_skipped_module_imported_again_by_a_later_one_ends_in_a_whole_server(tmp_path):
    # diffusers skipped, then diffusers.models... imports it anyway: that one is left out too,
    # and the restarts stop (each culprit is skipped once)
    (tmp_path / "imports_driver_mod.py").write_text("import fake_driver_mod\n")
    proc, info = _start_server(tmp_path, "json,fake_driver_mod,imports_driver_mod,csv")
    log = _stop(proc)
    assert info["skipped_for_driver"] == ["fake_driver_mod", "imports_driver_mod"], info
    assert info["cuda_started"] is False and info["preloaded"] == ["json", "csv"], info
    assert log.count("starting again without it") == 2


def test_the_isa_probe_runs_with_nvml_availability_checks(tmp_path, monkeypatch):
    # on a CUDA box the probe's torch.cuda.is_available() would otherwise cuInit the server,
    # and every case forked after it (CPU ones too) failed "Cannot re-initialize CUDA"
    seen = {}

    def fake_probe(isa_cache_dir):
        seen["nvml"] = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
        return {"isa": "fake", "seconds": 0.0, "cached": False}

    monkeypatch.delenv("PYTORCH_NVML_BASED_CUDA_CHECK", raising=False)  # set or not, the probe must set it
    monkeypatch.setattr(forkserver, "warm_isa", fake_probe)
    # the preload points the cache variable at a sentinel folder of its own and unsets it after:
    # this session's value comes back at teardown, and the folder lands under tmp_path
    monkeypatch.setenv(forkserver.CACHE_ENV, os.environ.get(forkserver.CACHE_ENV, str(tmp_path / "cache")))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    info = forkserver._serve_preload(str(tmp_path), modules=["json"])
    assert seen["nvml"] == "1" and info["isa_probe"]["isa"] == "fake"
    assert "PYTORCH_NVML_BASED_CUDA_CHECK" not in os.environ  # restored for the cases


def test_a_server_with_cuda_started_forks_no_case_cpu_ones_included(monkeypatch):
    from harness.measure.spec import WorkerSpec
    from harness.run import runner

    class Server:
        broken = None
        info = {"cuda_started": True, "driver_started_by": None, "driver_started_in": "the CPU ISA probe"}

    class Pool:
        def get(self, python, env, isa_cache_dir=None, modules=forkserver.PRELOAD):
            return Server()

    monkeypatch.setattr(runner, "open_pool", lambda: Pool())
    spec = WorkerSpec(task="run_task", payload={"device": "cpu"})
    server, start = runner._server_for(spec, sys.executable, {}, None)
    assert server is None and start["start"] == "spawn"
    assert start["start_note"] == "the fork server started the CUDA driver in the CPU ISA probe"


def test_a_gpu_case_forks_unless_gpu_preloading_is_turned_off(monkeypatch):
    from harness.measure.spec import WorkerSpec
    from harness.run import runner

    asked = []

    class Server:
        broken = None
        info = {"cuda_started": False}

    class Pool:
        def get(self, python, env, isa_cache_dir=None, modules=forkserver.PRELOAD):
            asked.append(modules)
            return Server()

    monkeypatch.setattr(runner, "open_pool", lambda: Pool())
    monkeypatch.setenv(forkserver.GPU_PRELOAD_ENV, "0")
    spec = WorkerSpec(task="run_task", payload={"device": "cuda"})
    server, start = runner._server_for(spec, sys.executable, {}, None)
    assert server is None and start["start"] == "spawn" and forkserver.GPU_PRELOAD_ENV in start["start_note"]
    assert asked == []  # no server started for it
    cpu = WorkerSpec(task="run_task", payload={"device": "cpu"})
    assert runner._server_for(cpu, sys.executable, {}, None)[1] == {"start": "preloaded"}
    monkeypatch.delenv(forkserver.GPU_PRELOAD_ENV)  # the default: GPU cases fork too
    server, start = runner._server_for(spec, sys.executable, {}, None)
    assert isinstance(server, Server) and start == {"start": "preloaded"}


def test_a_forked_case_draws_fresh_numpy_randomness():
    """Cases forked from one server would otherwise continue its one numpy state, each the
    same numbers; a spawned worker starts from fresh entropy (Python's random is reseeded at
    fork by CPython; torch is seeded by the worker)."""
    import numpy

    from harness.run.forkserver import fresh_random_state

    numpy.random.seed(1)
    state = numpy.random.get_state()[1].copy()
    fresh_random_state()
    assert not (numpy.random.get_state()[1] == state).all()
