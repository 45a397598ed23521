"""`compilebench coldstart` and `compilebench sweep`: the compile lifecycle commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli.common import (
    ALLOW_SKIPS_HELP,
    OVERRIDE_WORKLOADS_HELP,
    WARMUP_HELP,
    add_output_options,
    json_targets,
    json_to_stdout,
    non_negative_int,
    nothing_measured,
    positive_int,
    positive_seconds,
)
from harness.model.errors import UserError


class LifecycleError(UserError, ValueError):
    """Bad cold-start / sweep options (one line, exit 2)."""


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise LifecycleError(f"--batch-sizes {text!r}: use a comma list of positive integers, e.g. 2,4,8") from None
    if not values or min(values) < 1:
        raise LifecycleError(f"--batch-sizes {text!r}: use a comma list of positive integers, e.g. 2,4,8")
    return values


def _names(text: str | None) -> list[str]:
    return [v.strip() for v in (text or "").split(",") if v.strip()]


def _add_run_options(p: argparse.ArgumentParser, warmup_before: str) -> None:
    """The options these commands share with `run`, with its meaning: --override-workloads for
    their --workload-file, --warmup before the steady-state samples."""
    p.add_argument("--override-workloads", action="store_true", help=OVERRIDE_WORKLOADS_HELP)
    p.add_argument("--warmup", type=non_negative_int, default=3,
                   help=f"{WARMUP_HELP} (default 3), as in run: {warmup_before}")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("coldstart", help="cold-start table: JIT cold/warm, Mega-Cache, aot_compile and AOTInductor loads, "
                                         "each in a fresh process")
    p.add_argument("--workload", "-w", default="mlp-deep")
    p.add_argument("--workload-file", action="append", default=[])
    p.add_argument("--size", default="tiny")
    p.add_argument("--batch-size", type=positive_int)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--rows", help="comma list of rows (default: all): jit_cold,jit_warm,mega_cache,aot_compile,"
                                  "aot_compile_warm,aoti")
    p.add_argument("--steady-calls", type=positive_int, default=30)
    _add_run_options(p, "before each row's steady-state calls (eager and the row's artifact, interleaved)")
    p.add_argument("--timeout", type=positive_seconds, default=600.0, help="seconds per process, > 0")
    p.add_argument("--out", dest="workdir", metavar="DIR", help="output folder: keep artifacts, caches and each "
                   "row's result JSON here (default: a temporary folder, removed at the end)")
    p.add_argument("--workdir", dest="workdir", help=argparse.SUPPRESS)  # the old spelling of --out
    p.add_argument("--allow-skips", action="store_true", help=ALLOW_SKIPS_HELP)
    add_output_options(p, "the full result", json_file=True)
    p.set_defaults(func=cmd_coldstart)

    p = sub.add_parser("sweep", help="shape sweep: recompiles, compile time and latency per shape under "
                                     "dynamic=False / automatic / True / mark_dynamic")
    p.add_argument("--workload", "-w", default="mlp-deep")
    p.add_argument("--workload-file", action="append", default=[])
    p.add_argument("--size", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch-sizes", default="2,4,8,16")
    p.add_argument("--policies", help="comma list (default: all): static,automatic,dynamic,mark_dynamic")
    p.add_argument("--compiler", "-c", help="compiler config to sweep, as in `run -c` (default inductor): a "
                   "backend-only one (inductor, aot_eager, cudagraphs, eager), since the sweep sets dynamic= itself")
    p.add_argument("--backend", help=argparse.SUPPRESS)  # the old spelling: a torch._dynamo backend name
    p.add_argument("--triggers", help="extra recompile triggers after the sweep: dtype,device")
    p.add_argument("--recompile-limit", type=positive_int, help="Dynamo recompile_limit (default: torch's, 8)")
    p.add_argument("--steady-calls", type=positive_int, default=10)
    _add_run_options(p, "at each shape, after its first (compiling) call, before its steady-state calls")
    p.add_argument("--timeout", type=positive_seconds, default=600.0, help="seconds per process, > 0")
    add_output_options(p, "the full result", json_file=True)
    p.set_defaults(func=cmd_sweep)


def _write_json(targets: list[str], data: dict) -> None:
    """--json on stdout, --json-file into a file."""
    for target in targets:
        if target == "-":
            import json

            print(json.dumps(data, indent=1, allow_nan=False, default=str))
        else:
            from harness.model.schema import write_json_atomic

            write_json_atomic(Path(target), data)
            print(f"written: {target}", file=sys.stderr)


def _failed(rows: list[dict]) -> bool:
    return any(r.get("status") != "ok" for r in rows)


def cmd_coldstart(args: argparse.Namespace) -> int:
    from harness.experiments.lifecycle import ROWS, ColdStartOptions, coldstart, coldstart_table
    from harness.report.display import make_console, print_table

    rows = _names(args.rows) or list(ROWS)
    bad = [r for r in rows if r not in ROWS]
    if bad:
        raise LifecycleError(f"--rows {','.join(bad)}: unknown; rows are {','.join(ROWS)}")
    console = make_console(stderr=json_to_stdout(args))
    result = coldstart(ColdStartOptions(workload=args.workload, size=args.size, batch_size=args.batch_size,
                                        device=args.device, dtype=args.dtype, rows=rows, workload_files=args.workload_file,
                                        override_workloads=args.override_workloads, steady_calls=args.steady_calls,
                                        warmup=args.warmup, timeout_s=args.timeout, workdir=args.workdir),
                       progress=lambda r: console.print(_progress_line(r), highlight=False))
    print_table(console, coldstart_table(result), args.format)
    for r in result["rows"] + result["builds"]:
        if r.get("status") != "ok":
            colour = "yellow" if r.get("status") == "skipped" else "red"
            console.print(f"[{colour}]{r['row']} ({r.get('kind', '')}): {r.get('status')}: {r.get('error', '')[:500]}")
    _write_json(json_targets(args), result)
    # a skipped row (a feature this torch lacks) is an answer, not a failure; all of them skipped measured nothing
    done = result["rows"] + result["builds"]
    if _failed([r for r in done if r.get("status") != "skipped"]):
        return 1
    return nothing_measured([r.get("status", "") for r in result["rows"]], args.allow_skips, "row")


def _progress_line(r: dict) -> str:
    """One line per finished row or build, printed as it happens."""
    ttfr = f", first result {r['ttfr_s']:.2f} s" if r.get("ttfr_s") is not None else ""
    why = f": {r.get('error', '')[:200]}" if r.get("status") != "ok" else ""
    return f"  {r['row']} ({r.get('kind', '')}): {r.get('status')} in {r.get('process_wall_s', 0):.1f} s{ttfr}{why}"


def _sweep_backend(args: argparse.Namespace) -> str:
    """The torch._dynamo backend of -c/--compiler (or of the old --backend)."""
    if args.compiler and args.backend:
        raise LifecycleError("pass -c/--compiler or --backend (its old spelling), not both")
    if args.backend:
        return args.backend
    from compiler import get_compiler

    config = get_compiler(args.compiler or "inductor")
    extra = [f for f, v in (("mode", config.mode), ("options", config.options), ("fullgraph", config.fullgraph),
                            ("dynamic", config.dynamic), ("inplace", config.inplace), ("regional", config.regional)) if v]
    if extra:
        raise LifecycleError(f"-c {config.name}: the sweep compiles with a backend alone and sets dynamic= itself, "
                             f"so its {', '.join(extra)} would be ignored; use inductor, aot_eager, cudagraphs or eager")
    return config.backend or "eager"


def cmd_sweep(args: argparse.Namespace) -> int:
    from harness.experiments.shapes import POLICIES, SweepOptions, sweep, sweep_table
    from harness.report.display import make_console, print_table

    policies = _names(args.policies) or list(POLICIES)
    bad = [p for p in policies if p not in POLICIES]
    if bad:
        raise LifecycleError(f"--policies {','.join(bad)}: unknown; policies are {','.join(POLICIES)}")
    triggers = _names(args.triggers)
    if any(t not in ("dtype", "device") for t in triggers):
        raise LifecycleError(f"--triggers {args.triggers}: use dtype and/or device")
    result = sweep(SweepOptions(workload=args.workload, size=args.size, device=args.device, dtype=args.dtype,
                                batch_sizes=_ints(args.batch_sizes), policies=policies, backend=_sweep_backend(args),
                                triggers=triggers, recompile_limit=args.recompile_limit, steady_calls=args.steady_calls,
                                warmup=args.warmup, workload_files=args.workload_file,
                                override_workloads=args.override_workloads, timeout_s=args.timeout))
    console = make_console(stderr=json_to_stdout(args))
    print_table(console, sweep_table(result), args.format)
    for r in result["policies"]:
        if r.get("recompile_limit_hit"):
            console.print(f"[yellow]{r['policy']}: hit recompile_limit={r['recompile_limit']}: Dynamo fell back to eager "
                          f"for later shapes ({r['recompile_limit_messages'][0]})")
        if r.get("status") != "ok":
            console.print(f"[red]{r['policy']}: {r.get('status')}: {r.get('error', '')[:500]}")
    _write_json(json_targets(args), result)
    return 1 if _failed(result["policies"]) else 0

