"""Training scenario variants beyond `train` (the whole `train_step` compiled).

`train_module_only`: only the module is compiled (`compiler.compile(model)`); zero_grad,
loss, backward and the optimizer step stay eager. It is what users do when compiling the
optimizer step graph-breaks or recompiles, and the comparison with `train` shows what
compiling the optimizer buys.
"""

from __future__ import annotations

import copy

from compiler import CompilerConfig
from harness.model.scenarios import (
    Prepared,
    default_loss,
    gradients_view,
    make_train_step,
    require_parameters,
    scenario,
    units,
)
from harness.model.workloads import Built, Workload, WorkloadContext


@scenario("train_module_only", compiled_state=True)
def train_module_only(built: Built, wl: Workload, compiler: CompilerConfig, ctx: WorkloadContext) -> Prepared:
    """A training step whose forward (and its backward) is compiled; the optimizer is eager.
    Eager and compiled own copies of the model from the same initial state."""
    require_parameters(built.model, "train_module_only", wl.name)
    model_eager = built.model
    model_eager.train()
    model_compiled = copy.deepcopy(model_eager)
    loss_fn = wl.loss or default_loss
    args, kwargs = built.args, built.kwargs
    eager_step = make_train_step(model_eager, model_eager, wl.optimizer, loss_fn, args, kwargs)
    compiled_step = None
    if not compiler.is_eager:
        forward = compiler.compile(model_compiled)
        compiled_step = make_train_step(model_compiled, forward, wl.optimizer, loss_fn, args, kwargs)
    return Prepared(
        eager=eager_step,
        compiled=compiled_step,
        units_per_call=units(built, ctx),
        unit=wl.unit,
        accuracy_view=gradients_view({"eager": model_eager, "compiled": model_compiled}),
        notes=[f"optimizer={wl.optimizer} (eager)", "compiled: module forward/backward only"],
    )
