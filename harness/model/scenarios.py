"""Scenarios: what one "call" of a case is (inference forward, a training step, ...).

A scenario turns a built workload and a compiler config into a `Prepared`: an eager
callable, a compiled callable (None for the eager config) doing the same unit of work, and
how many units (samples, tokens, images) one call processes. The worker times those
callables and never needs to know what is inside them; other suites register their own
scenarios (prefill, decode, denoise, ...) with `@scenario("name")`.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from compiler import CompilerConfig, NotApplicableError
from harness.model.errors import UserError
from harness.model.workloads import Built, Workload, WorkloadContext


class UnknownScenarioError(UserError, ValueError):
    pass


@dataclass
class Prepared:
    eager: Callable[[], Any]
    compiled: Callable[[], Any] | None
    units_per_call: float
    unit: str = "samples"
    # maps (variant, first-call output) to what accuracy compares; identity by default
    accuracy_view: Callable[[str, Any], Any] | None = None
    # a scenario may replace the generic comparison (token equality for greedy decode, ...)
    compare: Callable[[Any, Any, str], dict[str, Any]] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # scenario-specific figures
    notes: list[str] = field(default_factory=list)


ScenarioFn = Callable[[Built, Workload, CompilerConfig, WorkloadContext], Prepared]
SCENARIOS: dict[str, ScenarioFn] = {}
# does the compiled variant hold state of its own (its own model copy and optimizer state, its
# own KV cache, scheduler, pipeline)? Where it does, the eager variant's absolute peak memory
# inside a compiled case's process includes that state, so the runner keeps the separate
# `eager` case (harness/run/twins.py). Declared with @scenario(name, compiled_state=...).
SCENARIO_COMPILED_STATE: dict[str, bool] = {}
# built-in scenarios registered by suite modules without the argument (suites/llm.py,
# diffusion.py, sdxl_pipeline.py), declared here from reading them; the argument wins
BUILTIN_COMPILED_STATE: dict[str, bool] = {
    "prefill": False,  # use_cache=False: both variants read the same weights, no cache
    "decode": True,  # one static KV cache per variant
    "generate": True,  # generate builds a static cache per generation config
    "llm-train": True,  # the train step: model copy + AdamW state per variant
    "unet_step": False,  # one UNet, shared weights
    "vae_decode": False,  # one VAE, shared weights
    "denoise": True,  # a scheduler of its own per loop
    "text2image": True,  # the whole pipeline compiled in place (UNet + VAE), not measured twin-wise
}


def scenario(name: str, *, compiled_state: bool | None = None) -> Callable[[ScenarioFn], ScenarioFn]:
    """Register a scenario. `compiled_state`: whether its compiled variant holds device or host
    state of its own beyond the shared model (True for train steps, KV caches); left out, the
    runner assumes it does (the safe side: the `eager` case keeps a process of its own)."""
    def register(fn: ScenarioFn) -> ScenarioFn:
        SCENARIOS[name] = fn
        if compiled_state is not None:
            SCENARIO_COMPILED_STATE[name] = bool(compiled_state)
        return fn

    return register


def compiled_holds_state(name: str) -> bool:
    """Whether scenario `name`'s compiled variant owns state the eager variant does not share;
    an undeclared (user) scenario counts as stateful."""
    if name in SCENARIO_COMPILED_STATE:
        return SCENARIO_COMPILED_STATE[name]
    return BUILTIN_COMPILED_STATE.get(name, True)


# stateful scenarios that build every variant's state in every process before the first call,
# the eager case's process included (decode: both static KV caches allocated and prefilled at
# prepare, whatever the compiler), so up to the compile a compiled case's process holds what the
# eager case's does: its eager first call's peak is the eager case's own (harness/run/twins.py
# derives the eager case from it). A later read in that process also holds the compile's residue
# (H200, 2026-12-01: llama-3.1-8b decode +83.6 MiB, gemma-2b +10.6 MiB in the eager peak).
BUILTIN_STATE_IN_EVERY_PROCESS: frozenset[str] = frozenset({"decode"})


def state_in_every_process(name: str) -> bool:
    """Whether scenario `name` builds its compiled variant's state in every process before the
    first call (see BUILTIN_STATE_IN_EVERY_PROCESS); a stateless scenario answers False."""
    return compiled_holds_state(name) and name in BUILTIN_STATE_IN_EVERY_PROCESS


def compiled_state_declared(name: str) -> bool:
    """Whether `name` declares its compiled state (a test checks every built-in one does)."""
    return name in SCENARIO_COMPILED_STATE or name in BUILTIN_COMPILED_STATE


# scenario modules of the harness itself, imported on first lookup of a name they define
BUILTIN_SCENARIO_MODULES = ("harness.model.training",)


def get_scenario(name: str) -> ScenarioFn:
    if name not in SCENARIOS:
        import importlib

        for module in BUILTIN_SCENARIO_MODULES:
            importlib.import_module(module)
    try:
        return SCENARIOS[name]
    except KeyError:
        close = difflib.get_close_matches(name, SCENARIOS, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownScenarioError(f"unknown scenario {name!r}{hint}; known: {', '.join(sorted(SCENARIOS))}") from None


def units(built: Built, ctx: WorkloadContext) -> float:
    return float(built.units_per_call if built.units_per_call is not None else ctx.batch_size)


@scenario("forward", compiled_state=False)
def forward(built: Built, wl: Workload, compiler: CompilerConfig, ctx: WorkloadContext) -> Prepared:
    """Inference forward under no_grad. The compiled module shares the eager module's
    parameters, so both variants read the same weights."""
    import torch

    model = built.model
    if hasattr(model, "eval"):
        model.eval()
    args, kwargs = built.args, built.kwargs

    def call(m: Callable) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return m(*args, **kwargs)

        return run

    compiled = None if compiler.is_eager else call(compiler.compile(model))
    eager = call(model)
    if compiler.inplace or compiler.regional:
        # both compile the very module the eager variant calls: without this the "eager"
        # first call would compile it (and every eager round would run compiled code)
        eager = force_eager(eager)
    return Prepared(eager=eager, compiled=compiled, units_per_call=units(built, ctx), unit=wl.unit)


def force_eager(fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` with Dynamo off (torch.compiler.set_stance("force_eager"); the worker checks the
    capability before any scenario runs: CompilerConfig.required_features)."""
    import torch

    def run() -> Any:
        with torch.compiler.set_stance("force_eager"):
            return fn()

    return run


def default_loss(output: Any, keep_dtype: bool = False) -> Any:
    """A scalar with a gradient through every output element: the model's own loss when it
    returns one (transformers with labels), else the mean square of the first tensor (in
    float32 unless `keep_dtype`: the float64 accuracy reference must not be rounded)."""
    loss = getattr(output, "loss", None)
    if loss is not None:
        return loss
    from harness.model.accuracy import flatten_tensors

    tensors = flatten_tensors(output)
    if not tensors:
        raise TypeError("train scenario: the model returned no tensor to build a loss from; pass loss= to @workload")
    first = tensors[0] if keep_dtype else tensors[0].float()
    return first.pow(2).mean()


def make_optimizer(name: str, params: Any) -> Any:
    import torch

    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    raise ValueError(f"unknown optimizer {name!r}; use 'adamw' or 'sgd'")


def make_train_step(model: Any, forward: Callable, optimizer: str, loss_fn: Callable, args: tuple,
                    kwargs: dict) -> Callable[[], Any]:
    """zero_grad, forward, loss, backward, optimizer step: the function users compile.
    `forward` is the model itself or its compiled wrapper (train_module_only)."""
    opt = make_optimizer(optimizer, model.parameters())

    def train_step() -> Any:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(*args, **kwargs))
        loss.backward()
        opt.step()
        return loss.detach()

    return train_step


def gradients_view(models: dict[str, Any]) -> Callable[[str, Any], Any]:
    """Accuracy of a training step: the loss plus every gradient of the first step, so
    backward is checked, not only forward."""

    def view(variant: str, loss: Any) -> Any:
        return (loss, [p.grad for p in models[variant].parameters() if p.grad is not None])

    return view


def require_parameters(model: Any, scenario_name: str, workload_name: str) -> None:
    """A training scenario on a module without parameters has nothing to train (the optimizer
    would raise "empty parameter list"): the case is skipped with the reason instead."""
    params = getattr(model, "parameters", None)
    if params is None or next(iter(params()), None) is None:
        raise NotApplicableError(f"scenario {scenario_name!r}: workload {workload_name!r} has no parameters, so there is "
                                 "nothing to train; run scenario forward, or declare scenarios=('forward',) in @workload")


@scenario("train", compiled_state=True)
def train(built: Built, wl: Workload, compiler: CompilerConfig, ctx: WorkloadContext) -> Prepared:
    """One training step compiled as a single function, as users compile `train_step`.
    Eager and compiled each own a copy of the model and optimizer from the same initial
    state, so their first steps compare."""
    require_parameters(built.model, "train", wl.name)
    model_eager = built.model
    model_eager.train()
    model_compiled = copy.deepcopy(model_eager)
    loss_fn = wl.loss or default_loss
    args, kwargs = built.args, built.kwargs
    eager_step = make_train_step(model_eager, model_eager, wl.optimizer, loss_fn, args, kwargs)
    compiled_step = None
    if not compiler.is_eager:
        step = make_train_step(model_compiled, model_compiled, wl.optimizer, loss_fn, args, kwargs)
        compiled_step = compiler.compile(step)
    return Prepared(
        eager=eager_step,
        compiled=compiled_step,
        units_per_call=units(built, ctx),
        unit=wl.unit,
        accuracy_view=gradients_view({"eager": model_eager, "compiled": model_compiled}),
        notes=[f"optimizer={wl.optimizer}"],
    )
