"""Workloads for the gate proof: the smoke suite's MLPs, with a compiled path that can be
told to do a known fraction of extra work.

Each call runs the smoke model (`suites.mlp`) over stacked batches (one [repeats, batch,
features] input: Linear and LayerNorm act on the last dimension), so a call is `repeats`
batches of model work in a graph no bigger than the smoke model's. When the environment
variable `COMPILEBENCH_GATE_EXTRA_WORK` is a fraction f > 0, the *compiled* graph (only
while Dynamo traces: `torch.compiler.is_compiling()`) runs the same layers over
round(rows * f) extra rows appended to the input (one concatenation) and drops their
results. The output is unchanged (accuracy still passes) while the generated code really
does about f more model work per call, plus the copy: what a compiler regression looks like
from outside (same model, same eager baseline, slower compiled code). The slowdown the gate
actually sees is measured and reported next to f.

`COMPILEBENCH_GATE_WHOLE_WORK=f` does the same extra rows in eager AND compiled: what a
torch or model change looks like (both paths slower, machine unchanged). The two add up.
"""

from __future__ import annotations

import os

from harness import Built, workload

EXTRA_WORK_ENV = "COMPILEBENCH_GATE_EXTRA_WORK"
WHOLE_WORK_ENV = "COMPILEBENCH_GATE_WHOLE_WORK"
CLASSIC_REPEATS = 256  # x16 rows: Linear(10, 5) needs many rows before work, not call overhead, dominates
DEEP_REPEATS = 4


def extra_fraction(name: str = EXTRA_WORK_ENV) -> float:
    raw = os.environ.get(name, "") or "0"
    fraction = float(raw)
    if fraction < 0:
        raise ValueError(f"{name}={raw!r} must be a fraction >= 0")
    return fraction


def _with_extra_work(model, batch: int, features: int, ctx, repeats: int) -> Built:
    import torch
    from torch import nn

    rows = repeats * batch
    compiled_rows = round(rows * extra_fraction())
    whole_rows = round(rows * extra_fraction(WHOLE_WORK_ENV))

    class ExtraWork(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: torch.Tensor, spare: torch.Tensor) -> torch.Tensor:
            extra_rows = whole_rows + (compiled_rows if torch.compiler.is_compiling() else 0)
            if extra_rows:
                # the same layers over rows + extra_rows, then drop the extra rows' results:
                # more work in the same kernels, output unchanged
                full = self.inner(torch.cat([x.reshape(rows, features), spare[:extra_rows]]))
                return full[:rows].reshape(repeats, batch, -1)
            return self.inner(x)

    x = torch.randn(repeats, batch, features, device=ctx.device, dtype=ctx.dtype)
    spare = torch.randn(max(compiled_rows + whole_rows, 1), features, device=ctx.device, dtype=ctx.dtype)
    return Built(model=ExtraWork().to(ctx.device), args=(x, spare), units_per_call=float(rows))


@workload("gate-mlp-classic", unit="samples", batch_size=16, scenarios=("forward",), sizes=("tiny",),
          description="smoke mlp-classic on 16 stacked batches; compiled path does COMPILEBENCH_GATE_EXTRA_WORK more rows")
def gate_classic(ctx):
    from suites.mlp import classic

    model, (x,) = classic(ctx)
    return _with_extra_work(model, ctx.batch_size, x.shape[-1], ctx, CLASSIC_REPEATS)


@workload("gate-mlp-deep", unit="samples", batch_size=64, scenarios=("forward",), sizes=("tiny",),
          description="smoke mlp-deep on 16 stacked batches; compiled path does COMPILEBENCH_GATE_EXTRA_WORK more rows")
def gate_deep(ctx):
    from suites.mlp import deep

    model, (x,) = deep(ctx)
    return _with_extra_work(model, ctx.batch_size, x.shape[-1], ctx, DEEP_REPEATS)


WIDE = (256, 512, 3)  # features, hidden, layers: ~0.4 GFLOP per call, compute-bound on a CPU
WIDE_ROWS = 256


def _with_kept_extra_work(model, features: int, ctx) -> Built:
    """Like `_with_extra_work`, but the extra rows' result is kept alive: with the rows sliced
    away after the model, f=2.0 measured only ~-20% speedup on this model (the compiled code
    did not do proportional extra work), so here the extra rows' sum is
    multiplied by a zero *tensor input* (a runtime value no compiler pass can fold) and
    added to the output. The compiled graph really does f more rows; the output is the same."""
    import torch
    from torch import nn

    extra_rows = round(WIDE_ROWS * extra_fraction())

    class KeptExtraWork(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: torch.Tensor, spare: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
            out = self.inner(x)
            if extra_rows and torch.compiler.is_compiling():
                out = out + self.inner(spare).sum() * zero
            return out

    x = torch.randn(WIDE_ROWS, features, device=ctx.device, dtype=ctx.dtype)
    spare = torch.randn(max(extra_rows, 1), features, device=ctx.device, dtype=ctx.dtype)
    zero = torch.zeros((), device=ctx.device, dtype=ctx.dtype)
    return Built(model=KeptExtraWork().to(ctx.device), args=(x, spare, zero), units_per_call=float(WIDE_ROWS))


@workload("gate-mlp-wide", unit="samples", batch_size=64, scenarios=("forward",), sizes=("tiny",),
          description="compute-bound MLP (256-512-512-256) on 256 rows; compiled path does "
                      "COMPILEBENCH_GATE_EXTRA_WORK more rows, kept alive (the bisect proof)")
def gate_wide(ctx):
    from torch import nn

    features, hidden, layers = WIDE
    blocks: list[nn.Module] = [nn.Linear(features, hidden), nn.GELU()]
    for _ in range(layers - 2):
        blocks += [nn.Linear(hidden, hidden), nn.GELU()]
    blocks.append(nn.Linear(hidden, features))
    model = nn.Sequential(*blocks).to(ctx.device, ctx.dtype)
    return _with_kept_extra_work(model, features, ctx)
