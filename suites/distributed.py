"""Distributed training steps of compiled modules: DDP and FSDP2, launched with torchrun.

`compilebench distributed --nproc 2 --backend gloo` (CPU) or `--backend nccl --device cuda`
(one process per GPU). The pattern is the documented one: compile the module, then wrap it
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
import datetime as _dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STRATEGIES = ("ddp", "fsdp2")
BACKENDS = ("gloo", "nccl")


class DistributedError(ValueError):
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
            from harness.measure.worker import probe_cpu_isa
            from harness.run.runner import default_cache_root

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


# ---------------------------------------------------------------------------------------
# launcher side (the compilebench process)
# ---------------------------------------------------------------------------------------

def torchrun_command(spec_path: Path, out_path: Path, nproc: int) -> list[str]:
    # `python -m torch.distributed.run` is torchrun, from the same interpreter (no PATH lookup)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", "suites.distributed", str(spec_path), str(out_path)]


def launch(spec: DistributedSpec) -> Any:
    """One torchrun launch -> one Record (failures and timeouts included)."""
    from harness.model.schema import Record
    from harness.run.runner import PROJECT_ROOT, _tail, load_registries, worker_env, workload_modules

    spec.validate()
    spec.workload_modules = spec.workload_modules or workload_modules()
    if not spec.compiler_config:
        from compiler import get_compiler

        spec.compiler_config = get_compiler(spec.compiler).to_dict()
    load_registries([])
    tmp = Path(tempfile.mkdtemp(prefix="cb-dist-"))
    spec_path, out_path = tmp / "spec.json", tmp / "ranks.json"
    spec_path.write_text(json.dumps(asdict(spec)))
    case = distributed_case(spec)
    env = worker_env(tmp / "inductor-cache")
    started = time.monotonic()
    log_path = tmp / "torchrun.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(torchrun_command(spec_path, out_path, spec.nproc), stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=str(PROJECT_ROOT), start_new_session=True)
        try:
            proc.wait(timeout=spec.timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # ranks and their compile workers
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
    wall = time.monotonic() - started
    logs = {"stdout": _tail(log_path), "stderr": ""}
    if timed_out:
        record = Record.failure(case, "timeout", "Timeout", f"torchrun exceeded {spec.timeout_s:g}s "
                                "(a hung collective?); its process group was killed", logs=logs)
    elif not out_path.exists():
        record = Record.failure(case, "crashed", "Crash", f"torchrun exited with code {proc.returncode} "
                                "without results (see logs)", traceback=logs["stdout"][-4000:], logs=logs)
    else:
        record = record_from_ranks(case, spec, json.loads(out_path.read_text()))
        record.logs = {"stdout": logs["stdout"][-2000:], "stderr": ""}
    record.worker.update({"returncode": proc.returncode, "wall_s": round(wall, 3), "launcher": "torchrun",
                          "nproc": spec.nproc})
    shutil.rmtree(tmp, ignore_errors=True)
    return record


def distributed_case(spec: DistributedSpec) -> Any:
    from harness.model.schema import Case
    from harness.model.workloads import get_workload

    bs = spec.batch_size or get_workload(spec.workload).batch_size
    return Case(spec.workload, f"train-{spec.strategy}", spec.compiler, spec.device, spec.dtype, int(bs), spec.size,
                "distributed", (("backend", spec.backend), ("nproc", spec.nproc)))


def record_from_ranks(case: Any, spec: DistributedSpec, data: dict[str, Any]) -> Any:
    """Rank results -> Record. A step takes as long as its slowest rank, so the aggregate
    uses the per-step maximum across ranks."""
    from harness.model.schema import Record, error_info
    from harness.model.stats import ratio_of_medians_ci, summarize

    ranks = sorted(data["ranks"], key=lambda r: r["rank"])
    world = int(data["world_size"])
    batch = ranks[0]["batch_size"]
    rec = Record(case, "ok")
    blocks: dict[str, dict[str, Any]] = {}
    for name in ranks[0]["samples_s"]:
        per_step = [max(r["samples_s"][name][i] for r in ranks) for i in range(len(ranks[0]["samples_s"][name]))]
        blocks[name] = {"samples_s": per_step, "first_call_s": max(r["first_call_s"][name] for r in ranks),
                        "inner_loops": 1, "summary": summarize(per_step), "memory_kind": "device_allocator"
                        if spec.device == "cuda" else None,
                        "peak_memory_bytes": max((r["peak_memory_bytes"] or 0) for r in ranks) or None}
    rec.eager, rec.compiled = blocks["eager"], blocks.get("compiled")
    measured = rec.compiled or rec.eager
    median = measured["summary"]["median"]
    m = rec.metrics
    m.update(world_size=world, backend=spec.backend, strategy=spec.strategy, steps=spec.steps, warmup=spec.warmup,
             latency_s=median, throughput=world * batch / median if median else None,
             throughput_unit=f"{get_unit(spec.workload)}/s", units_per_call=world * batch)
    variant = "compiled" if rec.compiled else "eager"
    m["per_rank"] = [{"rank": r["rank"], "throughput": batch / statistics.median(r["samples_s"][variant]),
                      "median_step_s": statistics.median(r["samples_s"][variant]),
                      "compile_time_s": r["first_call_s"].get("compiled"),
                      "peak_memory_bytes": r["peak_memory_bytes"]} for r in ranks]
    m["aggregate_throughput"] = m["throughput"]
    m.update({k: v for k, v in ranks[0]["compile"].items() if k != "graph_break_reasons"})
    rec.graph_break_reasons = ranks[0]["compile"]["graph_break_reasons"]
    if rec.compiled:
        m["compile_time_s"] = rec.compiled["first_call_s"]  # the slowest rank's cold compile
        m["compile_time_per_rank_s"] = [r["first_call_s"]["compiled"] for r in ranks]
        ci = ratio_of_medians_ci(rec.eager["samples_s"], rec.compiled["samples_s"])
        if ci:
            m["speedup"], m["speedup_ci_low"], m["speedup_ci_high"] = ci
        m["eager_throughput"] = world * batch / rec.eager["summary"]["median"]
        m["accuracy"] = ranks[0]["accuracy"]
        if (m["accuracy"] or {}).get("status") == "fail":
            rec.status = "fail_accuracy"
            rec.error = error_info("AccuracyError", m["accuracy"].get("reason", ""), phase="accuracy")
    return rec


def get_unit(workload: str) -> str:
    from harness.model.workloads import get_workload

    return get_workload(workload).unit


def run_distributed(specs: Sequence[DistributedSpec], out_dir: str, label: str = "", ingest: bool = True,
                    progress: Callable[[str], None] | None = None) -> Any:
    """Launch every spec, then write one run file (and ingest it) like `compilebench run`."""
    from harness.measure.environment import capture_environment
    from harness.model.schema import Run, save_run
    from harness.run.runner import new_run_id, run_path

    started = time.monotonic()
    env = capture_environment(sorted({s.device for s in specs}))
    run = Run(run_id=new_run_id(label or "distributed"),
              created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), label=label,
              environment=env, config={"suite": "distributed", "argv": sys.argv, "cases_planned": len(specs),
                                       "distributed": [asdict(s) for s in specs], "interrupted": False})
    for spec in specs:
        record = launch(spec)
        run.records.append(record)
        if progress:
            progress(f"{record.case_id}: {record.status}")
    run.config["wall_s"] = round(time.monotonic() - started, 3)
    path = save_run(run, run_path(out_dir, run.run_id))
    run.config["path"] = str(path)
    if ingest:
        from harness.run.store import HistoryStore

        with HistoryStore(Path(out_dir) / "history.sqlite") as store:
            store.ingest(run)
    return run


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage (under torchrun): python -m suites.distributed SPEC.json OUT.json", file=sys.stderr)
        return 2
    spec = DistributedSpec(**json.loads(Path(argv[0]).read_text()))
    return rank_main(spec, argv[1])


if __name__ == "__main__":
    sys.exit(main())
