"""`compilebench` command line. Subcommands live in small functions here or in modules
listed in `COMMAND_MODULES` (each exposes `register(subparsers)`), so features add a
command without touching the others.

Exit codes (harness/cli/common.py, the same for every command): 0 ok, 1 a case failed or a
regression, 2 usage or input error (one line on stderr naming the problem and the fix),
3 the harness could not do its job (I/O, disk full, corrupt store, nothing compared or
measured), 130 interrupted. Errors are caught once, in main(), and printed as one line;
`--debug` or COMPILEBENCH_DEBUG=1 adds the traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import os
import sqlite3
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from harness.cli.common import (  # noqa: F401 - EXIT_* and CliError: the CLI's public names, re-exported
    ALLOW_SKIPS_HELP,
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_HARNESS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    OVERRIDE_WORKLOADS_HELP,
    CliError,
    Parser,
    add_output_options,
    add_policy_options,
    batch_sizes,
    json_to_stdout,
    non_negative_int,
    non_negative_seconds,
    nothing_measured,
    policy_overrides,
    positive_int,
    positive_seconds,
    refuse_session_options,
    split_values,
)
from harness.cli.listing import cmd_list
from harness.model.errors import HarnessError, UserError

# feature modules that add subcommands: each has register(subparsers)
COMMAND_MODULES: list[str] = ["harness.cli.report", "harness.cli.scale", "harness.cli.compare", "harness.cli.lifecycle",
                              "harness.cli.envs", "harness.cli.store"]


def build_parser() -> argparse.ArgumentParser:
    from harness.cli.diagnostics import add_diagnostic_options

    parser = Parser(prog="compilebench", description="Benchmark and regression-test torch.compile.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("list", help="list suites, workloads, scenarios, compilers and devices present here")
    p.add_argument("--workload-file", action="append", default=[], help="also load workloads from this .py file")
    p.add_argument("--override-workloads", action="store_true", help=OVERRIDE_WORKLOADS_HELP)
    p.add_argument("--compiler-file", action="append", default=[], help="also load named compiler configs from this TOML file")
    p.add_argument("--suite", help="only this suite, with every one of its workloads (a suite of more than "
                                   "12 shows a count and its first names otherwise)")
    add_output_options(p, "the catalog (one object)")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="run a suite or workloads; writes results/runs/<run_id>.json",
                       description="Run cases, each in a fresh worker process. Exit code 0 when every case is ok "
                                   "(or skipped, when some case ran; or --shard I/N whose share of the plan is empty), 1 when any "
                                   "case failed, 2 on bad options (a selection that matches no case), 3 when "
                                   "nothing was measured (every case skipped, without --allow-skips) or the run "
                                   "file / history could not be written, 130 when interrupted.")
    p.add_argument("--suite", help="named suite (see `compilebench list`), e.g. smoke")
    p.add_argument("--workload", "-w", action="append", help="workload name (repeatable or comma list)")
    p.add_argument("--workload-file", action="append", default=[], help="load @workload factories from this .py file")
    p.add_argument("--override-workloads", action="store_true", help=OVERRIDE_WORKLOADS_HELP)
    p.add_argument("--compiler-file", action="append", default=[], help="load named compiler configs from this TOML file")
    p.add_argument("--scenario", action="append", help="scenario(s), e.g. forward,train (default: the workload's)")
    p.add_argument("--compiler", "-c", action="append", help="compiler config name(s) (default: the suite's, else inductor)")
    p.add_argument("--device", action="append", help="cpu, cuda, cuda:1 or auto (default: the suite's, else cpu)")
    p.add_argument("--dtype", action="append", help="float32, float16, bfloat16, float64")
    p.add_argument("--batch-size", action="append", help="batch size(s) (default: the workload's)")
    p.add_argument("--size", action="append", help="tiny or full")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="workload option, e.g. resolution=1024, prompt_len=128, new_tokens=16 (repeatable; "
                        "overrides the suite's; see docs/LLM.md and docs/DIFFUSION.md)")
    p.add_argument("--timeout", type=positive_seconds,
                   help="seconds per case before its worker is killed, > 0 (default: the suite's, else 600)")
    add_policy_options(p)
    p.add_argument("--out", default="results", help="output folder (run file in OUT/runs/, history in OUT/history.sqlite)")
    p.add_argument("--label", default="", help="free-text label stored in the run")
    p.add_argument("--no-ingest", action="store_true", help="do not add the run to OUT/history.sqlite")
    p.add_argument("--allow-skips", action="store_true", help=ALLOW_SKIPS_HELP)
    p.add_argument("--report", metavar="HTML", help="also write the HTML report to this path")
    p.add_argument("--resume", metavar="RUN_ID", help="finish an interrupted run from its journal "
                   "(OUT/runs/RUN_ID.journal.jsonl): runs only the missing cases, with the run's own options")
    p.add_argument("--max-memory-gb", type=float, help="cap each CPU case's worker at this much virtual memory "
                   "(RLIMIT_AS; a torch worker needs ~0.7 GB to start): exceeding it gives status oom")
    p.add_argument("--shard", metavar="I/N", help="run only shard I of N of the plan (CI job matrix; see docs/SCALING.md); "
                   "'auto': from COMPILEBENCH_SHARD_INDEX/_COUNT, a Slurm array or a Kubernetes indexed Job")
    p.add_argument("--shard-costs", metavar="DB", help="history .sqlite whose median case times balance the shards "
                   "(default: OUT/history.sqlite if present; 'none': round-robin). Every shard must use the same one")
    p.add_argument("--gpus", action="append", metavar="all|I,J", help="'all' (every visible GPU) or indices, e.g. 0,1: "
                   "one worker per GPU, each taking the next case (longest first) when free (docs/SCALING.md)")
    p.add_argument("--no-eager-from-twin", action="store_true",
                   help="run every `eager` case in its own process; by default, on a GPU, an eager case of a "
                        "stateless scenario (forward, prefill, unet_step, ...) whose compiled twin is planned takes "
                        "the twin's eager figures instead (same process as the compiled ones; decode too, its "
                        "peak from the twin's eager first call, unless COMPILEBENCH_DEFER_COMPILED_STATE=0; "
                        "docs/RESULTS.md)")
    p.add_argument("--compile-overlap", type=int, metavar="N",
                   help="keep up to N workers alive at once on the one device: their cold compiles run side by "
                        "side, each case's timed rounds, memory and break cost alone (a lock: no other worker of "
                        "the run builds, compiles or measures then); a case that runs out of memory or time beside "
                        "another runs again alone; each record says how much of its compile overlapped others "
                        "(metrics.compile_overlap). Default: the suite's (gpu: 2; 1 with --gpus, --warm-compile or "
                        "--trace, which refuse N > 1), else 1 (one case at a time; docs/SCALING.md)")
    add_diagnostic_options(p)
    add_output_options(p, "the finished run (the run file's content)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("show", help="print a run as a table (RUN: path, run id or 'latest'; none: list the runs, "
                                          "run files and history-store-only runs)")
    p.add_argument("run", nargs="?", help="run file, run id, or 'latest'")
    p.add_argument("--out", default="results", help="results folder holding runs/")
    add_output_options(p, "the run file's content (no RUN: the run ids)")
    p.set_defaults(func=cmd_show)

    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    return parser


# options that choose what to run: --resume takes them from the run's journal instead
_SELECTION_OPTIONS = ("suite", "workload", "override_workloads", "scenario", "compiler", "device", "dtype",
                      "batch_size", "size", "timeout", "min_time", "min_samples", "warmup", "warmup_budget",
                      "max_memory_gb", "label", "shard", "shard_costs", "trace", "trace_max_mb", "warm_compile",
                      "no_eager_from_twin", "compile_overlap")


def _check_run_args(args: argparse.Namespace) -> None:
    if args.max_memory_gb is not None and not args.max_memory_gb > 0:
        raise CliError(f"--max-memory-gb {args.max_memory_gb:g} must be a positive number of GiB, e.g. 8")
    if args.resume:
        # the journal's options are the run's (ingest, preload and --gpus too): a resume given
        # others would silently not apply them
        refuse_session_options(args, _SELECTION_OPTIONS + ("workload_file", "option", "no_preload", "no_ingest", "gpus"),
                               "--resume reuses the interrupted run's own options")


def cmd_run(args: argparse.Namespace) -> int:
    from harness.run.signals import StopSignals

    with StopSignals():  # SIGINT/SIGTERM anywhere in the command, even before the plan: exit 130
        return _cmd_run(args)


def _cmd_run(args: argparse.Namespace) -> int:
    from harness.cli.diagnostics import diagnostic_run_options
    from harness.report.display import (
        ProgressPrinter,
        make_console,
        print_failures,
        print_table,
        results_table,
    )
    from harness.run.multigpu import resolve_gpus
    from harness.run.runner import RunOptions, execute, parse_option, resume, summarize_statuses
    from harness.run.store import StoreError

    _check_run_args(args)
    from compiler import load_compiler_files

    load_compiler_files(args.compiler_file)  # workers get each config as data in their spec

    opts = RunOptions(
        suite=args.suite,
        workloads=split_values(args.workload),
        workload_files=args.workload_file,
        scenarios=split_values(args.scenario),
        compilers=split_values(args.compiler),
        devices=split_values(args.device),
        dtypes=split_values(args.dtype),
        batch_sizes=batch_sizes(split_values(args.batch_size)),
        sizes=split_values(args.size),
        timeout_s=args.timeout,
        out_dir=args.out,
        label=args.label,
        policy=policy_overrides(args),
        ingest=not args.no_ingest,
        max_memory_gb=args.max_memory_gb,
        shard=args.shard,
        shard_costs=args.shard_costs,
        gpus=resolve_gpus(args.gpus or []),
        options=dict(parse_option(o) for o in args.option),
        override_workloads=args.override_workloads,
        eager_from_twin=not args.no_eager_from_twin,
        compile_overlap=args.compile_overlap,
        **diagnostic_run_options(args),
    )
    if not opts.suite and not opts.compilers:
        opts.compilers = ["inductor"]
    if not opts.suite and not opts.devices:
        opts.devices = ["cpu"]
    console = make_console(stderr=json_to_stdout(args))  # --json: stdout holds the JSON alone
    if (_resumed_run_ingests(args.resume, args.out) if args.resume else opts.ingest):
        _check_store(Path(args.out) / "history.sqlite")
    from harness.report.eta import case_times  # breadth-views: the ETA's per-case times from the store

    progress = ProgressPrinter(history=case_times(Path(args.out) / "history.sqlite"))
    ingest_error: StoreError | None = None
    try:
        run = resume(args.resume, args.out, progress) if args.resume else execute(opts, progress)
    except StoreError as exc:  # the run file was written before the ingest: say where the results are
        saved = getattr(exc, "run", None)
        error = type(exc)(f"{exc}; the run's results are kept in its run file in {Path(args.out) / 'runs'}/")
        if saved is None:
            raise error from exc
        run, ingest_error = saved, error  # its table and --json first, then the one error line (exit 3)
    except KeyboardInterrupt:
        progress.close()
        console.print("interrupted: finished cases were saved", style="yellow")
        return EXIT_INTERRUPTED
    finally:
        progress.close()
    print_table(console, results_table(run), args.format)
    print_failures(console, run)
    counts = summarize_statuses(run.records)
    console.print(f"statuses: {counts}; wall {run.config.get('wall_s', 0):.1f}s; run file {run.config.get('path')}")
    _print_gpu_summary(console, run, args.format)  # --gpus: per-GPU busy share and scaling (multigpu)
    if args.report:
        from harness.report.report import write_report

        console.print(f"report: {write_report(run, args.report)}")
    if args.json:
        print(json.dumps(run.to_dict(), indent=1, allow_nan=False, default=str))
    if ingest_error is not None:
        raise ingest_error
    failed = sum(n for s, n in counts.items() if s not in ("ok", "skipped"))
    if failed:
        return EXIT_FAILED
    empty_shard = empty_shard_note(run)
    if empty_shard:  # the shard did all it was given: merge checks the plan is covered
        console.print(empty_shard, soft_wrap=True, markup=False, highlight=False)
        return EXIT_OK
    return _nothing_measured(run, args.allow_skips)


def empty_shard_note(run) -> str | None:
    """The line of a `--shard I/N` run whose share of the plan is empty (more shards than
    cases: a CI matrix wider than the plan), else None. That shard did its whole job (exit 0);
    its run file still records the shard, and `merge` checks that the shards cover the plan. An
    empty *plan* (a selection that matches nothing) never gets here: that is exit 2."""
    shard = run.config.get("shard") or {}
    if run.records or not shard:
        return None
    planned = len(shard.get("plan_case_ids") or [])
    return (f"shard {shard.get('index')}/{shard.get('count')} holds no case of this plan ({planned} planned "
            f"case(s) over {shard.get('count')} shards): nothing to run; its run file {run.config.get('path')} "
            "records the shard for `compilebench merge`")


def _resumed_run_ingests(ref: str, out: str) -> bool:
    """Whether the run a --resume finishes goes into the store (its journal says; a journal
    that cannot be read is resume's to report, with its own message)."""
    from harness.model.schema import RunFileError
    from harness.run.journal import find_journal, read_journal

    try:
        options = read_journal(find_journal(ref, out)).header.get("options")
    except (RunFileError, OSError, ValueError):
        return False
    return bool(options.get("ingest", True)) if isinstance(options, dict) else False


def _check_store(db: Path) -> None:
    """Refuse a damaged history store before the first case, not after hours of measuring."""
    if db.is_file():
        from harness.run.store import HistoryStore

        HistoryStore(db).close()  # quick_check on open: StoreCorruptError (exit 3) names the recovery


def _nothing_measured(run, allow_skips: bool) -> int:
    """A run that measured nothing is the harness failing its job, not a pass: exit 3 (a nightly
    whose GPU driver broke must not go green). The reason of each skip is printed above it."""
    if not run.records:  # not a shard's empty share (empty_shard_note): a run of no case measured nothing
        print(f"compilebench: error: nothing to run: the run has no case; run file {run.config.get('path')}",
              file=sys.stderr)
        return EXIT_HARNESS
    return nothing_measured([r.status for r in run.records], allow_skips)


def cmd_show(args: argparse.Namespace) -> int:
    from harness.report.display import make_console, print_failures, print_table, results_table
    from harness.run.runner import resolve_run

    console = make_console()
    if not args.run:
        return _list_runs(console, args)
    run = resolve_run(args.run, args.out)
    if args.json:
        print(json.dumps(run.to_dict(), indent=1, allow_nan=False, default=str))
        return EXIT_OK
    print_table(console, results_table(run), args.format)
    print_failures(console, run)
    from harness.analysis.breadth import breadth_rows  # breadth-views: the HUD-style headline
    from harness.report.breadth_view import breadth_table

    print_table(console, breadth_table(breadth_rows(run.records)), args.format)
    _print_gpu_summary(console, run, args.format)
    return EXIT_OK


def _list_runs(console, args: argparse.Namespace) -> int:
    """`show` with no RUN: every run a RUN argument can name, oldest first: run files by their
    name, runs only the history store holds (CI keeps history.sqlite alone) marked as such."""
    from harness.run.lookup import list_runs

    entries = list_runs(args.out)
    names = [e.path.stem if e.path is not None else e.run_id for e in entries]
    if args.json:
        print(json.dumps(names))
        return EXIT_OK
    if not entries:
        console.print(f"no runs in {Path(args.out) / 'runs'} or {Path(args.out) / 'history.sqlite'}")
    for entry, name in zip(entries, names, strict=True):
        console.print(name if entry.path is not None else f"{name} (history store only: no run file)",
                      markup=False, highlight=False)
    return EXIT_OK


def _print_gpu_summary(console, run, fmt: str) -> None:
    """A --gpus run's per-GPU table and scaling lines (harness/report/gpu_view.py); nothing otherwise."""
    summary = run.config.get("multi_gpu")
    if not isinstance(summary, dict):
        return
    from harness.report.display import print_table
    from harness.report.gpu_view import gpu_table, scaling_lines

    print_table(console, gpu_table(summary), fmt)
    for line in scaling_lines(summary):
        console.print(line, soft_wrap=True, markup=False)


def _debugging(args: argparse.Namespace | None) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get("COMPILEBENCH_DEBUG", "") not in ("", "0")


def _fail(args: argparse.Namespace | None, message: str, code: int) -> int:
    """One line on stderr (the traceback too under --debug) and the exit code of its class."""
    if _debugging(args):
        traceback.print_exc()
    print(f"compilebench: error: {_one_line(message, 2000)}", file=sys.stderr)
    return code


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _os_error_line(exc: OSError, out: str | None = None) -> str:
    """One line for an OSError, with a hint about the path that failed: `--out` only when the
    file is under the command's --out (or the error names no file), else that file's folder
    (`compare --markdown /ro/c.md`, `noise -o`, `bisect --state`)."""
    what = exc.strerror or str(exc)
    if exc.filename:
        failed = Path(os.fsdecode(exc.filename))
        where = f": {failed}"
        under_out = out is not None and Path(out).resolve() in (failed.resolve(), *failed.resolve().parents)
        place, fix = failed.parent, ("point --out elsewhere" if under_out else "choose another path")
    else:
        where = f" writing under --out {out}" if out else ""
        place, fix = (Path(out) if out else None), ("point --out elsewhere" if out else "choose another path")
    on = f" on {place}" if place else ""
    hint = {errno.ENOSPC: f"free disk space{on} or {fix}",
            errno.EACCES: f"make {place or 'it'} writable or {fix}",
            errno.EROFS: f"the file system{on} is read-only; {fix}"}.get(exc.errno or -1, "")
    return f"{what}{where}" + (f" ({hint})" if hint else "")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = None
    try:
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except UserError as exc:  # every user mistake, from any layer: one line, exit 2
        return _fail(args, str(exc), EXIT_USAGE)
    except HarnessError as exc:  # the harness could not do its job: exit 3, never 1 (CI reads 1 as a regression)
        return _fail(args, str(exc), EXIT_HARNESS)
    except sqlite3.DatabaseError as exc:
        return _fail(args, f"history store: {exc} (rebuild it from the run files: compilebench store rebuild --out DIR)",
                     EXIT_HARNESS)
    except OSError as exc:  # read-only folder, disk full, missing device file...
        return _fail(args, _os_error_line(exc, getattr(args, "out", None)), EXIT_HARNESS)
    except KeyboardInterrupt:
        print("compilebench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug in the harness: still one line and exit 3, so CI never reads it as a regression
        return _fail(args, f"internal error: {type(exc).__name__}: {_one_line(str(exc))} (a compilebench bug: "
                           "rerun with --debug for the traceback and report it)", EXIT_HARNESS)


if __name__ == "__main__":
    sys.exit(main())
