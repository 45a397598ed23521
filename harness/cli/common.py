"""What every command module shares: exit codes, the CLI's own user error, option helpers.

Command modules import this, never harness.cli.main (main imports them to register their
subcommands, so the other direction would be a circle).

Exit codes: 0 success, 1 some case failed (run) or a regression (compare/gate),
2 usage or input error (one line on stderr naming the problem and the fix), 130 interrupted.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from harness.model.errors import UserError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


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
    """argparse with compilebench's usage errors: one line and exit 2, like every other."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"compilebench: error: {message} (see `{self.prog} --help`)\n")
