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
import math
from collections.abc import Callable, Sequence
from typing import Any

from harness.model.errors import HarnessError, UserError
from harness.report.display import FORMATS

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_HARNESS, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

EXIT_CODES_HELP = ("exit codes: 0 ok; 1 a case failed or a regression was found; 2 bad usage or input "
                   "(one line: the problem and the fix); 3 the harness could not do its job (I/O error, disk "
                   "full, corrupt store, nothing compared, machine contended, nothing measured); 130 interrupted. "
                   "COMPILEBENCH_DEBUG=1 or --debug shows the traceback of an error.")

__all__ = ["EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "EXIT_HARNESS", "EXIT_INTERRUPTED", "EXIT_CODES_HELP", "CliError",
           "HarnessError", "UserError", "split_values", "batch_sizes", "Parser", "positive_seconds",
           "non_negative_seconds", "positive_int", "non_negative_int", "positive_number", "OVERRIDE_WORKLOADS_HELP",
           "WARMUP_HELP", "WARMUP_BUDGET_HELP", "add_policy_options", "policy_overrides", "add_output_options",
           "json_to_stdout", "json_targets", "FORMAT_HELP", "nothing_measured", "ALLOW_SKIPS_HELP",
           "given_options", "refuse_session_options"]

ALLOW_SKIPS_HELP = ("exit 0, not 3, when everything was skipped (e.g. a GPU suite on a box without one, a "
                    "feature this torch lacks): by default a command that measured nothing fails the CI job")

FORMAT_HELP = ("how tables print: auto (default: a table on a terminal, plain aligned text in a pipe or CI "
               "log, never cut or wrapped), table, plain, markdown")

WARMUP_HELP = "untimed calls per variant before sampling, >= 0"  # --warmup, everywhere cases are timed; + its default
WARMUP_BUDGET_HELP = ("seconds of warm-up: rounds at the first round's pace until they reach this, so fewer than "
                      "--warmup only where a round takes a large share of it (3 rounds: half); never below 2 where peak memory is "
                      "read on the last; 0 = always --warmup (default: the suite's, else 0)")


def add_policy_options(p: argparse.ArgumentParser, warmup_default: str = "the suite's, else 3") -> None:
    """--min-time, --min-samples, --warmup and --warmup-budget: the stop policy's overrides,
    the same wherever cases are timed (run, ab, envs); read back by policy_overrides."""
    p.add_argument("--min-time", type=non_negative_seconds, help="minimum timed seconds per case (with --min-samples)")
    p.add_argument("--min-samples", type=positive_int, help="minimum samples per variant, >= 1")
    p.add_argument("--warmup", type=non_negative_int, help=f"{WARMUP_HELP} (default: {warmup_default})")
    p.add_argument("--warmup-budget", type=non_negative_seconds, metavar="SECONDS", help=WARMUP_BUDGET_HELP)


def policy_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The StopPolicy fields the command line sets (add_policy_options), by field name."""
    fields = {"min_time": "min_time_s", "min_samples": "min_samples", "warmup": "warmup",
              "warmup_budget": "warmup_budget_s"}
    return {field: getattr(args, arg) for arg, field in fields.items() if getattr(args, arg, None) is not None}

OVERRIDE_WORKLOADS_HELP = ("let a --workload-file replace a workload already registered under the same name (a "
                           "built-in): without it that is an error, since its numbers would go into the history "
                           "under the built-in's name")


class CliError(UserError):
    """A user mistake found by the CLI itself."""


def given_options(args: argparse.Namespace, options: Sequence[str]) -> list[str]:
    """The `options` the command line set. Left out means None, False or an empty list or string;
    a 0 was given (`--warmup 0` is a choice), which a truthiness test would drop."""
    def left_out(value: Any) -> bool:
        return value is None or value is False or (isinstance(value, (list, tuple, str)) and not value)
    return [o for o in options if not left_out(getattr(args, o, None))]


def refuse_session_options(args: argparse.Namespace, options: Sequence[str], why: str) -> None:
    """--resume takes what the session fixed from its journal: any of `options` given too is an error."""
    given = given_options(args, options)
    if given:
        raise CliError(f"{why}; drop {', '.join('--' + o.replace('_', '-') for o in given)}")


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
        if int(v) >= 2 ** 31:  # the history store keeps it as an integer; no model takes such a batch
            raise CliError(f"--batch-size {v} is out of range; pass a batch size under 2**31")
        out.append(int(v))
    return out


def _number(kind: Callable[[str], float], test: Callable[[float], bool], want: str, example: str) -> Callable[[str], float]:
    """An argparse `type=`: the value parsed and checked at the edge, before anything runs;
    a bad one is argparse's one-line usage error (exit 2) saying what is wanted."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {want}, e.g. {example}") from None
        if not (math.isfinite(value) and test(value)):
            raise argparse.ArgumentTypeError(f"{text} is not {want}, e.g. {example}")
        return value

    parse.__name__ = want  # argparse names the type in some messages
    return parse


positive_seconds = _number(float, lambda v: v > 0, "a positive number of seconds", "600")
non_negative_seconds = _number(float, lambda v: v >= 0, "a number of seconds >= 0", "0.5")
positive_int = _number(int, lambda v: v >= 1, "an integer >= 1", "5")
non_negative_int = _number(int, lambda v: v >= 0, "an integer >= 0", "3")
positive_number = _number(float, lambda v: v > 0, "a positive number", "0.1")


def add_output_options(p: argparse.ArgumentParser, what: str, json_file: bool = False) -> None:
    """--format and --json, the same in every command that prints a table. `--json` is a flag
    everywhere: `what` as JSON on stdout (the human output moves to stderr). With `json_file`,
    `--json-file PATH` writes it to PATH instead and the table prints as usual (one flag that
    takes no value, one that always takes one: `--json A.json B.json` cannot swallow a RUN)."""
    p.add_argument("--format", choices=FORMATS, default="auto", help=FORMAT_HELP)
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout (the tables go to stderr)")
    if json_file:
        p.add_argument("--json-file", metavar="PATH", help=f"write {what} as JSON to PATH (the tables print as usual)")


def json_targets(args: argparse.Namespace) -> list[str]:
    """Where the JSON goes: '-' (stdout) for --json, the path of --json-file; both may be given."""
    return (["-"] if getattr(args, "json", False) else []) + ([args.json_file] if getattr(args, "json_file", None) else [])


def nothing_measured(statuses: Sequence[str], allow_skips: bool, what: str = "case") -> int:
    """EXIT_HARNESS, with its one line on stderr, when there was something to measure and all
    of it was skipped (the reasons are printed above by the command); else EXIT_OK. A nightly
    whose GPU driver broke must not go green."""
    if statuses and all(s == "skipped" for s in statuses) and not allow_skips:
        import sys

        print(f"compilebench: error: nothing measured: all {len(statuses)} {what}(s) were skipped (reasons above); "
              "pass --allow-skips if that is expected", file=sys.stderr)
        return EXIT_HARNESS
    return EXIT_OK


def json_to_stdout(args: argparse.Namespace) -> bool:
    """True when --json asked for JSON on stdout: human output must then go to stderr."""
    return getattr(args, "json", None) is True


def _chosen_subparser(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser | None:
    command = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    return command.choices.get(getattr(parsed, command.dest, None) or "") if command else None


def _take_trailing_positionals(parser: argparse.ArgumentParser, parsed: argparse.Namespace,
                               extras: list[str]) -> list[str]:
    """Plain words argparse left over go to the subcommand's list positional (nargs * or +).
    argparse fills a `*` list with nothing when an option follows the word before it, so
    `expected check --file F RUN` left RUN "unrecognized" while `expected check RUN --file F`
    worked. This is the intermixed parsing of parse_intermixed_args, which refuses subparsers."""
    chosen = _chosen_subparser(parser, parsed)
    if chosen is None or not extras or any(word.startswith("-") for word in extras):
        return extras
    lists = [a for a in chosen._actions if not a.option_strings and a.nargs in ("*", "+")]
    if len(lists) != 1:
        return extras
    setattr(parsed, lists[0].dest, list(getattr(parsed, lists[0].dest, None) or []) + extras)
    return []


class Parser(argparse.ArgumentParser):
    """argparse with compilebench's conventions, for the top level and every subcommand alike:
    usage errors are one line and exit 2; `--help` ends with the exit-code table; `--debug`
    is accepted before or after the subcommand (`compilebench --debug run ...` and
    `compilebench run ... --debug`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        epilog = kwargs.get("epilog")
        kwargs["epilog"] = EXIT_CODES_HELP if not epilog or epilog == EXIT_CODES_HELP else f"{epilog} {EXIT_CODES_HELP}"
        super().__init__(*args, **kwargs)
        # SUPPRESS: a subcommand that does not see --debug must not reset the top level's True
        self.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                          help="show the traceback of an error (also COMPILEBENCH_DEBUG=1)")

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """Arguments no parser took are reported by the subcommand they followed, so the hint
        is `compilebench compare --help`, not the top level's."""
        parsed, extras = self.parse_known_args(args, namespace)
        extras = _take_trailing_positionals(self, parsed, extras)
        if extras:
            (_chosen_subparser(self, parsed) or self).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"compilebench: error: {message} (see `{self.prog} --help`)\n")
