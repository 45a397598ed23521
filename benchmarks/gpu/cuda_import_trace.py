"""Which import starts the CUDA driver in the fork server (issue 25).

Imports the fork server's preload list in its order, with the server's environment
(`PYTORCH_NVML_BASED_CUDA_CHECK=1`), and reports for every module
  - whether libcuda is mapped into the process afterwards and whether the driver was
    initialised (cuInit; what makes a fork unsafe) (only meaningful on a GPU host), and
  - every call into a CUDA-starting entry point made while importing it (torch.cuda's
    lazy init and device queries, torch._C's CUDA calls, triton's driver), with the first
    caller outside torch.cuda / triton's driver, so the culprit can be kept out of the server.

Works on a CPU box with a CUDA build of torch too (the calls are traced, not their effect).

    python benchmarks/gpu/cuda_import_trace.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# names whose call can start (or query) the driver; torch.cuda's cheap helpers are left out
WATCHED_C = {"_cuda_getDeviceCount", "_cuda_init", "_cuda_getDevice", "_cuda_getDeviceProperties",
             "_cuda_getArchFlags", "_cuda_isInBadFork", "_cuda_get_device_properties"}
WATCHED_PY = {"_lazy_init", "init", "device_count", "is_available", "get_device_properties",
              "get_device_capability", "get_device_name", "current_device", "is_bf16_supported",
              "_create_driver", "CudaDriver", "CudaUtils", "libcuda_dirs", "get_current_device",
              "get_current_target", "get_arch", "_raw_device_count_nvml", "_device_count_nvml"}
INSIDE = ("torch/cuda/", "triton/backends/nvidia/", "triton/runtime/driver.py", "functools.py")


def libcuda_mapped() -> bool:
    try:
        return any("libcuda.so" in line for line in open("/proc/self/maps"))
    except OSError:
        return False


def first_outside_caller(frame: Any) -> str:
    """The first frame (walking out) that is not torch.cuda/triton's driver: who asked."""
    for summary in reversed(traceback.extract_stack(frame, limit=40)):
        if not any(part in summary.filename for part in INSIDE):
            return f"{summary.filename}:{summary.lineno} in {summary.name}"
    return "?"


class Tracer:
    def __init__(self) -> None:
        self.hits: list[dict[str, Any]] = []
        self.module = ""
        self._seen: set[tuple[str, str]] = set()

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            name = getattr(arg, "__name__", "")
            if name not in WATCHED_C:
                return
            what = f"torch._C.{name}"
        elif event == "call":
            code = frame.f_code
            if code.co_name not in WATCHED_PY:
                return
            if not any(part in code.co_filename for part in INSIDE[:3]):
                return
            what = f"{Path(code.co_filename).name}:{code.co_name}"
        else:
            return
        caller = first_outside_caller(frame)
        key = (what, caller)
        if key in self._seen:
            return
        self._seen.add(key)
        self.hits.append({"module": self.module, "call": what, "caller": caller,
                          "stack": traceback.format_stack(frame, limit=14)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the findings here too")
    args = parser.parse_args(argv)
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    import importlib

    from harness.run.forkserver import PRELOAD, cuda_driver_started

    tracer = Tracer()
    rows: list[dict[str, Any]] = []
    names = list(PRELOAD)
    index = 0
    while index < len(names):
        name = names[index]
        index += 1
        tracer.module = name
        started = time.perf_counter()
        sys.setprofile(tracer)
        try:
            importlib.import_module(name)
            error = None
        except Exception as exc:  # noqa: BLE001 - a missing module is a finding, not a crash
            error = f"{type(exc).__name__}: {str(exc)[:160]}"
        finally:
            sys.setprofile(None)
        if name == "suites" and error is None:
            from suites import WORKLOAD_MODULES

            names[index:index] = [m for m in WORKLOAD_MODULES if m not in names]
        torch = sys.modules.get("torch")
        rows.append({"module": name, "seconds": round(time.perf_counter() - started, 2), "error": error,
                     "libcuda_mapped": libcuda_mapped(), "driver_started": cuda_driver_started(),
                     "cuda_initialized": bool(torch is not None and torch.cuda.is_initialized()),
                     "calls": sum(1 for hit in tracer.hits if hit["module"] == name)})
    for row in rows:
        print(f"{row['module']:<40} {row['seconds']:>6.2f}s  libcuda={row['libcuda_mapped']!s:<5} "
              f"cuInit={row['driver_started']!s:<5} torch_cuda_init={row['cuda_initialized']!s:<5} calls={row['calls']}" + (f"  {row['error']}" if row["error"] else ""))
    print()
    for hit in tracer.hits:
        print(f"[{hit['module']}] {hit['call']}  <- {hit['caller']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"modules": rows, "hits": tracer.hits}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
