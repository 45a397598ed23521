"""Honest effects: what a compiler mode actually did on this device, from Inductor's own
counters, so a record never silently reports a mode that had no effect.

- `reduce-overhead` / `max-autotune` on CPU: CUDA graphs are skipped (`cudagraph_skips`;
  the worker already notes those).
- `max-autotune` on CPU: Inductor autotunes GEMM templates only with `freezing=True`;
  without it `select_algorithm_autotune` stays 0 and the mode compiles like the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .configs import CompilerConfig

# select_algorithm_autotune counts benchmarking rounds (0 when the choice came from the
# autotune cache); cpp_templated_kernel_counter counts CPU GEMM template kernels emitted
AUTOTUNE_COUNTERS = ("select_algorithm_autotune", "select_algorithm_precompile", "select_algorithm_num_precompiles",
                     "cpp_templated_kernel_counter")


def autotune_counts(inductor_counters: Mapping[str, int]) -> dict[str, int]:
    return {name: int(inductor_counters.get(name, 0)) for name in AUTOTUNE_COUNTERS}


def describe_effects(config: CompilerConfig, device_type: str, inductor_counters: Mapping[str, int],
                     model: Any = None) -> tuple[dict[str, Any], list[str]]:
    """(metrics, notes) for a compiled case, from this process's Inductor counters."""
    metrics: dict[str, Any] = {}
    notes: list[str] = []
    if config.is_eager:
        return metrics, notes
    counts = autotune_counts(inductor_counters)
    metrics["autotune"] = counts
    if config.mode in ("max-autotune", "max-autotune-no-cudagraphs") and not any(counts.values()):
        why = ("on CPU Inductor autotunes GEMM templates only with options freezing=True "
               "(see inductor-max-autotune-freezing)" if device_type == "cpu" and not config.options_dict().get("freezing")
               else "no GEMM/conv in the graphs qualified for a template")
        notes.append(f"mode={config.mode}: GEMM autotuning did not happen (no autotune round, no template kernel): {why}")
    regions = getattr(model, "_compilebench_regions", None)
    if config.regional and regions:
        metrics["regions"] = regions
        notes.append(f"regional: compiled {len(regions['blocks'])} block(s) chosen by {regions['source']}")
    if config.inplace:
        notes.append("compiled in place with model.compile()")
    return metrics, notes
