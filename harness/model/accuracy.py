"""Accuracy of compiled against eager outputs, with dtype-aware tolerances.

Outputs are flattened (tensors inside tuples, lists, dicts, dataclasses and transformers'
ModelOutput). fp32/fp64 use allclose-style tolerances; fp16/bf16 add a cosine-similarity
test because elementwise error in half precision grows with reduction length. NaN or Inf
that eager does not produce never passes, and NaN never passes at all.
"""

from __future__ import annotations

import dataclasses
from typing import Any

TOLERANCES = {
    # dtype name: (rtol, atol, min cosine similarity or None)
    "float64": (1e-7, 1e-7, None),
    "float32": (1e-3, 1e-4, None),
    "bfloat16": (5e-2, 5e-2, 0.99),
    "float16": (1e-2, 1e-2, 0.99),
}


def flatten_tensors(obj: Any) -> list:
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict) or hasattr(obj, "to_tuple"):
        items = obj.to_tuple() if hasattr(obj, "to_tuple") else tuple(obj.values())
        return [t for v in items for t in flatten_tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in flatten_tensors(v)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [t for f in dataclasses.fields(obj) for t in flatten_tensors(getattr(obj, f.name))]
    return []  # non-tensor leaves (ints, strings, cache objects) are not compared


def compare_outputs(reference: Any, result: Any, dtype_name: str) -> dict[str, Any]:
    """Return {'status': 'pass'|'fail', 'max_abs_err', 'max_rel_err', 'cosine', 'reason'}."""
    import torch

    ref = flatten_tensors(reference)
    res = flatten_tensors(result)
    if len(ref) != len(res):
        return {"status": "fail", "reason": f"output count differs: eager {len(ref)}, compiled {len(res)}"}
    if not ref:
        return {"status": "n/a", "reason": "no tensor outputs to compare"}
    rtol, atol, min_cos = TOLERANCES.get(dtype_name, TOLERANCES["float32"])
    worst_abs = 0.0
    worst_rel = 0.0
    worst_cos = 1.0
    for i, (a, b) in enumerate(zip(ref, res, strict=True)):
        if a.shape != b.shape:
            return {"status": "fail", "reason": f"output {i}: shape {tuple(b.shape)} != eager {tuple(a.shape)}"}
        if not (a.is_floating_point() or a.is_complex()):
            if not torch.equal(a, b.to(a.device)):
                return {"status": "fail", "reason": f"output {i}: integer/bool values differ"}
            continue
        # compare where the tensors live: copying a large model's gradients to the host
        # costs more than the comparison (seconds for an 8B-parameter step)
        a64 = a.detach().to(torch.float64)
        b64 = b.detach().to(a.device, torch.float64)
        if torch.isnan(b64).any() or torch.isnan(a64).any():
            return {"status": "fail", "reason": f"output {i}: NaN in {'compiled' if torch.isnan(b64).any() else 'eager'} output"}
        if (torch.isinf(b64) != torch.isinf(a64)).any():
            return {"status": "fail", "reason": f"output {i}: Inf where eager has none (or the reverse)"}
        finite = torch.isfinite(a64)
        diff = (a64 - b64).abs()[finite]
        if diff.numel():
            worst_abs = max(worst_abs, float(diff.max()))
            rel = diff / a64.abs()[finite].clamp_min(atol)
            worst_rel = max(worst_rel, float(rel.max()))
        close = torch.allclose(a64[finite], b64[finite], rtol=rtol, atol=atol)
        if min_cos is not None and a64.numel() > 1:
            cos = float(torch.nn.functional.cosine_similarity(a64.flatten(), b64.flatten(), dim=0))
            worst_cos = min(worst_cos, cos)
            if cos < min_cos:
                return _fail(i, f"cosine similarity {cos:.5f} < {min_cos}", worst_abs, worst_rel, worst_cos)
            continue  # half precision: cosine decides, elementwise error is reported only
        if not close:
            return _fail(i, f"not within rtol={rtol}, atol={atol}", worst_abs, worst_rel, worst_cos)
    return {"status": "pass", "max_abs_err": worst_abs, "max_rel_err": worst_rel, "cosine": worst_cos, "reason": ""}


def _fail(i: int, why: str, abs_err: float, rel_err: float, cos: float) -> dict[str, Any]:
    return {"status": "fail", "reason": f"output {i}: {why}", "max_abs_err": abs_err, "max_rel_err": rel_err, "cosine": cos}
