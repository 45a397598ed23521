"""Vendor peak figures for common accelerators, matched by the device name torch reports.

Why: a throughput number alone does not say whether a compiled model is near the hardware
limit. With the part's peak FLOP/s and memory bandwidth a report can show achieved TFLOP/s
and model-FLOP / bandwidth utilisation. Figures are the vendors' published *dense* peaks
(no structured sparsity; tensor/matrix-core rates with FP32 accumulate, which is what
PyTorch uses), per device as torch sees it. `approximate=True` marks figures that are not
from a single vendor datasheet (AWS-only parts, Apple GPUs, per-die splits); treat those as
rough. Unknown parts return None: a missing peak is reported as unknown, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

TERA = 1e12


@dataclass(frozen=True)
class PeakSpec:
    part: str
    pattern: str  # regex searched in the lower-cased device name
    bf16_tflops: float | None
    fp16_tflops: float | None
    fp32_tflops: float | None  # non-tensor (vector) FP32; TF32 is not FP32
    memory_bandwidth_gb_s: float
    source: str
    approximate: bool = False
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("pattern")
        for key in ("bf16", "fp16", "fp32"):
            value = data.pop(f"{key}_tflops")
            data[f"{key}_flops"] = value * TERA if value is not None else None
        data["memory_bandwidth_bytes_s"] = data.pop("memory_bandwidth_gb_s") * 1e9
        return data


# Order matters: the first matching pattern wins, so specific variants come before families.
PEAK_SPECS: tuple[PeakSpec, ...] = (
    PeakSpec("NVIDIA H200 NVL", r"h200.*nvl", 835.5, 835.5, 60.0, 4800, "NVIDIA H200 datasheet"),
    PeakSpec("NVIDIA H200 SXM", r"\bh200\b", 989.4, 989.4, 66.9, 4800, "NVIDIA H200 datasheet"),
    PeakSpec("NVIDIA H100 NVL", r"h100.*nvl", 835.5, 835.5, 60.0, 3900, "NVIDIA H100 datasheet"),
    PeakSpec("NVIDIA H100 PCIe", r"h100.*pcie", 756.5, 756.5, 51.2, 2000, "NVIDIA H100 datasheet"),
    PeakSpec("NVIDIA H100 SXM", r"\bh100\b", 989.4, 989.4, 66.9, 3350, "NVIDIA H100 datasheet"),
    PeakSpec("NVIDIA A100 80GB PCIe", r"a100.*80\s*gb.*pcie|a100.*pcie.*80\s*gb", 312, 312, 19.5, 1935,
             "NVIDIA A100 datasheet"),
    PeakSpec("NVIDIA A100 80GB SXM", r"a100.*80\s*gb", 312, 312, 19.5, 2039, "NVIDIA A100 datasheet"),
    PeakSpec("NVIDIA A100 40GB", r"\ba100\b", 312, 312, 19.5, 1555, "NVIDIA A100 datasheet"),
    PeakSpec("NVIDIA L4", r"\bl4\b", 121, 121, 30.3, 300, "NVIDIA L4 datasheet"),
    PeakSpec("NVIDIA A10G", r"\ba10g\b", 70, 70, 35.0, 600, "AWS G5 / third-party spec comparisons", approximate=True,
             note="AWS-specific A10 variant; no NVIDIA datasheet"),
    PeakSpec("NVIDIA A10", r"\ba10\b", 125, 125, 31.2, 600, "NVIDIA A10 datasheet"),
    PeakSpec("NVIDIA GeForce RTX 4090", r"rtx\s*4090", 165.2, 165.2, 82.6, 1008, "NVIDIA Ada architecture whitepaper",
             note="tensor rates with FP32 accumulate (FP16 accumulate is 2x)"),
    PeakSpec("AMD Instinct MI300X", r"mi300x", 1307.4, 1307.4, 163.4, 5300, "AMD MI300X datasheet"),
    PeakSpec("AMD Instinct MI250X (one GCD)", r"mi250", 191.5, 191.5, 23.95, 1638.4, "AMD MI250X datasheet, halved",
             approximate=True, note="torch sees each of the two GCDs as a device; figures are half the package"),
    PeakSpec("Intel Data Center GPU Max 1550", r"max\s*1550", 838.9, 838.9, 52.4, 3276.8, "Intel ARK / Max Series overview",
             approximate=True, note="whole two-stack package; with ZE_FLAT_DEVICE_HIERARCHY=FLAT each stack is a device (half)"),
    # Apple GPUs: no tensor cores; FP16 runs at the FP32 rate. Rough, for the full-GPU configs.
    PeakSpec("Apple M1 Ultra", r"m1\s*ultra", 21.0, 21.0, 21.0, 800, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M1 Max", r"m1\s*max", 10.4, 10.4, 10.4, 400, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M1 Pro", r"m1\s*pro", 5.2, 5.2, 5.2, 200, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M1", r"\bm1\b", 2.6, 2.6, 2.6, 68.25, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M2 Ultra", r"m2\s*ultra", 27.2, 27.2, 27.2, 800, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M2 Max", r"m2\s*max", 13.6, 13.6, 13.6, 400, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M2 Pro", r"m2\s*pro", 6.8, 6.8, 6.8, 200, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M2", r"\bm2\b", 3.6, 3.6, 3.6, 100, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M3 Max", r"m3\s*max", 16.4, 16.4, 16.4, 400, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M3 Pro", r"m3\s*pro", 7.4, 7.4, 7.4, 150, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M3", r"\bm3\b", 4.1, 4.1, 4.1, 100, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M4 Max", r"m4\s*max", 18.4, 18.4, 18.4, 546, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M4 Pro", r"m4\s*pro", 9.2, 9.2, 9.2, 273, "Apple specs (GPU ALU peak)", approximate=True),
    PeakSpec("Apple M4", r"\bm4\b", 4.3, 4.3, 4.3, 120, "Apple specs (GPU ALU peak)", approximate=True),
)

_DTYPE_KEYS = {"bfloat16": "bf16_flops", "float16": "fp16_flops", "float32": "fp32_flops"}


def match_peak_spec(device_name: str | None) -> PeakSpec | None:
    """The table entry for a device name such as 'NVIDIA H200' or 'NVIDIA A100-SXM4-80GB'."""
    if not device_name:
        return None
    name = device_name.lower().replace("-", " ")
    for spec in PEAK_SPECS:
        if re.search(spec.pattern, name):
            return spec
    return None


def peak_flops_for(specs: dict[str, Any] | None, dtype: str) -> float | None:
    """Peak FLOP/s of a `peak_specs()` dict for a dtype name ('bfloat16', ...), or None."""
    if not specs or dtype not in _DTYPE_KEYS:
        return None
    return specs.get(_DTYPE_KEYS[dtype])


def utilisation(specs: dict[str, Any] | None, dtype: str, flops_per_s: float | None = None,
                bytes_per_s: float | None = None) -> dict[str, float | None]:
    """Achieved FLOP/s and bytes/s as fractions of the part's peak (None where unknown)."""
    peak_flops = peak_flops_for(specs, dtype)
    peak_bw = (specs or {}).get("memory_bandwidth_bytes_s")
    return {
        "achieved_tflops": flops_per_s / TERA if flops_per_s is not None else None,
        "flops_utilisation": flops_per_s / peak_flops if flops_per_s is not None and peak_flops else None,
        "bandwidth_utilisation": bytes_per_s / peak_bw if bytes_per_s is not None and peak_bw else None,
    }
