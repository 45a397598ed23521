"""What every command module shares: exit codes, the CLI's own user error, option helpers.

Command modules import this, never harness.cli.main (main imports them to register their
subcommands, so the other direction would be a circle).

Exit codes, the same for every command (README "Exit codes"; `compilebench --help`):
0 ok; 1 the thing measured or judged failed (a case failed, a regression); 2 bad usage or
bad input (one line on stderr: the problem and the fix); 3 the harness could not do its job
(I/O error, disk full, corrupt store, nothing to compare, nothing measured); 130 interrupted.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from harness.model.errors import HarnessError, UserError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_HARNESS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

EXIT_CODES_HELP = ("exit codes: 0 ok; 1 a case failed or a regression was found; 2 bad usage or input "
                   "(one line: the problem and the fix); 3 the harness could not do its job (I/O error, disk "
                   "full, corrupt store, nothing compared, nothing measured); 130 interrupted. "
                   "COMPILEBENCH_DEBUG=1 or --debug shows the traceback of an error.")

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_HARNESS", "EXIT_INTERRUPTED", "EXIT_CODES_HELP", "CliError",
           "HarnessError", "UserError", "split_values", "batch_sizes", "Parser"]


class CliError(UserError):
    """A user mistake found by the CLI itself."""


def split_values(values: Sequence[str] | None) -> list[str]:
    """Repeatable options that also accept comma lists: -w a -w b,c -> [a, b, c]."""
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def batch_sizes(values: Sequence[str]) -> list[int]:
    """--batch-size values as positive integers; anything else is a one-line usage error."""
    out = []
    for v in values:
        if not v.isdigit() or int(v) < 1:
            raise CliError(f"--batch-size {v!r} is not a positive integer")
        out.append(int(v))
    return out


class Parser(argparse.ArgumentParser):
    """argparse with compilebench's conventions, for the top level and every subcommand alike:
    usage errors are one line and exit 2; `--help` ends with the exit-code table; `--debug`
    is accepted before or after the subcommand (`compilebench --debug run ...` and
    `compilebench run ... --debug`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        epilog = kwargs.get("epilog")
        kwargs["epilog"] = f"{epilog} {EXIT_CODES_HELP}" if epilog else EXIT_CODES_HELP
        super().__init__(*args, **kwargs)
        # SUPPRESS: a subcommand that does not see --debug must not reset the top level's True
        self.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                          help="show the traceback of an error (also COMPILEBENCH_DEBUG=1)")

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"compilebench: error: {message} (see `{self.prog} --help`)\n")
