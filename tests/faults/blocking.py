"""A case that blocks until it is killed, for the signal tests (tests/test_signals.py).

With COMPILEBENCH_TEST_BLOCK_MARKER set, the factory writes that file and then blocks: the
test sends its signal once the marker exists, so the signal lands mid-case every time, never
in a race against a short case. Without it (a `--resume` that finishes the run) it is the
tiny healthy control case."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from harness import workload

BLOCK_MARKER_ENV = "COMPILEBENCH_TEST_BLOCK_MARKER"


@workload("fault-block-until-killed", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def block_until_killed(ctx):
    """writes $COMPILEBENCH_TEST_BLOCK_MARKER, then blocks until its worker is killed"""
    import torch

    marker = os.environ.get(BLOCK_MARKER_ENV)
    if marker:
        Path(marker).write_text(str(os.getpid()))
        threading.Event().wait()  # no timeout: only the runner's kill ends this case
    model = torch.nn.Linear(4, 2).to(ctx.device, ctx.dtype)
    return model, (torch.randn(ctx.batch_size, 4, device=ctx.device, dtype=ctx.dtype),)
