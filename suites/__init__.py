"""Workloads and named suites.

`WORKLOAD_MODULES` are imported to fill the workload registry (in the parent to plan, in
each worker to build). A `Suite` is a named list of `SuiteEntry`s, each a small matrix
(workloads x scenarios x compilers x dtypes x sizes) with defaults a user can override
from the command line.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any

from harness.model.errors import UserError

WORKLOAD_MODULES: list[str] = ["suites.mlp", "suites.diffusion", "suites.llm", "harness.model.training", "suites.gpu", "suites.sdxl_pipeline", "suites.hf",
                               "suites.timm_models", "suites.transformers_zoo", "suites.diffusers_zoo", "suites.breadth_ci"]  # harness.model.training: train_module_only scenario; suites.gpu: the `gpu` suite


# what every build of a transformers (diffusers) workload imports: a workload module's
# PRELOAD_MODULES, which a CPU case's fork server may import ahead of it (harness/run/forkserver.py
# workload_preload; tests/test_forkserver_memory.py builds one workload per module to hold it)
TRANSFORMERS_BUILD = ("transformers", "transformers.modeling_utils")


def is_drop_probability(key: str, value: Any) -> bool:
    """Whether config key `key` holds a probability of dropping something at random in
    training: dropout, `*_pdrop`, `drop_rate`, stochastic depth (`drop_path_rate`), and layer
    drop (`layerdrop`, `encoder_layerdrop`, `decoder_layerdrop`: M2M100 has 0.05, which skips
    whole layers at random in a train step, so graphs, grads and recompiles changed call to
    call). The hf and transformers-zoo suites set each to 0 before the build, so a train step
    is the same computation in eager and compiled; PyTorch's runner sets every float `*drop*`
    attribute to 1e-30 after it, which modules that copied the value at init never see."""
    return isinstance(value, float) and ("dropout" in key or key.endswith("pdrop") or key.endswith("drop_rate")
                                         or "drop_path" in key or "layerdrop" in key)
DIFFUSERS_BUILD = (*TRANSFORMERS_BUILD, "diffusers", "diffusers.models.modeling_utils")


class UnknownSuiteError(UserError, ValueError):
    pass


@dataclass(frozen=True)
class SuiteEntry:
    workloads: tuple[str, ...]
    scenarios: tuple[str, ...] | None = None  # None: every scenario the workload declares
    compilers: tuple[str, ...] = ("inductor",)
    devices: tuple[str, ...] = ("cpu",)
    dtypes: tuple[str, ...] = ("float32",)
    sizes: tuple[str, ...] = ("tiny",)
    batch_sizes: tuple[int, ...] | None = None  # None: the workload's default
    options: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    entries: tuple[SuiteEntry, ...] = field(default_factory=tuple)
    policy: tuple[tuple[str, Any], ...] = ()  # StopPolicy overrides for this suite
    timeout_s: float = 600.0
    max_memory_gb: float | None = None  # default --max-memory-gb of its CPU cases (None: no cap)
    # accuracy rule of its cases: None, each workload's declared rule (hf/timm: dynamo, as HUD
    # judges; others strict); "strict": every case strict (harness/model/accuracy.py)
    accuracy: str | None = None
    # workers alive at once, compiles side by side, measurements alone (run --compile-overlap)
    compile_overlap: int = 1


SUITES: dict[str, Suite] = {}


def register_suite(suite: Suite) -> Suite:
    if suite.accuracy is not None:
        from harness.model.accuracy import declare_suite_accuracy

        declare_suite_accuracy(suite.name, suite.accuracy)
    SUITES[suite.name] = suite
    return suite


def get_suite(name: str) -> Suite:
    try:
        return SUITES[name]
    except KeyError:
        close = difflib.get_close_matches(name, SUITES, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownSuiteError(f"unknown suite {name!r}{hint}; known suites: {', '.join(sorted(SUITES))}") from None


def extend_suite(name: str, *entries: SuiteEntry) -> None:
    """Other suite modules join a named suite (e.g. the LLM tiny models join `smoke`)."""
    suite = SUITES[name]
    SUITES[name] = dataclasses.replace(suite, entries=suite.entries + tuple(entries))


register_suite(
    Suite(
        "smoke",
        "tiny models on CPU, eager vs inductor, forward and train step: a few minutes at most",
        entries=(SuiteEntry(workloads=("mlp-classic", "mlp-deep"), scenarios=("forward", "train")),),
        policy=(("min_time_s", 0.3), ("min_samples", 10), ("max_samples", 500), ("warmup", 3), ("max_time_s", 5.0)),
        timeout_s=300.0,
    )
)
register_suite(
    Suite(
        "cpu",
        "the MLPs on CPU at full size, eager vs inductor",
        entries=(SuiteEntry(workloads=("mlp-classic", "mlp-deep"), sizes=("tiny", "full")),),
    )
)
