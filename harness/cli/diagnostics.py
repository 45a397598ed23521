"""Options shared by the commands that run workers (run, ab, bisect): --trace and --warm-compile.

They land in `RunOptions` (trace, trace_max_mb, warm_compile), which is how the runner, the A/B
loop and bisect hand them to `run_worker`."""

from __future__ import annotations

import argparse
from typing import Any


def add_diagnostic_options(p: argparse.ArgumentParser, trace_dir: str = "OUT/traces/<run_id>/<case>/") -> None:
    """`trace_dir`: where this command's traces go, as its --help should say it."""
    p.add_argument("--trace", action="store_true",
                   help=f"write a TORCH_TRACE log per case under {trace_dir} and, when tlparse is "
                        "installed (pip install 'compilebench[trace]'), tlparse's HTML next to it; the report links it")
    p.add_argument("--trace-max-mb", type=float, metavar="MB",
                   help="cap each case's trace log at this many MiB (default 64); a cut is noted in the record")
    p.add_argument("--warm-compile", action="store_true",
                   help="after each case, compile it again in a fresh process on the populated Inductor cache: "
                        "the warm compile time and which cache layer hit go into the record")
    p.add_argument("--no-preload", action="store_true",
                   help="start every case as a fresh interpreter instead of forking it from a server that "
                        "imported torch once (slower; for comparing the two paths or debugging a fork problem). "
                        "COMPILEBENCH_PRELOAD_GPU=0 spawns only the cases on a GPU")


def diagnostic_run_options(args: argparse.Namespace) -> dict[str, Any]:
    """RunOptions fields from the flags above; a bad combination is a one-line CliError."""
    from harness.cli.common import CliError

    max_mb = getattr(args, "trace_max_mb", None)
    if max_mb is not None:
        if not getattr(args, "trace", False):
            raise CliError("--trace-max-mb only applies with --trace; add --trace or drop --trace-max-mb")
        if not max_mb > 0:
            raise CliError(f"--trace-max-mb {max_mb:g} must be a positive number of MiB, e.g. 64")
    return {"trace": bool(getattr(args, "trace", False)), "trace_max_mb": max_mb,
            "warm_compile": bool(getattr(args, "warm_compile", False)),
            "preload": not getattr(args, "no_preload", False)}
