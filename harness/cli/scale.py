"""Scale-out commands: `compilebench merge` (run files of many machines -> one run) and
`compilebench distributed` (DDP / FSDP2 training steps under torchrun)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.common import add_output_options, non_negative_int, positive_int, positive_seconds


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="combine run files from many machines/shards into one run file",
                       description="Merge run files (e.g. the shards of a CI job matrix). Refuses mismatched schema "
                                   "versions, duplicated cases and mixed torch builds; keeps each record's machine.")
    p.add_argument("runs", nargs="+", help="run files or run ids")
    p.add_argument("-o", "--output", required=True, help="merged run file to write, e.g. results/runs/nightly.json")
    p.add_argument("--out", default="results", help="results folder for run ids (default: results)")
    p.add_argument("--label", default="", help="label of the merged run")
    p.add_argument("--allow-mixed", action="store_true", help="merge runs of different torch builds/commits anyway")
    p.add_argument("--allow-missing", action="store_true",
                   help="merge what is there when planned cases are missing (a shard's file absent, a shard "
                        "stopped early); the merged run records them in config.shards. Without it: exit 3, "
                        "nothing written")
    p.add_argument("--ingest", metavar="DB", help="also add the merged run to this history .sqlite")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("distributed", help="DDP/FSDP2 training steps of compiled modules under torchrun",
                       description="Each strategy x compiler is one torchrun launch (fresh Inductor cache). "
                                   "gloo on CPU, nccl on CUDA GPUs (one process per GPU).")
    p.add_argument("--nproc", type=positive_int, default=2, help="processes (ranks) per launch (default 2)")
    p.add_argument("--backend", default="gloo", help="gloo (CPU) or nccl (CUDA)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cpu for gloo, cuda for nccl)")
    p.add_argument("--strategy", action="append", help="ddp, fsdp2 (repeatable or comma list; default both)")
    p.add_argument("--compiler", "-c", action="append", help="compiler config(s) (default inductor)")
    p.add_argument("--workload", "-w", default="mlp-deep", help="workload to train (default mlp-deep)")
    p.add_argument("--size", default="tiny", help="tiny or full")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch-size", type=positive_int, help="per-rank batch size (default: the workload's)")
    p.add_argument("--steps", type=positive_int, default=10, help="timed steps per variant (fixed: ranks must agree)")
    p.add_argument("--warmup", type=non_negative_int, default=2)
    p.add_argument("--timeout", type=positive_seconds, default=600.0, help="seconds per launch before it is killed, > 0")
    p.add_argument("--out", default="results")
    p.add_argument("--label", default="")
    p.add_argument("--no-ingest", action="store_true")
    add_output_options(p, "the run (the run file's content)")
    p.set_defaults(func=cmd_distributed)


def cmd_merge(args: argparse.Namespace) -> int:
    import sys

    from harness.cli.common import EXIT_OK
    from harness.model.schema import save_run
    from harness.run.merge import merge_runs, missing_problem
    from harness.run.runner import resolve_run

    runs = [resolve_run(ref, args.out) for ref in args.runs]
    merged = merge_runs(runs, label=args.label, allow_mixed=args.allow_mixed, allow_missing=args.allow_missing)
    shards = merged.config.get("shards") or {}
    problem = missing_problem(shards)
    if problem:
        print(f"warning: --allow-missing: {problem}; recorded in the merged run's config.shards", file=sys.stderr)
    elif shards.get("missing_shards"):
        print(f"note: shard(s) {shards['missing_shards']} of {shards['count']} have no run file, but every planned "
              "case is present (they had none)")
    path = save_run(merged, args.output)
    if args.ingest:
        from harness.run.store import HistoryStore, StoreError

        try:
            with HistoryStore(args.ingest) as store:
                store.ingest(merged)
        except StoreError as exc:  # a rebuild reads OUT/runs/, where the merged file may not be
            db = Path(args.ingest)
            raise type(exc)(f"{exc}; the merged run is kept in {path}: name it in the rebuild too, "
                            f"`compilebench store rebuild --db {db} --runs {db.parent / 'runs'} --runs {path}` "
                            "(--runs replaces the default folder)") from exc
    hosts = ", ".join(merged.environment.get("hosts", []))
    print(f"merged {len(runs)} run(s), {len(merged.records)} record(s) from {hosts} -> {path}")
    for warning in merged.config.get("merge_warnings", []):
        print(f"warning: {warning}")
    return EXIT_OK


def cmd_distributed(args: argparse.Namespace) -> int:
    import json

    from harness.cli.common import EXIT_FAILED, EXIT_OK, json_to_stdout, split_values
    from harness.report.display import make_console, print_table, results_table
    from harness.run.distributed import run_distributed
    from suites.distributed import DistributedSpec

    strategies = split_values(args.strategy) or ["ddp", "fsdp2"]
    compilers = split_values(args.compiler) or ["inductor"]
    device = args.device or ("cuda" if args.backend == "nccl" else "cpu")
    specs = [DistributedSpec(workload=args.workload, size=args.size, strategy=s, compiler=c, backend=args.backend,
                             nproc=args.nproc, device=device, dtype=args.dtype, batch_size=args.batch_size,
                             warmup=args.warmup, steps=args.steps, timeout_s=args.timeout)
             for s in strategies for c in compilers]
    for spec in specs:
        spec.validate()
        from compiler import get_compiler

        get_compiler(spec.compiler)
    console = make_console(stderr=json_to_stdout(args))
    run = run_distributed(specs, args.out, label=args.label, ingest=not args.no_ingest, progress=console.print)
    print_table(console, results_table(run), args.format)
    for rec in run.records:
        m = rec.metrics
        if rec.status == "ok":
            console.print(f"{rec.case_id}: aggregate {m.get('aggregate_throughput', 0):.1f} {m.get('throughput_unit')}, "
                          f"compile per rank {m.get('compile_time_per_rank_s')}")
        else:
            console.print(f"{rec.case_id}: {rec.status}: {(rec.error or {}).get('message', '')}")
    console.print(f"run file {Path(run.config['path'])}")
    if args.json:
        print(json.dumps(run.to_dict(), indent=1, allow_nan=False, default=str))
    return EXIT_OK if all(r.status == "ok" for r in run.records) else EXIT_FAILED
