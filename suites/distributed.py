"""Distributed training steps of compiled modules: DDP and FSDP2, the rank side under torchrun.

The launcher (`compilebench distributed`, one torchrun per case) is harness/run/distributed.py.
The pattern is the documented one: compile the module, then wrap it
(`DDP(torch.compile(model))`, `fully_shard(torch.compile(model))`), so Dynamo traces the
plain model and the wrapper's communication hooks run around the compiled region (FSDP2
hooks inside a compiled frame are `torch._dynamo.disable`d: compiling an already-sharded
root graph-breaks at its first hook and compiles nothing, which this order avoids).

Every (strategy, compiler) pair is one torchrun launch in a fresh Inductor cache (cold
compile, isolation: a hung collective kills one case, not the run). Inside, each rank builds
the workload from the same seed, times an eager and a compiled copy interleaved for a
*fixed* number of steps (a time-based stop would let ranks disagree on the step count and
deadlock in a collective), and rank 0 gathers per-rank figures into one Record:
per-rank compile time and throughput, and aggregate throughput = world x batch / median
step time, a step lasting as long as its slowest rank.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.model.errors import UserError

STRATEGIES = ("ddp", "fsdp2")
BACKENDS = ("gloo", "nccl")


class DistributedError(UserError, ValueError):
    """Bad options for `compilebench distributed`; the message says the fix."""


@dataclass
class DistributedSpec:
    workload: str = "mlp-deep"
    size: str = "tiny"
    strategy: str = "ddp"
    compiler: str = "inductor"
    backend: str = "gloo"
    nproc: int = 2
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int | None = None  # per rank; None: the workload's
    warmup: int = 2
    steps: int = 10
    timeout_s: float = 600.0
    workload_modules: list[str] = field(default_factory=list)
    compiler_config: dict[str, Any] = field(default_factory=dict)  # filled from the registry by the launcher

    def validate(self) -> None:
        if self.strategy not in STRATEGIES:
            raise DistributedError(f"--strategy {self.strategy!r}: use one of {', '.join(STRATEGIES)}")
        if self.backend not in BACKENDS:
            raise DistributedError(f"--backend {self.backend!r}: use gloo (CPU) or nccl (CUDA GPUs)")
        if self.backend == "nccl" and self.device != "cuda":
            raise DistributedError("--backend nccl needs --device cuda (gloo is the CPU backend)")
        if self.nproc < 1 or self.steps < 1 or self.warmup < 0:
            raise DistributedError("--nproc and --steps must be at least 1 and --warmup at least 0")


# ---------------------------------------------------------------------------------------
# rank side (runs under torchrun)
# ---------------------------------------------------------------------------------------

def _wrap(strategy: str, model: Any, compile_fn: Callable[[Any], Any] | None, device: Any) -> Any:
    """Compile (if asked), then wrap for data parallelism."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    compiled = compile_fn(model) if compile_fn else model
    if strategy == "ddp":
        return DDP(compiled, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import fully_shard

    # on the compiled wrapper (as torchtitan does per block): FSDP's all-gather/reshard hooks
    # then run around the compiled region instead of breaking the graph inside it
    fully_shard(compiled)
    return compiled


def _make_step(module: Any, args: Sequence[Any], kwargs: dict[str, Any], loss_fn: Callable, optimizer: str) -> Callable:
    from harness.model.scenarios import make_optimizer

    opt = make_optimizer(optimizer, module.parameters())

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(module(*args, **kwargs))
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def rank_main(spec: DistributedSpec, out_path: str) -> int:
    import torch
    import torch.distributed as dist

    from compiler import CompilerConfig
    from harness.model.accuracy import compare_outputs
    from harness.model.scenarios import default_loss
    from harness.model.workloads import WorkloadContext, get_workload, import_workload_module

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if spec.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(spec.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    try:
        for module in spec.workload_modules:
            import_workload_module(module)
        wl = get_workload(spec.workload)
        compiler = CompilerConfig.from_dict(spec.compiler_config)
        if device.type == "cpu" and compiler.backend == "inductor":
            from harness.measure.environment import default_cache_root
            from harness.measure.worker import probe_cpu_isa

            probe_cpu_isa(str(default_cache_root() / "isa-probe"))  # before any clock: not compile time
        torch.manual_seed(0)  # every rank starts from the same weights (DDP also broadcasts)
        ctx = WorkloadContext(device=str(device), dtype=getattr(torch, spec.dtype),
                              batch_size=spec.batch_size or wl.batch_size, size=spec.size, options={})
        built = wl.build(ctx)
        built.model.train()
        loss_fn = wl.loss or default_loss
        variants = {"eager": _make_step(_wrap(spec.strategy, copy.deepcopy(built.model), None, device),
                                        built.args, built.kwargs, loss_fn, wl.optimizer)}
        if not compiler.is_eager:
            module = _wrap(spec.strategy, copy.deepcopy(built.model), compiler.compile, device)
            variants["compiled"] = _make_step(module, built.args, built.kwargs, loss_fn, wl.optimizer)
        from harness.measure.compile_metrics import CompileObserver

        observer = CompileObserver().start()
        result = _measure(variants, spec, sync)
        snap = observer.snapshot()
        result["compile"] = {k: snap[k] for k in ("graphs", "graph_breaks", "unique_graph_breaks", "frames_total",
                                                  "frames_ok", "recompiles")}
        result["compile"]["graph_break_reasons"] = snap["graph_break_reasons"][:5]
        first_eager, first_compiled = result.pop("first_outputs")["eager"], result.pop("first_outputs_compiled")
        acc = compare_outputs(first_eager, first_compiled, spec.dtype) if first_compiled is not None else None
        result.update(rank=rank, local_rank=local_rank, batch_size=ctx.batch_size, accuracy=acc,
                      peak_memory_bytes=int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, result)
        if rank == 0:
            Path(out_path).write_text(json.dumps({"ranks": gathered, "world_size": world}))
    finally:
        dist.destroy_process_group()
    return 0


def _measure(variants: dict[str, Callable], spec: DistributedSpec, sync: Callable[[], None]) -> dict[str, Any]:
    """First call of each variant (the compiled one is the cold compile), warm-up, then a
    fixed number of interleaved timed steps, identical on every rank."""
    first_s: dict[str, float] = {}
    first_out: dict[str, Any] = {}
    for name, fn in variants.items():
        sync()
        t0 = time.perf_counter()
        first_out[name] = fn().float().cpu()
        sync()
        first_s[name] = time.perf_counter() - t0
    for _ in range(spec.warmup):
        for fn in variants.values():
            fn()
    samples: dict[str, list[float]] = {n: [] for n in variants}
    names = list(variants)
    for i in range(spec.steps):
        for name in (names if i % 2 == 0 else names[::-1]):
            sync()
            t0 = time.perf_counter()
            variants[name]()
            sync()
            samples[name].append(time.perf_counter() - t0)
    return {"first_call_s": first_s, "samples_s": samples, "first_outputs": {"eager": first_out["eager"]},
            "first_outputs_compiled": first_out.get("compiled")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage (under torchrun): python -m suites.distributed SPEC.json OUT.json", file=sys.stderr)
        return 2
    spec = DistributedSpec(**json.loads(Path(argv[0]).read_text()))
    return rank_main(spec, argv[1])


if __name__ == "__main__":
    sys.exit(main())
