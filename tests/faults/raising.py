"""Faults that raise: in build, in the compiler, in the timed loop; and a worker that exits
without writing a record."""

from __future__ import annotations

import os

from compiler import CompilerConfig, register_compiler
from harness import workload


def _raising_backend(gm, example_inputs):
    raise RuntimeError("injected compiler fault: this backend always fails")


def _register_backend() -> None:
    """A dynamo backend that fails, registered where the worker compiles (it imports this
    file before building); the parent only needs the compiler config's name."""
    try:
        from torch._dynamo import list_backends, register_backend
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return
    if "fault_raising_backend" not in list_backends(exclude_tags=()):
        register_backend(name="fault_raising_backend")(_raising_backend)


_register_backend()
register_compiler(CompilerConfig("fault-raising-backend", backend="fault_raising_backend",
                                 description="fault corpus: a backend that raises"))


def _linear(ctx):
    import torch

    model = torch.nn.Linear(4, 2).to(ctx.device, ctx.dtype)
    return model, (torch.randn(ctx.batch_size, 4, device=ctx.device, dtype=ctx.dtype),)


@workload("fault-raise-build", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def raise_build(ctx):
    """raises while building the model"""
    raise ValueError("injected fault: the factory failed while building the model")


@workload("fault-raise-compile", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def raise_compile(ctx):
    """healthy model; its compiler config's backend raises"""
    return _linear(ctx)


class _FailsOnThirdCall:
    """Callable model: fine for the first calls (eager first call, warm-up), then raises in
    the timed loop, like a kernel that fails only under repetition."""

    def __init__(self, ctx):
        import torch

        self.model = torch.nn.Linear(4, 2).to(ctx.device, ctx.dtype)
        self.calls = 0

    def eval(self):
        return self

    def __call__(self, x):
        self.calls += 1
        if self.calls >= 3:
            raise RuntimeError(f"injected fault: failed on call {self.calls}, inside the timed loop")
        return self.model(x)


@workload("fault-raise-timed-loop", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def raise_timed_loop(ctx):
    """raises on its third call (after the first call, during warm-up/timing)"""
    import torch

    return _FailsOnThirdCall(ctx), (torch.randn(ctx.batch_size, 4, device=ctx.device, dtype=ctx.dtype),)


@workload("fault-exit-no-record", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def exit_no_record(ctx):
    """the worker process exits (code 3) without writing a record"""
    os._exit(3)
