"""Training scenario variants beyond `train` (the whole `train_step` compiled).

`train_module_only`: only the module is compiled (`compiler.compile(model)`); zero_grad,
loss, backward and the optimizer step stay eager. It is what users do when compiling the
optimizer step graph-breaks or recompiles, and the comparison with `train` shows what
compiling the optimizer buys.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from compiler import CompilerConfig

from .scenarios import Prepared, default_loss, make_optimizer, scenario, units
from .workloads import Built, Workload, WorkloadContext


def _step(model: Any, forward: Callable, optimizer: str, loss_fn: Callable, args: tuple, kwargs: dict) -> Callable[[], Any]:
    opt = make_optimizer(optimizer, model.parameters())

    def train_step() -> Any:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(*args, **kwargs))
        loss.backward()
        opt.step()
        return loss.detach()

    return train_step


@scenario("train_module_only")
def train_module_only(built: Built, wl: Workload, compiler: CompilerConfig, ctx: WorkloadContext) -> Prepared:
    """A training step whose forward (and its backward) is compiled; the optimizer is eager.
    Eager and compiled own copies of the model from the same initial state."""
    model_eager = built.model
    model_eager.train()
    model_compiled = copy.deepcopy(model_eager)
    loss_fn = wl.loss or default_loss
    args, kwargs = built.args, built.kwargs
    eager_step = _step(model_eager, model_eager, wl.optimizer, loss_fn, args, kwargs)
    compiled_step = None
    if not compiler.is_eager:
        forward = compiler.compile(model_compiled)
        compiled_step = _step(model_compiled, forward, wl.optimizer, loss_fn, args, kwargs)
    models = {"eager": model_eager, "compiled": model_compiled}

    def accuracy_view(variant: str, loss: Any) -> Any:
        grads = [p.grad for p in models[variant].parameters() if p.grad is not None]
        return (loss, grads)

    return Prepared(
        eager=eager_step,
        compiled=compiled_step,
        units_per_call=units(built, ctx),
        unit=wl.unit,
        accuracy_view=accuracy_view,
        notes=[f"optimizer={wl.optimizer} (eager)", "compiled: module forward/backward only"],
    )
