"""Workloads for the gate proof: the smoke suite's MLPs, with a compiled path that can be
told to do a known fraction of extra work.

Each call runs the smoke model (`suites.mlp`) over `REPEATS` stacked batches (one
[REPEATS, batch, features] input: Linear and LayerNorm act on the last dimension), so a call
is REPEATS batches of model work in a graph no bigger than the smoke model's. When the
environment variable `COMPILEBENCH_GATE_EXTRA_WORK` is a fraction f > 0, the *compiled*
graph (only while Dynamo traces: `torch.compiler.is_compiling()`) also runs the model over
round(REPEATS * batch * f) more rows and adds that result times a zero buffer. The output is
unchanged (accuracy still passes) while the generated code really does f more model work per
call: what a compiler regression looks like from outside (same model, same eager baseline,
slower compiled code). The zero is a buffer, a graph input after AOTAutograd, so it is not
constant-folded away.
"""

from __future__ import annotations

import os

from harness import Built, workload

EXTRA_WORK_ENV = "COMPILEBENCH_GATE_EXTRA_WORK"
REPEATS = 16


def extra_fraction() -> float:
    raw = os.environ.get(EXTRA_WORK_ENV, "") or "0"
    fraction = float(raw)
    if fraction < 0:
        raise ValueError(f"{EXTRA_WORK_ENV}={raw!r} must be a fraction >= 0")
    return fraction


def _with_extra_work(model, batch: int, features: int, ctx) -> Built:
    import torch
    from torch import nn

    rows = REPEATS * batch
    extra_rows = round(rows * extra_fraction())

    class ExtraWork(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model
            self.register_buffer("zero", torch.zeros((), device=ctx.device, dtype=ctx.dtype))

        def forward(self, x: torch.Tensor, spare: torch.Tensor) -> torch.Tensor:
            out = self.inner(x)
            if extra_rows and torch.compiler.is_compiling():
                out = out + self.zero * self.inner(spare).sum()
            return out

    x = torch.randn(REPEATS, batch, features, device=ctx.device, dtype=ctx.dtype)
    spare = torch.randn(max(extra_rows, 1), features, device=ctx.device, dtype=ctx.dtype)
    return Built(model=ExtraWork().to(ctx.device), args=(x, spare), units_per_call=float(rows))


@workload("gate-mlp-classic", unit="samples", batch_size=16, scenarios=("forward",), sizes=("tiny",),
          description="smoke mlp-classic on 16 stacked batches; compiled path does COMPILEBENCH_GATE_EXTRA_WORK more rows")
def gate_classic(ctx):
    from suites.mlp import classic

    model, (x,) = classic(ctx)
    return _with_extra_work(model, ctx.batch_size, x.shape[-1], ctx)


@workload("gate-mlp-deep", unit="samples", batch_size=64, scenarios=("forward",), sizes=("tiny",),
          description="smoke mlp-deep on 16 stacked batches; compiled path does COMPILEBENCH_GATE_EXTRA_WORK more rows")
def gate_deep(ctx):
    from suites.mlp import deep

    model, (x,) = deep(ctx)
    return _with_extra_work(model, ctx.batch_size, x.shape[-1], ctx)
