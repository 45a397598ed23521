"""Building a random-weight model directly on its device and in its dtype, and describing a
built model so that two ways of building it can be compared.

Why a device context and not `meta` + `to_empty()` + re-init: under `with torch.device(d)`
every factory call in the library's `__init__` allocates on `d`, so the library's own init
kernels run there once, and buffers computed in `__init__` (rotary `inv_freq`, Gemma's
`embed_scale`, GPT-J's sinusoidal table) are computed by the same code as on a CPU. After
`to_empty()` those non-persistent buffers hold uninitialised memory, and re-initialising
needs a per-library API (transformers' `_init_weights`, every torch module's
`reset_parameters`) that is version-dependent and easy to get partly wrong.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

# parameters this small are skipped by the spread comparison: their std is too noisy to compare
SPREAD_MIN_NUMEL = 4096
# two random draws of the same distribution: std within this factor of each other
SPREAD_TOLERANCE = 0.05


@contextmanager
def build_on(device: Any, dtype: Any = None) -> Iterator[None]:
    """Factory calls allocate on `device`; with a floating `dtype`, float tensors created
    without an explicit dtype are created in it (no float32 copy first, then a cast)."""
    import torch

    previous = torch.get_default_dtype()
    with torch.device(device):
        if dtype is not None and dtype.is_floating_point:
            torch.set_default_dtype(dtype)
        try:
            yield
        finally:
            torch.set_default_dtype(previous)


def tensor_summary(model: Any, *, spread: bool = True) -> dict[str, Any]:
    """What a build must get right, as plain data: every state_dict entry and every buffer
    (non-persistent ones too) with its shape, dtype and device; the parameter count; each
    buffer's values (buffers are computed, not drawn: two builds must agree exactly) and
    each parameter's mean and std (drawn: two builds must agree in distribution), unless
    `spread=False` (weights left uninitialised). A meta build has no values: layout only."""
    import torch

    def layout(t: Any) -> dict[str, Any]:
        return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "device": t.device.type}

    state = {name: layout(t) for name, t in model.state_dict().items()}
    buffers: dict[str, Any] = {}
    for name, buf in model.named_buffers():
        entry = layout(buf)
        if buf.device.type != "meta":
            entry["values"] = buf.detach().to("cpu", torch.float64 if buf.is_floating_point() else buf.dtype).flatten().tolist()
        buffers[name] = entry
    stats: dict[str, Any] = {}
    if spread:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if param.device.type == "meta" or param.numel() < SPREAD_MIN_NUMEL:
                    continue
                flat = param.detach().float()
                stats[name] = {"mean": float(flat.mean()), "std": float(flat.std())}
    return {"param_count": int(sum(p.numel() for p in model.parameters())), "state": state,
            "buffers": buffers, "spread": stats}


def compare_summaries(reference: Mapping[str, Any], candidate: Mapping[str, Any], *,
                      same_device: bool = False) -> list[str]:
    """Differences between two builds' `tensor_summary`, one line each (empty: the same
    build). Devices are compared only with `same_device` (a CPU reference against a GPU
    build differs there by design); buffer values only where both sides have them; a
    parameter's std must agree within SPREAD_TOLERANCE when both sides were initialised."""
    problems: list[str] = []
    if reference["param_count"] != candidate["param_count"]:
        problems.append(f"parameter count {reference['param_count']} != {candidate['param_count']}")
    for kind in ("state", "buffers"):
        ref, cand = reference[kind], candidate[kind]
        if set(ref) != set(cand):
            missing, extra = sorted(set(ref) - set(cand)), sorted(set(cand) - set(ref))
            problems.append(f"{kind} keys differ: missing {missing[:5]}, extra {extra[:5]}")
        for name in sorted(set(ref) & set(cand)):
            fields = ("shape", "dtype", "device") if same_device else ("shape", "dtype")
            for field in fields:
                if ref[name][field] != cand[name][field]:
                    problems.append(f"{kind} {name}: {field} {ref[name][field]} != {cand[name][field]}")
            if kind == "buffers" and "values" in ref[name] and "values" in cand[name]:
                a, b = ref[name]["values"], cand[name]["values"]
                if a != b:
                    diff = max((abs(x - y) for x, y in zip(a, b, strict=False)), default=float("nan"))
                    problems.append(f"buffer {name}: values differ (max abs diff {diff:.3g})")
    for name in sorted(set(reference["spread"]) & set(candidate["spread"])):
        ref_std, cand_std = reference["spread"][name]["std"], candidate["spread"][name]["std"]
        if ref_std == cand_std:
            continue
        finite = math.isfinite(ref_std) and math.isfinite(cand_std)
        if not finite or ref_std == 0.0 or cand_std == 0.0 or abs(cand_std / ref_std - 1.0) > SPREAD_TOLERANCE:
            problems.append(f"parameter {name}: std {cand_std:.4g} vs {ref_std:.4g} (not the same init)")
    return problems


def spread_ratio_range(reference: Mapping[str, Any], candidate: Mapping[str, Any]) -> tuple[float, float] | None:
    """(min, max) over the parameters both sides describe of candidate std / reference std;
    None when there is nothing to compare (or a reference std is zero)."""
    ratios = [candidate["spread"][n]["std"] / reference["spread"][n]["std"]
              for n in set(reference["spread"]) & set(candidate["spread"]) if reference["spread"][n]["std"]]
    return (min(ratios), max(ratios)) if ratios else None
