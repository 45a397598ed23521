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
import os
from collections.abc import Callable, Mapping
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
    # builds the compiled variant's own state (decode: its static KV cache, prefilled); the
    # worker calls it after the eager first call and before the compile, outside both timers,
    # so up to the eager first call a compiled case's process holds what the eager case's
    # holds (the compiled variant also builds it at its first call if nobody did)
    build_compiled_state: Callable[[], None] | None = None


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


# stateful scenarios whose compiled variant can build its own state after the eager first call
# (`Prepared.build_compiled_state`: decode's second static KV cache), so that up to that call a
# compiled case's process holds what the eager case's does and its eager first call's peak is
# the eager case's own (harness/run/twins.py then derives the eager case from it). Built at
# prepare (the switch at 0, the default until 2026-12-02), the compiled cache is in every
# read of the compiled case's eager peak (H200, 2026-12-02: llama-3.1-8b decode +83.4 MiB,
# gemma-2b +10.1 MiB, one 576-token cache and allocator slack, beside the eager case's own
# process, which drops the unused second cache).
# On by default since the H200 run of 2026-12-02 (results/baselines/h200-2026-12-02b/): the
# compiled decode cases' peaks equal the default path's to the byte, and the first-call peak
# plus the kept output equals the eager case's own-process peak to the byte (docs/RESULTS.md,
# Eager figures); COMPILED_STATE_AFTER_FIRST_CALL_ENV=0 builds both caches at prepare again.
BUILTIN_COMPILED_STATE_AFTER_FIRST_CALL: frozenset[str] = frozenset({"decode"})
COMPILED_STATE_AFTER_FIRST_CALL_ENV = "COMPILEBENCH_DEFER_COMPILED_STATE"


def defer_compiled_state(env: Mapping[str, str] | None = None) -> bool:
    """Whether scenarios that can defer their compiled state do (on unless the env switch
    above is "0"); the runner's plan and the worker's scenario read the same variable, which
    the worker inherits."""
    return (os.environ if env is None else env).get(COMPILED_STATE_AFTER_FIRST_CALL_ENV, "1") != "0"


def compiled_state_after_first_call(name: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether scenario `name`'s compiled variant builds its state after the eager first call
    (see BUILTIN_COMPILED_STATE_AFTER_FIRST_CALL); a stateless scenario answers False."""
    return compiled_holds_state(name) and name in BUILTIN_COMPILED_STATE_AFTER_FIRST_CALL and defer_compiled_state(env)


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
