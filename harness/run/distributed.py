"""The distributed launcher: one torchrun launch per (strategy, compiler) case, beside the
runner whose isolation it shares (fresh Inductor cache, new process session, kill of the
whole group on timeout, the escaped-child sweep by token, logs tailed into the record).

Why not through run.runner.launch: that starts one harness worker (`-m harness.run.isolation`
or a fork of a preloaded server) and waits for its record; here the process is torchrun,
which starts and watches the ranks itself (its elastic agent restarts or kills them), so it
cannot be forked from a server and its result is the ranks' file, not a worker's record.
What the runner's path guarantees is kept here: the token and sweep matter most, as torchrun
puts every rank in a session of its own, beyond the killpg of torchrun's group.

`compilebench distributed --nproc 2 --backend gloo` (CPU) or `--backend nccl --device cuda`
(one process per GPU). The rank side, the DDP/FSDP2 training step that runs under torchrun,
is a workload and lives in suites/distributed.py with the DistributedSpec it reads (as
JSON); rank 0 writes every rank's figures back. Here they become one Record: per-rank compile
time and throughput, and aggregate throughput = world x batch / median step time, a step
lasting as long as its slowest rank.
"""

from __future__ import annotations

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
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.run.isolation import child_env, sweep_escaped
from suites.distributed import DistributedSpec

# the module torchrun starts on every rank (rank_main)
RANK_MODULE = "suites.distributed"

# ---------------------------------------------------------------------------------------
# launcher side (the compilebench process)
# ---------------------------------------------------------------------------------------

def torchrun_command(spec_path: Path, out_path: Path, nproc: int) -> list[str]:
    # `python -m torch.distributed.run` is torchrun, from the same interpreter (no PATH lookup)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", RANK_MODULE, str(spec_path), str(out_path)]


def launch(spec: DistributedSpec) -> Any:
    """One torchrun launch -> one Record (failures and timeouts included)."""
    from harness.model.schema import Record
    from harness.run.runner import PROJECT_ROOT, load_registries, log_tail, worker_env, workload_modules

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
    token = child_env(env)  # every rank inherits it: the sweep below finds them
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
                os.killpg(proc.pid, signal.SIGKILL)  # torchrun's own session
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            # torchrun starts each rank in a session of its own (its SubprocessHandler's
            # start_new_session=True), so the killpg above misses the ranks of a hung
            # collective once torchrun itself is killed: the escaped-child sweep ends them
            ranks_killed = sweep_escaped(token, session=proc.pid)
    wall = time.monotonic() - started
    logs = {"stdout": log_tail(log_path), "stderr": ""}
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
    if ranks_killed:
        record.worker["escaped_processes_killed"] = len(ranks_killed)
        record.notes.append(f"{len(ranks_killed)} process(es) (ranks, or their children) outlived torchrun's "
                            "process group and were killed")
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
    median = (rec.compiled or rec.eager).median
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
        m["compile_time_s"] = rec.compiled.first_call_s  # the slowest rank's cold compile
        m["compile_time_per_rank_s"] = [r["first_call_s"]["compiled"] for r in ranks]
        ci = ratio_of_medians_ci(rec.eager.samples_s, rec.compiled.samples_s)
        if ci:
            m["speedup"], m["speedup_ci_low"], m["speedup_ci_high"] = ci
        m["eager_throughput"] = world * batch / rec.eager.median
        m["accuracy"] = ranks[0]["accuracy"]
        if m.accuracy.status == "fail":
            rec.status = "fail_accuracy"
            rec.error = error_info("AccuracyError", m.accuracy.reason or "", phase="accuracy")
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
