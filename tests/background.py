"""Real CLI runs that start when the session's collection ends and run beside the other tests.

The suite runs one test at a time, mostly one Python process on one core, while CI's box has
two: a long real run whose tests only read its result (the breadth-ci suite: about 130 s of
Inductor compiles) is started in the background as soon as pytest knows it will be needed,
and the tests that read it are moved to the end of the session (tests/conftest.py), so the
run overlaps everything else instead of adding to it. The tests' assertions are unchanged;
they wait for the run if it is still going.

Each entry of BACKGROUND is keyed by the fixture name its tests request; a run not started
by the hook (a plugin reordering, a direct call) starts on first use.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STOP_WAIT_S = 30.0  # a SIGTERMed run finishes its case's cleanup within this, else SIGKILL


def cli_env() -> dict[str, str]:
    """The environment the tests' `compilebench` subprocesses get: this checkout first, offline."""
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


@dataclass
class BackgroundRun:
    """One CLI run in a folder of its own: started once, waited for by whoever reads it."""

    name: str
    argv: Callable[[Path], list[str]]  # the command, given the run's output folder
    skip: Callable[[], str | None] = lambda: None  # a reason not to run at all (the tests skip with it)
    out: Path | None = None
    proc: subprocess.Popen | None = None
    skipped: str | None = None
    _logs: list = field(default_factory=list)

    def start(self) -> None:
        if self.proc is not None or self.skipped is not None:
            return
        self.skipped = self.skip()
        if self.skipped is not None:
            return
        self.out = Path(tempfile.mkdtemp(prefix=f"compilebench-bg-{self.name}-"))
        self._logs = [open(self.out / name, "w+") for name in ("stdout.txt", "stderr.txt")]
        # a session of its own: stop() signals the run's whole group
        self.proc = subprocess.Popen(self.argv(self.out / "results"), cwd=ROOT, env=cli_env(), text=True,
                                     stdout=self._logs[0], stderr=self._logs[1], start_new_session=True)

    def wait(self) -> subprocess.CompletedProcess:
        """The finished run (returncode, stdout, stderr), as subprocess.run would give it."""
        self.start()
        assert self.proc is not None, "wait() on a skipped run"
        self.proc.wait()
        stdout, stderr = ((self.out / name).read_text() for name in ("stdout.txt", "stderr.txt"))
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, stdout, stderr)

    def results(self) -> Path:
        assert self.out is not None
        return self.out / "results"

    def stop(self) -> None:
        """End a run nobody waited for (a session stopped early) and remove its folder."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the CLI ends its worker on SIGTERM
            try:
                self.proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for fh in self._logs:
            fh.close()
        if self.out is not None:
            shutil.rmtree(self.out, ignore_errors=True)


def _breadth_ci_torch_mismatch() -> str | None:
    import torch

    from harness.analysis.expected import DEFAULT_DIR, load_expected, torch_minor

    minor = load_expected(DEFAULT_DIR / "breadth-ci-cpu.json")["torch_minor"]
    if torch_minor(torch.__version__) != minor:
        return f"the committed counts are for torch {minor} (the test env's pin); this is {torch.__version__}"
    return None


BACKGROUND: dict[str, BackgroundRun] = {
    # tests/test_breadth_ci.py: `compilebench run --suite breadth-ci` for real, as CI runs it
    "ci_run": BackgroundRun(
        "breadth-ci",
        lambda out: [sys.executable, "-m", "harness", "run", "--suite", "breadth-ci", "--no-ingest", "--out", str(out),
                     "--format", "plain"],
        skip=_breadth_ci_torch_mismatch,
    ),
}
