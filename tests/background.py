"""Real CLI runs that start when the session's collection ends and run beside the other tests.

The suite runs one test at a time, mostly one Python process on one core, while CI's box has
two: a long real run whose tests only read its result (the breadth-ci suite: about 130 s of
Inductor compiles; the tiny UNet's cold compile; the tiny LLM scenarios; the cold-start
rows) is started in the background as soon as
pytest knows it will be needed, and the tests that read it are moved to the end of the
session (tests/conftest.py), so the run overlaps everything else instead of adding to it.
The tests' assertions are unchanged; they wait for the run if it is still going.

The runs go one at a time, in the order their tests will read them, in one thread: one
background process beside the foreground test, not several. Each entry of BACKGROUND is keyed
by the fixture name its tests request; a run not started by the hook starts on first use.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STOP_WAIT_S = 30.0  # a SIGTERMed run finishes its case's cleanup within this, else SIGKILL


def cli_env() -> dict[str, str]:
    """The environment the tests' `compilebench` subprocesses get: this checkout first, offline."""
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


class Stopped(RuntimeError):
    """The session ended before this run's turn (a test failed under -x, Ctrl-C)."""


class _Worker:
    """The one thread that runs the queued work, and the process it is waiting on."""

    def __init__(self) -> None:
        self.jobs: queue.Queue[BackgroundRun | None] = queue.Queue()  # None: the loop ends
        self.thread: threading.Thread | None = None
        self.current: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def submit(self, run: BackgroundRun) -> None:
        self.jobs.put(run)
        if self.thread is None:
            self.thread = threading.Thread(target=self.loop, name="background-runs", daemon=True)
            self.thread.start()

    def loop(self) -> None:
        while (run := self.jobs.get()) is not None:
            try:
                if self.stopping.is_set():
                    raise Stopped(run.name)
                run.result = run.work(run.out)
            except BaseException as exc:  # noqa: BLE001 - handed to the test that waits for it
                run.error = exc
            finally:
                run.done.set()

    def command(self, argv: list[str], timeout: float | None = None,
                extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """subprocess.run(argv, capture_output=True, text=True) from ROOT with cli_env() and
        `extra_env`, in a session of its own so that stop() can end the process and what it started."""
        with self.lock:
            if self.stopping.is_set():
                raise Stopped(" ".join(argv[:4]))
            proc = subprocess.Popen(argv, cwd=ROOT, env={**cli_env(), **(extra_env or {})}, text=True, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
            self.current = proc
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _end(proc)
            raise
        finally:
            with self.lock:
                self.current = None
        return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            proc = self.current
        if proc is not None:
            _end(proc)
        if self.thread is not None:
            self.jobs.put(None)  # queued runs ahead of it raise Stopped at once
            self.thread.join(timeout=STOP_WAIT_S)


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # the CLI ends its worker on SIGTERM
    try:
        proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


WORKER = _Worker()
command = WORKER.command


@dataclass
class BackgroundRun:
    """Work done once in a folder of its own, in the background thread; `work` runs its
    processes through `command`. Its tests call wait() for what `work` returned (or raised)."""

    name: str
    work: Callable[[Path], Any]
    skip: Callable[[], str | None] = lambda: None  # a reason not to run at all (the tests skip with it)
    out: Path | None = None
    skipped: str | None = None
    result: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        if self.out is not None or self.skipped is not None:
            return
        self.skipped = self.skip()
        if self.skipped is not None:
            return
        self.out = Path(tempfile.mkdtemp(prefix=f"compilebench-bg-{self.name}-"))
        WORKER.submit(self)

    def wait(self) -> Any:
        self.start()
        assert self.skipped is None, f"wait() on a skipped run: {self.skipped}"
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.result

    def remove(self) -> None:
        if self.out is not None:
            shutil.rmtree(self.out, ignore_errors=True)


def stop_all() -> None:
    """End the run in progress, cancel the rest, remove every run's folder."""
    WORKER.stop()
    for run in BACKGROUND.values():
        run.remove()


def cli(*args: str, timeout: float | None = None, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return command([sys.executable, "-m", "harness", *args], timeout=timeout, extra_env=extra_env)


# ---- the runs -----------------------------------------------------------------------------


def _breadth_ci_torch_mismatch() -> str | None:
    import torch

    from harness.analysis.expected import DEFAULT_DIR, load_expected, torch_minor

    minor = load_expected(DEFAULT_DIR / "breadth-ci-cpu.json")["torch_minor"]
    if torch_minor(torch.__version__) != minor:
        return f"the committed counts are for torch {minor} (the test env's pin); this is {torch.__version__}"
    return None


# tests/test_llm.py's policy for the llm cases (min_time_s 0.2, min_samples 5, warmup 2), and one
# OpenMP thread: on a shared, oversubscribed CI box spinning threads made a tiny model's step
# 20x slower, and the tests check behaviour, not speed
LLM_POLICY_ARGS = ("--min-time", "0.2", "--min-samples", "5", "--warmup", "2", "--timeout", "600")
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def _llm_runs(out: Path) -> list[subprocess.CompletedProcess]:
    """The `llm` part of the smoke suite, then GPT-2's train step (two runs, one folder)."""
    common = (*LLM_POLICY_ARGS, "--no-ingest", "--out", str(out / "results"), "--format", "plain")
    from suites.llm import SMOKE_WORKLOADS

    return [cli("run", "--suite", "smoke", "-w", ",".join(SMOKE_WORKLOADS), *common, extra_env=ONE_THREAD),
            cli("run", "-w", "gpt2", "--scenario", "llm-train", "--size", "tiny", *common, extra_env=ONE_THREAD)]


# the tiny UNet's case as tests/test_diffusion.py's FAST_POLICY measures it (the CLI's policy flags)
UNET_POLICY_ARGS = ("--warmup", "1", "--min-samples", "3", "--min-time", "0.05")

def _coldstart(*args: str) -> Callable[[Path], subprocess.CompletedProcess]:
    """`compilebench coldstart ARGS` (tests/test_lifecycle.py's options), its result in out/coldstart.json."""
    return lambda out: cli("coldstart", *args, "--out", str(out / "work"), "--json-file", str(out / "coldstart.json"),
                           "--format", "plain")


BACKGROUND: dict[str, BackgroundRun] = {
    # tests/test_breadth_ci.py: `compilebench run --suite breadth-ci` for real, as CI runs it
    "ci_run": BackgroundRun(
        "breadth-ci",
        lambda out: cli("run", "--suite", "breadth-ci", "--no-ingest", "--out", str(out / "results"),
                        "--format", "plain"),
        skip=_breadth_ci_torch_mismatch,
    ),
    # tests/test_llm.py: every llm scenario of the smoke suite and GPT-2's train step, tiny, CPU
    "llm_smoke_runs": BackgroundRun("llm-smoke", _llm_runs),
    # tests/test_diffusion.py: one real cold Inductor compile of the tiny UNet, fullgraph=True
    "tiny_unet_run": BackgroundRun(
        "tiny-unet",
        lambda out: cli("run", "-w", "sdxl-unet", "--scenario", "unet_step", "-c", "inductor-fullgraph",
                        "--device", "cpu", "--size", "tiny", *UNET_POLICY_ARGS, "--timeout", "1200", "--no-ingest",
                        "--out", str(out / "results"), "--format", "plain"),
    ),
    # tests/test_lifecycle.py: the cold-start rows of the tiny MLP (JIT cold/warm, aot_compile, AOTI), fresh processes
    "coldstart_result": BackgroundRun(
        "coldstart-mlp", _coldstart("-w", "mlp-classic", "--rows", "jit_cold,jit_warm,aot_compile,aoti", "--steady-calls", "3")),
    # tests/test_lifecycle.py: tiny GPT-2 through aot_compile (a model that calls submodules by keyword)
    "gpt2_aot_coldstart": BackgroundRun(
        "coldstart-gpt2", _coldstart("-w", "gpt2-prefill-logits", "--rows", "aot_compile,aot_compile_warm",
                                     "--steady-calls", "2", "--workload-file",
                                     str(ROOT / "benchmarks" / "gpu" / "coldstart_workloads.py"))),
}


def wait_idle() -> None:
    """Until every started run has finished (its result is not looked at here)."""
    for run in BACKGROUND.values():
        if run.out is not None:
            run.done.wait()
