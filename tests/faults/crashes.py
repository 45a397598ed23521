"""Faults that kill the worker or exhaust memory: a real segfault, host memory exhaustion
(under --max-memory-gb) and CUDA out-of-memory."""

from __future__ import annotations

from harness import workload

CHUNK_BYTES = 256 << 20


@workload("fault-segfault", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def segfault(ctx):
    """dereferences NULL through ctypes: a real SIGSEGV in the worker"""
    import ctypes

    ctypes.string_at(0)


@workload("fault-host-oom", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def host_oom(ctx):
    """allocates host memory 256 MiB at a time until allocation fails (a leak). Only under
    a memory cap: without one it would wake the kernel OOM killer, so it skips itself."""
    import resource

    import torch

    from harness.measure.worker import CaseSkipped

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        raise CaseSkipped("fault-host-oom runs only under --max-memory-gb (it would exhaust the host)")
    hoard = []
    while True:  # bounded by the cap: torch.empty maps address space without touching pages
        hoard.append(torch.empty(CHUNK_BYTES // 4, dtype=torch.float32))


@workload("fault-cuda-oom", batch_size=2, scenarios=("forward",), sizes=("tiny",), devices=("cuda",))
def cuda_oom(ctx):
    """asks the CUDA allocator for 16 TiB: torch.OutOfMemoryError -> status oom"""
    import torch

    torch.empty(1 << 42, dtype=torch.float32, device=ctx.device)
