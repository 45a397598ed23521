"""Faults in what a case produces: NaN outputs, floods of stdout/stderr, processes left
behind (one in the worker's session, one escaped with setsid), and a hang."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from compiler import CompilerConfig, register_compiler
from harness import workload

FLOOD_BYTES = 16 << 20  # per stream: far above the runner's 8 KiB log tail
PIDS_ENV = "COMPILEBENCH_FAULT_PIDFILE"  # where fault-leave-children/fault-hang write their children's pids

register_compiler(CompilerConfig("fault-dynamo-eager", backend="eager",
                                 description="fault corpus: Dynamo capture, no codegen (fast)"))


def _linear(ctx, scale: float = 1.0):
    import torch

    model = torch.nn.Linear(4, 2).to(ctx.device, ctx.dtype)
    return model, (scale * torch.randn(ctx.batch_size, 4, device=ctx.device, dtype=ctx.dtype),)


@workload("fault-nan-output", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def nan_output(ctx):
    """input full of NaN: eager and compiled both return NaN, which never passes accuracy"""
    return _linear(ctx, scale=float("nan"))


@workload("fault-flood-output", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def flood_output(ctx):
    """writes 16 MiB to stdout and to stderr while building, then runs normally"""
    line = ("flood " * 170 + "\n").encode()
    for _ in range(FLOOD_BYTES // len(line) + 1):
        os.write(1, line)
        os.write(2, line)
    return _linear(ctx)


def _spawn_sleeper(new_session: bool) -> int:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=new_session,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc.pid


def _note_pids(*pids: int) -> None:
    path = os.environ.get(PIDS_ENV)
    if path:
        with open(path, "a") as fh:
            fh.write("".join(f"{p}\n" for p in pids))


@workload("fault-leave-children", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def leave_children(ctx):
    """starts two sleeping processes and never reaps them: one stays in the worker's
    session (killed with its process group), one calls setsid (found by its env token)"""
    _note_pids(_spawn_sleeper(new_session=False), _spawn_sleeper(new_session=True))
    return _linear(ctx)


@workload("fault-hang", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def hang(ctx):
    """starts a child, then sleeps forever while building: only the timeout ends it"""
    _note_pids(_spawn_sleeper(new_session=False))
    time.sleep(3600)
