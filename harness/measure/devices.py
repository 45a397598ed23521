"""Device layer: one small class per device type.

Each device knows whether it is present (and why not), how to synchronise, how to time
work (host clock or device events), how to reset and read its memory peak, and how to
describe itself for the run's environment. The worker only talks to this interface, so a
new backend is a new subclass plus a line in `DEVICE_TYPES`.
"""

from __future__ import annotations

import difflib
import os
import re
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.model.errors import UserError


class UnknownDeviceError(UserError, ValueError):
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

    def count(self) -> int:
        return 1

    def name(self) -> str:
        return cpu_model_name()

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

    def peak_reset_refusal(self) -> str | None:
        """Why `reset_peak_memory` does not reset the process's RSS high-water mark here
        (None: it does, checked now)."""
        return cpu_peak_reset_refusal()

    @property
    def memory_kind(self) -> str:
        return "process_rss"

    # ---- description ----------------------------------------------------------------
    def peak_specs(self) -> dict[str, Any] | None:
        """Vendor peak bf16/fp16/fp32 FLOP/s and memory bandwidth of this part (see
        `device_specs`), or None when the part is not in the table (CPUs are not)."""
        from harness.measure.device_specs import match_peak_spec

        spec = match_peak_spec(self.name())
        return spec.to_dict() if spec else None

    def describe(self) -> dict[str, Any]:
        return {"type": "cpu", "name": cpu_model_name(), "count": os.cpu_count(), "vendor": cpu_vendor()}


class CpuDevice(Device):
    type = "cpu"

    def peak_specs(self) -> dict[str, Any] | None:
        return None  # CPU peaks depend on SKU, clocks and ISA: not tabulated


class TorchAcceleratorDevice(Device):
    """Backends whose torch module mirrors `torch.cuda` (CUDA, ROCm through HIP, XPU):
    `is_available`, `device_count`, `synchronize`, `Event`, and allocator statistics."""

    module_name = ""
    has_events = True

    @property
    def module(self) -> Any:
        import torch

        return getattr(torch, self.module_name)

    def _not_built_reason(self) -> str | None:
        return None

    def availability(self) -> Availability:
        import torch

        mod = getattr(torch, self.module_name, None)
        if mod is None or not mod.is_available():
            why = self._not_built_reason() or "no visible device"
            return Availability(False, f"{self.type} not available: {why} (torch {torch.__version__})")
        if self.index >= mod.device_count():
            return Availability(False, f"{self.type}:{self.index} not present ({mod.device_count()} device(s) visible)")
        return Availability(True)

    def count(self) -> int:
        return int(self.module.device_count())

    def name(self) -> str:
        return str(self.module.get_device_properties(self.index).name)

    def synchronize(self) -> None:
        self.module.synchronize(self.index)

    def event_pair(self) -> tuple[Any, Any]:
        return self.module.Event(enable_timing=True), self.module.Event(enable_timing=True)

    def reset_peak_memory(self) -> int:
        self.module.synchronize(self.index)
        self.module.reset_peak_memory_stats(self.index)
        return int(self.module.memory_allocated(self.index))

    def peak_memory(self) -> int | None:
        self.module.synchronize(self.index)
        return int(self.module.max_memory_allocated(self.index))

    @property
    def memory_kind(self) -> str:
        return "device_allocator"

    def describe(self) -> dict[str, Any]:
        props = self.module.get_device_properties(self.index)
        return {
            "type": self.type,
            "vendor": self.vendor,
            "name": str(props.name),
            "count": self.count(),
            "total_memory_bytes": int(getattr(props, "total_memory", 0)) or None,
            "peak_specs": self.peak_specs(),
            **self._runtime_versions(props),
        }

    def _runtime_versions(self, props: Any) -> dict[str, Any]:
        return {}


class CudaDevice(TorchAcceleratorDevice):
    """NVIDIA CUDA, and AMD ROCm (HIP builds expose the same `torch.cuda` API)."""

    type = "cuda"
    module_name = "cuda"

    @property
    def vendor(self) -> str:  # type: ignore[override]
        return "AMD" if _hip_version() else "NVIDIA"

    def _not_built_reason(self) -> str | None:
        import torch

        if torch.version.cuda is None and not _hip_version():
            return "a CPU-only torch build"
        return "no visible GPU"

    def _runtime_versions(self, props: Any) -> dict[str, Any]:
        import torch

        info: dict[str, Any] = {
            "multiprocessors": getattr(props, "multi_processor_count", None),
            "capability": f"{props.major}.{props.minor}" if hasattr(props, "major") else None,
            "cuda_runtime": torch.version.cuda,
            "hip_runtime": _hip_version(),
        }
        if _hip_version():
            info["gcn_arch"] = getattr(props, "gcnArchName", None)
            info["driver"] = _amdgpu_driver_version()
        else:
            info["driver"] = _nvidia_driver_version()
        return info


class XpuDevice(TorchAcceleratorDevice):
    """Intel GPUs through `torch.xpu` (Level Zero); same allocator/event API as CUDA."""

    type = "xpu"
    module_name = "xpu"
    vendor = "Intel"

    def _not_built_reason(self) -> str | None:
        import torch

        return "torch built without XPU support" if not getattr(torch.version, "xpu", None) else "no visible Intel GPU"

    def _runtime_versions(self, props: Any) -> dict[str, Any]:
        import torch

        return {"xpu_runtime": getattr(torch.version, "xpu", None), "driver": getattr(props, "driver_version", None)}


class MpsDevice(Device):
    """Apple GPUs through `torch.mps` (one device). MPS has events in recent torch but no
    peak-memory counter: the 'peak' is the highest allocation seen at the sync points the
    harness visits, a lower bound, and `memory_kind` says so."""

    type = "mps"
    vendor = "Apple"

    def __init__(self, index: int = 0):
        super().__init__(index)
        self._seen_max = 0

    @property
    def torch_name(self) -> str:
        return "mps"

    def availability(self) -> Availability:
        import torch

        backend = getattr(torch.backends, "mps", None)
        if backend is None or not backend.is_available():
            built = backend is not None and backend.is_built()
            why = "this Mac's macOS/GPU does not support MPS" if built else "torch built without MPS (not macOS?)"
            return Availability(False, f"mps not available: {why} (torch {torch.__version__})")
        if self.index != 0:
            return Availability(False, f"mps:{self.index} not present (MPS exposes one device, mps:0)")
        return Availability(True)

    @property
    def has_events(self) -> bool:  # type: ignore[override]
        import torch

        return hasattr(getattr(torch, "mps", None), "event")

    def name(self) -> str:
        return apple_chip_name()

    def synchronize(self) -> None:
        import torch

        torch.mps.synchronize()
        self._sample()

    def event_pair(self) -> tuple[Any, Any]:
        import torch

        return torch.mps.event.Event(enable_timing=True), torch.mps.event.Event(enable_timing=True)

    def _sample(self) -> int:
        import torch

        now = int(torch.mps.current_allocated_memory())
        self._seen_max = max(self._seen_max, now)
        return now

    def reset_peak_memory(self) -> int:
        import torch

        torch.mps.synchronize()
        self._seen_max = 0
        return self._sample()

    def peak_memory(self) -> int | None:
        import torch

        torch.mps.synchronize()
        self._sample()
        return self._seen_max

    @property
    def memory_kind(self) -> str:
        return "mps_allocated_sampled_lower_bound"

    def describe(self) -> dict[str, Any]:
        import torch

        return {
            "type": "mps",
            "vendor": "Apple",
            "name": self.name(),
            "count": 1,
            "driver_allocated_bytes": int(torch.mps.driver_allocated_memory()),
            "recommended_max_memory_bytes": int(torch.mps.recommended_max_memory())
            if hasattr(torch.mps, "recommended_max_memory") else None,
            "macos": _macos_version(),
            "peak_specs": self.peak_specs(),
        }


def _hip_version() -> str | None:
    import torch

    return getattr(torch.version, "hip", None) or None


def _nvidia_driver_version() -> str | None:
    try:
        with open("/proc/driver/nvidia/version") as fh:
            first = fh.readline()
        # "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
        match = re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", first)
        return match.group(1) if match else first.strip()
    except OSError:
        return None


def _amdgpu_driver_version() -> str | None:
    try:
        with open("/sys/module/amdgpu/version") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _macos_version() -> str | None:
    import platform

    return platform.mac_ver()[0] or None


def apple_chip_name() -> str:
    """'Apple M2 Pro' on macOS (sysctl), else a generic name: MPS reports no device name."""
    if sys.platform == "darwin":
        import subprocess

        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return "Apple GPU (MPS)"


DEVICE_TYPES: dict[str, Callable[[int], Device]] = {
    "cpu": CpuDevice, "cuda": CudaDevice, "xpu": XpuDevice, "mps": MpsDevice,
}
# `auto` prefers discrete accelerators, then Apple's GPU, then the CPU
AUTO_ORDER = ("cuda", "xpu", "mps", "cpu")


def parse_device(spec: str) -> Device:
    """'cpu', 'cuda', 'cuda:1', 'xpu', 'mps' -> Device. Unknown types are a clear error."""
    kind, _, idx = spec.partition(":")
    if kind not in DEVICE_TYPES:
        close = difflib.get_close_matches(kind, DEVICE_TYPES, n=2)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownDeviceError(f"unknown device {spec!r}{hint}; known device types: {', '.join(DEVICE_TYPES)}, auto")
    if idx and not idx.isdigit():
        raise UnknownDeviceError(f"device {spec!r}: the index after ':' must be a number, e.g. cuda:0")
    return DEVICE_TYPES[kind](int(idx or 0))


def device_availability(name: str) -> Availability:
    """Availability that never raises: a half-installed backend is 'not present' with why."""
    try:
        return DEVICE_TYPES[name](0).availability()
    except Exception as exc:  # noqa: BLE001 - broken driver stacks raise anything
        return Availability(False, f"{name} probe failed: {type(exc).__name__}: {exc}")


def present_devices() -> list[str]:
    return [name for name in DEVICE_TYPES if device_availability(name).available]


def auto_device() -> str:
    """The best present device: CUDA/ROCm, then XPU, then MPS, the CPU last."""
    for name in AUTO_ORDER:
        if name in DEVICE_TYPES and device_availability(name).available:
            return name
    return "cpu"


# ---- CPU memory: Linux VmHWM with a reset, ru_maxrss elsewhere -------------------------

# VmHWM may read this far above VmRSS right after a reset that worked: pages the process's
# other threads touched between the reset and the read
RESET_SLACK_BYTES = 1 << 20


def _status_kb(field_name: str) -> int | None:
    return _status_fields(field_name).get(field_name)


def _status_fields(*names: str) -> dict[str, int]:
    """Bytes of the named /proc/self/status fields (kB lines), from one read of the file."""
    found: dict[str, int] = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                key = line.split(":", 1)[0]
                if key in names:
                    found[key] = int(line.split()[1]) * 1024
    except OSError:
        return {}
    return found


def cpu_peak_reset_refusal() -> str | None:
    """None when this process's RSS high-water mark resets (Linux >= 4.0: '5' written to
    /proc/self/clear_refs sets VmHWM to VmRSS), checked by resetting it now and reading it
    back; else why not (no /proc, the write refused, VmHWM left above VmRSS). Where it
    resets, the memory phase reads the peak around all the timed samples
    (worker.RoundsWindowPeak) instead of in a pass of its own."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError as exc:
        return f"the RSS high-water mark cannot be reset (/proc/self/clear_refs: {exc.strerror or exc})"
    fields = _status_fields("VmHWM", "VmRSS")
    if "VmHWM" not in fields or "VmRSS" not in fields:
        return "no VmHWM/VmRSS in /proc/self/status"
    above = fields["VmHWM"] - fields["VmRSS"]
    if above > RESET_SLACK_BYTES:
        return f"VmHWM stayed {above / (1 << 20):.1f} MiB above VmRSS after a reset through /proc/self/clear_refs"
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


def cpu_rss() -> int | None:
    """The process's resident set now (Linux VmRSS), None without /proc."""
    return _status_kb("VmRSS")


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
