"""Device layer: one small class per device type.

Each device knows whether it is present (and why not), how to synchronise, how to time
work (host clock or device events), how to reset and read its memory peak, and how to
describe itself for the run's environment. The worker only talks to this interface, so a
new backend is a new subclass plus a line in `DEVICE_TYPES`.
"""

from __future__ import annotations

import difflib
import os
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class UnknownDeviceError(ValueError):
    pass


@dataclass
class Availability:
    available: bool
    reason: str = ""


class Device:
    """Base: the host CPU's view. Subclasses override what their backend provides."""

    type: str = "cpu"
    vendor: str = ""
    has_events: bool = False

    def __init__(self, index: int = 0):
        self.index = index

    # ---- presence -------------------------------------------------------------------
    def availability(self) -> Availability:
        return Availability(True)

    @property
    def torch_name(self) -> str:
        return self.type if self.type == "cpu" else f"{self.type}:{self.index}"

    # ---- timing ---------------------------------------------------------------------
    def synchronize(self) -> None:
        return None

    def event_pair(self) -> tuple[Any, Any] | None:
        """Start/end events for device-side timing, or None to use the host clock."""
        return None

    # ---- memory ---------------------------------------------------------------------
    def reset_peak_memory(self) -> int:
        """Reset the peak counter; return the bytes in use right after the reset."""
        return cpu_reset_peak_rss()

    def peak_memory(self) -> int | None:
        return cpu_peak_rss()

    @property
    def memory_kind(self) -> str:
        return "process_rss"

    # ---- description ----------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return {"type": "cpu", "name": cpu_model_name(), "count": os.cpu_count(), "vendor": cpu_vendor()}


class CpuDevice(Device):
    type = "cpu"


class CudaDevice(Device):
    """NVIDIA CUDA, and AMD ROCm (HIP builds expose the same `torch.cuda` API)."""

    type = "cuda"
    has_events = True

    @property
    def vendor(self) -> str:  # type: ignore[override]
        import torch

        return "AMD" if getattr(torch.version, "hip", None) else "NVIDIA"

    def availability(self) -> Availability:
        import torch

        if not torch.cuda.is_available():
            build = "a CPU-only torch build" if torch.version.cuda is None and not torch.version.hip else "no visible GPU"
            return Availability(False, f"cuda not available: {build} (torch {torch.__version__})")
        if self.index >= torch.cuda.device_count():
            return Availability(False, f"cuda:{self.index} not present ({torch.cuda.device_count()} GPU(s) visible)")
        return Availability(True)

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self.index)

    def event_pair(self):
        import torch

        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def reset_peak_memory(self) -> int:
        import torch

        torch.cuda.synchronize(self.index)
        torch.cuda.reset_peak_memory_stats(self.index)
        return int(torch.cuda.memory_allocated(self.index))

    def peak_memory(self) -> int | None:
        import torch

        torch.cuda.synchronize(self.index)
        return int(torch.cuda.max_memory_allocated(self.index))

    @property
    def memory_kind(self) -> str:
        return "device_allocator"

    def describe(self) -> dict[str, Any]:
        import torch

        props = torch.cuda.get_device_properties(self.index)
        info: dict[str, Any] = {
            "type": "cuda",
            "vendor": self.vendor,
            "name": props.name,
            "count": torch.cuda.device_count(),
            "total_memory_bytes": int(props.total_memory),
            "multiprocessors": props.multi_processor_count,
            "capability": f"{props.major}.{props.minor}",
            "cuda_runtime": torch.version.cuda,
            "hip_runtime": getattr(torch.version, "hip", None),
            "driver": _nvidia_driver_version(),
        }
        return info


def _nvidia_driver_version() -> str | None:
    try:
        with open("/proc/driver/nvidia/version") as fh:
            first = fh.readline()
        parts = first.split("Kernel Module")
        return parts[1].split()[0] if len(parts) > 1 else first.strip()
    except OSError:
        return None


DEVICE_TYPES: dict[str, Callable[[int], Device]] = {"cpu": CpuDevice, "cuda": CudaDevice}


def parse_device(spec: str) -> Device:
    """'cpu', 'cuda', 'cuda:1' -> Device. Unknown types are a clear error."""
    kind, _, idx = spec.partition(":")
    if kind not in DEVICE_TYPES:
        close = difflib.get_close_matches(kind, DEVICE_TYPES, n=2)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownDeviceError(f"unknown device {spec!r}{hint}; known device types: {', '.join(DEVICE_TYPES)}")
    if idx and not idx.isdigit():
        raise UnknownDeviceError(f"device {spec!r}: the index after ':' must be a number, e.g. cuda:0")
    return DEVICE_TYPES[kind](int(idx or 0))


def present_devices() -> list[str]:
    out = []
    for name, cls in DEVICE_TYPES.items():
        try:
            if cls(0).availability().available:
                out.append(name)
        except Exception:  # a half-installed backend must not break `list`
            continue
    return out


def auto_device() -> str:
    """The best present device: accelerators first, CPU last."""
    present = present_devices()
    for name in [n for n in DEVICE_TYPES if n != "cpu"] + ["cpu"]:
        if name in present:
            return name
    return "cpu"


# ---- CPU memory: Linux VmHWM with a reset, ru_maxrss elsewhere -------------------------

def _status_kb(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def cpu_reset_peak_rss() -> int:
    """Reset the process's RSS high-water mark (Linux: write '5' to clear_refs) and return
    the current RSS. Where the reset is impossible the peak stays monotonic; the record's
    delta then over-states, which `peak_memory_reset_ok` says."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass
    return _status_kb("VmRSS") or 0


def cpu_peak_rss() -> int | None:
    hwm = _status_kb("VmHWM")
    if hwm is not None:
        return hwm
    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux KiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def cpu_vendor() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""
