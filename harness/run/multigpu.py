"""Several GPUs in one host: `compilebench run --gpus 0,1,...`.

One worker per GPU at a time, pinned with `CUDA_VISIBLE_DEVICES` (so inside the worker
the case's `cuda` is `cuda:0` = the assigned GPU; the same variable works on ROCm, and
`ZE_AFFINITY_MASK` does it for Intel XPU). Each GPU slot is a thread that takes the next
case from a shared queue and blocks in the runner's `run_worker` (a subprocess wait, no
busy loop), so a long case on one GPU never holds the others back. Cases are dispatched
longest-expected-first when the history store knows their cost, and the runner consumes
results in plan order, so the run file looks exactly like a one-GPU run's (each record
says which GPU it ran on in `record.worker['gpu']`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping, Sequence

from harness.model.errors import UserError
from harness.model.schema import Case, Record

# env var that pins a worker to one device, per device type
VISIBLE_DEVICES_ENV = {"cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK"}


class GpuPlanError(UserError, ValueError):
    """--gpus that cannot work with the planned cases; the message says the fix."""


def parse_gpus(values: Sequence[str]) -> list[int]:
    """['0,1', '3'] -> [0, 1, 3]; duplicates and non-numbers are an error."""
    out: list[int] = []
    for value in values:
        for part in filter(None, (p.strip() for p in value.split(","))):
            if not part.isdigit():
                raise GpuPlanError(f"--gpus {value!r}: expected GPU indices like 0,1,2")
            if int(part) in out:
                raise GpuPlanError(f"--gpus {value!r}: GPU {part} is listed twice")
            out.append(int(part))
    return out


def check_cases(cases: Sequence[Case], gpus: Sequence[int]) -> None:
    """With --gpus every worker sees exactly one GPU as index 0, so a case that names
    another index (cuda:1) cannot mean what it says."""
    for case in cases:
        kind, _, idx = case.device.partition(":")
        if kind in VISIBLE_DEVICES_ENV and idx not in ("", "0"):
            raise GpuPlanError(f"case {case.case_id} asks for {case.device}, but --gpus pins each worker to one GPU; "
                               f"use --device {kind} and list the GPUs in --gpus")


def pin_env(case: Case, gpu: int) -> dict[str, str]:
    kind = case.device.partition(":")[0]
    var = VISIBLE_DEVICES_ENV.get(kind)
    return {var: str(gpu)} if var else {}


RunOne = Callable[[Case, Mapping[str, str]], Record]


class GpuPool:
    """Runs cases concurrently, one at a time per GPU; `result(case)` blocks until that
    case is done. `cancel()` stops taking cases (the runner kills workers in flight)."""

    def __init__(self, cases: Sequence[Case], run_one: RunOne, gpus: Sequence[int],
                 costs: Mapping[str, float] | None = None):
        if not gpus:
            raise GpuPlanError("--gpus needs at least one GPU index")
        check_cases(cases, gpus)
        costs = costs or {}
        order = sorted(range(len(cases)), key=lambda i: (-costs.get(cases[i].case_id, 0.0), i))
        self._todo: queue.SimpleQueue[Case] = queue.SimpleQueue()
        for i in order:
            self._todo.put(cases[i])
        self._run_one = run_one
        self._done: dict[str, Record] = {}
        self._cond = threading.Condition()
        self._cancelled = False
        # daemon: an interrupted run must be able to exit without waiting for a slot
        self._threads = [threading.Thread(target=self._slot, args=(g,), name=f"gpu-{g}", daemon=True) for g in gpus]
        for t in self._threads:
            t.start()

    def _slot(self, gpu: int) -> None:
        while not self._cancelled:
            try:
                case = self._todo.get_nowait()
            except queue.Empty:
                return
            try:
                record = self._run_one(case, pin_env(case, gpu))
            except BaseException as exc:  # noqa: BLE001 - a slot must never die silently
                record = Record.failure(case, "crashed", type(exc).__name__, str(exc))
            record.worker["gpu"] = gpu
            with self._cond:
                self._done[case.case_id] = record
                self._cond.notify_all()

    def result(self, case: Case, poll_s: float = 1.0) -> Record:
        """Wait for `case` (timed waits keep Ctrl-C responsive in the main thread)."""
        with self._cond:
            while case.case_id not in self._done:
                if not any(t.is_alive() for t in self._threads):
                    raise RuntimeError(f"GPU pool stopped before {case.case_id} ran")
                self._cond.wait(timeout=poll_s)
            return self._done.pop(case.case_id)

    def cancel(self) -> None:
        self._cancelled = True


def start_pool(cases: Sequence[Case], run_one: RunOne, gpus: Sequence[int], out_dir: str) -> GpuPool | None:
    """Runner entry: a pool for `--gpus`, None to run cases one by one as usual."""
    if not gpus:
        return None
    from pathlib import Path

    from harness.run.shard import history_costs

    costs = history_costs(Path(out_dir) / "history.sqlite", [c.case_id for c in cases])
    return GpuPool(cases, run_one, gpus, costs)
