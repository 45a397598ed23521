"""Commands: compare, gate, ab, noise, expected, import-pytest-benchmark, export-pytest-benchmark.

Exit codes (as for every compilebench command): 0 clean, 1 regression, a failing verdict (or
a failed expected check), 2 usage or input error (one line on stderr), 3 the comparison
could not judge: nothing compared (no case in both), nothing judged, machine contended.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.analysis.compare import METRICS, Comparison, compare_runs
from harness.analysis.verdicts import DEFAULT_FAIL_ON, VERDICT_ORDER, Outcome, Verdict, parse_verdict
from harness.cli.common import (
    EXIT_FAILED,
    EXIT_HARNESS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    OVERRIDE_WORKLOADS_HELP,
    CliError,
    add_output_options,
    add_policy_options,
    json_targets,
    json_to_stdout,
    positive_int,
    positive_seconds,
    refuse_session_options,
)
from harness.model.schema import Run, RunFileError

# a missing case fails both by default (DEFAULT_FAIL_ON has it: a model that stopped running is a
# failure); `gate` is the CI spelling of compare, kept for the workflows that call it
GATE_FAIL_ON = DEFAULT_FAIL_ON
EXIT_FOR = {Outcome.FAIL: EXIT_FAILED, Outcome.CANNOT_JUDGE: EXIT_HARNESS, Outcome.PASS: EXIT_OK}


def register(sub: argparse._SubParsersAction) -> None:
    for name, fail_on, help_text in (
        ("compare", DEFAULT_FAIL_ON, "compare two runs case by case; exit 1 on a regression or a missing case, "
                                     "3 when nothing could be compared or judged"),
        ("gate", GATE_FAIL_ON, "compare for CI (the same verdicts and exit codes as compare)"),
    ):
        p = sub.add_parser(name, help=help_text, description=help_text + ". BASE/HEAD: run files, run ids "
                           "(in OUT/runs or the history store), 'latest', 'latest~N' (e.g. latest~1:suite=cpu: the "
                           "previous cpu run), or folders of run files (all of them: "
                           "repeated runs or ab rounds count as several processes).")
        p.add_argument("base", help="base run(s): file, run id, folder")
        p.add_argument("head", help="head run(s): file, run id, folder")
        _compare_options(p, fail_on)
        p.set_defaults(func=cmd_compare)

    p = sub.add_parser("ab", help="A/B on this machine: the same cases under two Pythons, interleaved, then compare",
                       description="Run cases alternately under --base-python and --head-python (per case and per "
                                   "round), save each side-round as a run file, and compare. 4+ rounds test one "
                                   "median per process: the most noise-robust gate.")
    p.add_argument("--base-python", help="python of the base environment (e.g. main's venv)")
    p.add_argument("--head-python", help="python of the head environment (e.g. the PR's venv)")
    p.add_argument("--env", action="append", default=[], help="instead of --base/--head-python, twice: base then "
                   "head, each NAME=PYTHON or NAME=SPEC (e.g. --env old=torch==2.12.1 --env new=torch==2.13.0: "
                   "cached venvs); different torch versions are the point, so they are not refused")
    p.add_argument("--resume", metavar="AB_ID", help="finish an interrupted session (a CI job that timed out, "
                   "Ctrl-C) from its journal (OUT/ab/AB_ID/journal.jsonl): runs only the side-rounds it lacks, with "
                   "the session's own sides, selection, rounds, stop policy and stop rule (other --thresholds or "
                   "--metric are refused), then compares as usual")
    p.add_argument("--rounds", type=int, default=None, help="processes per case and side (default 8: the setup "
                   "whose error rates docs/GATING.md measured, 0 false failures in 20 A/A sessions and every +15%% "
                   "slowdown caught; 4 is the floor of the per-process test)")
    p.add_argument("--adaptive", action=argparse.BooleanOptionalAction, default=None,
                   help="stop measuring a case once its verdict is decided (a group-sequential rule, "
                        "docs/GATING.md 'Adaptive rounds'), up to --rounds; the gate judges the rounds measured "
                        "(default on: 64 real sessions gave the fixed rounds' exit code every time, with 5-6 "
                        "processes per side instead of 8 on a quiet box, 7-8 on a noisier one); --no-adaptive "
                        "measures every round")
    p.add_argument("--base-env", action="append", default=[], metavar="KEY=VALUE", help="env var for base workers")
    p.add_argument("--head-env", action="append", default=[], metavar="KEY=VALUE", help="env var for head workers")
    selection_options(p)
    from harness.cli.diagnostics import add_diagnostic_options

    add_diagnostic_options(p)
    _compare_options(p, GATE_FAIL_ON, with_out=False)
    p.set_defaults(func=cmd_ab)

    p = sub.add_parser("noise", help="A/A on this machine: per-case spread and the smallest change the gate detects")
    p.add_argument("--rounds", type=positive_int, default=None, help="A/A rounds (2 processes per case per round; "
                   "at least 3, the default: 6 processes give the 15 pairs the 95th-percentile A/A change needs)")
    p.add_argument("-o", "--output", help="write the noise JSON here (for compare --noise)")
    p.add_argument("--python", default=None, help="python to measure with (default: this one)")
    p.add_argument("--resume", metavar="ID", help="finish an interrupted noise session (Ctrl-C, a CI timeout) from "
                   "its journal (OUT/ab/ID/journal.jsonl): runs only the side-rounds it lacks, with the session's "
                   "own python, cases and rounds, then analyses all of them")
    p.add_argument("--thresholds", help="thresholds TOML the too-noisy flags are judged against")
    p.add_argument("--from-runs", nargs="+", metavar="RUN", help="analyse these A/A runs instead of running "
                   "(at least 6: two per round)")
    add_output_options(p, "the noise table", json_file=True)
    selection_options(p)
    p.set_defaults(func=cmd_noise)

    p = sub.add_parser("expected", help="check, update or pick from the committed expected results (status, "
                       "accuracy, graph breaks, recompiles, graphs per case)",
                       description="Expected results per model, like PyTorch CI's expected CSVs. check: exit 1 on "
                                   "any difference from the file, improvements included, each named. update: "
                                   "rewrite the file from the run(s). pick: one workload per model family (from "
                                   "--file and/or runs), comma-separated for `run -w`: a small CI subset.")
    p.add_argument("action", choices=("check", "update", "pick"))
    p.add_argument("run", nargs="*", help="run file(s), run id(s) or 'latest' (check/update: at least one)")
    p.add_argument("--file", help="expected file (default: results/expected/<suite>-<device>.json under the "
                                  "current directory, whatever --out is; a run that is not a suite run needs --file)")
    p.add_argument("--complete", action="store_true", help="check: also fail when an expected case was not run")
    p.add_argument("--per-family", type=int, default=1, help="pick: workloads per family (default 1)")
    p.add_argument("--max-families", type=int, help="pick: at most this many families, spread evenly over them")
    p.add_argument("--out", default="results", help="results folder holding runs/ (where RUN is looked up)")
    p.set_defaults(func=cmd_expected)

    p = sub.add_parser("import-pytest-benchmark", help="ingest pytest-benchmark JSON as a compilebench run")
    p.add_argument("file", help="pytest-benchmark JSON (pytest --benchmark-json FILE)")
    p.add_argument("--out", default="results", help="results folder (run file in OUT/runs/)")
    p.add_argument("--no-ingest", action="store_true", help="do not add the run to OUT/history.sqlite")
    p.set_defaults(func=cmd_import_pytest)

    p = sub.add_parser("export-pytest-benchmark", help="write a run as pytest-benchmark JSON")
    p.add_argument("run", help="run file, run id or 'latest'")
    p.add_argument("-o", "--output", required=True, help="JSON file to write (pytest-benchmark compare reads it)")
    p.add_argument("--out", default="results", help="results folder holding runs/")
    p.set_defaults(func=cmd_export_pytest)


def _compare_options(p: argparse.ArgumentParser, fail_on: Sequence[str], with_out: bool = True) -> None:
    p.add_argument("--thresholds", help="TOML file of threshold overrides (per suite, workload, case)")
    p.add_argument("--metric", action="append", help=f"only these metrics ({', '.join(METRICS)})")
    p.add_argument("--fail-on", default=",".join(fail_on),
                   help=f"verdicts that fail (exit 1), comma list of: {', '.join(VERDICT_ORDER)}")
    p.add_argument("--allow-mismatch", action="store_true",
                   help="compare even when hardware or compiler versions differ (warns loudly)")
    p.add_argument("--whole-model", choices=("fail", "warn"), default=None,
                   help="what a whole-model change does: `slower (eager too)`, eager slowed with the compiled "
                        "code on a steady machine (a torch or model change). fail (default) or warn, for gates "
                        "that judge the compiler alone; beats the thresholds file's whole_model key")
    p.add_argument("--missing", choices=("fail", "warn"), default=None,
                   help="what a case measured in base and not in head does: fail (default: a model that stopped "
                        "running is a failure) or warn; beats the thresholds file's missing key")
    p.add_argument("--still-failing", choices=("pass", "fail"), default=None,
                   help="what a case that failed in base and fails in head does: pass (default: a failure that "
                        "was there before is not this change's regression; it is listed in the summary and the "
                        "markdown's 'Still failing' section) or fail (exit 1), for a gate that wants every "
                        "case green; beats the thresholds file's still_failing key")
    p.add_argument("--contended", choices=("cannot-judge", "warn"), default=None,
                   help="what a case timed on a contended machine does (the worker's run-queue measurement): "
                        "cannot-judge (default: exit 3, neither pass nor regression) or warn; beats the thresholds "
                        "file's contended key")
    p.add_argument("--noise", help="noise JSON from `compilebench noise` on this machine: a one-process-per-side "
                   "speedup/latency change inside its A/A band (mdc_single) is `noisy`, not a verdict; cases too "
                   "noisy to judge are flagged")
    p.add_argument("--markdown", metavar="FILE", help="write GitHub markdown here ('-': stdout; "
                   "e.g. $GITHUB_STEP_SUMMARY)")
    add_output_options(p, "the comparison", json_file=True)
    p.add_argument("--all", action="store_true", help="terminal table: show unchanged cases too")
    if with_out:
        p.add_argument("--out", default="results", help="results folder holding runs/ and history.sqlite")


def selection_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", help="named suite, e.g. smoke")
    p.add_argument("--workload", "-w", action="append", help="workload name(s)")
    p.add_argument("--workload-file", action="append", default=[], help="load @workload factories from this .py file")
    p.add_argument("--override-workloads", action="store_true", help=OVERRIDE_WORKLOADS_HELP)
    p.add_argument("--scenario", action="append", help="scenario(s)")
    p.add_argument("--compiler", "-c", action="append", help="compiler config name(s)")
    p.add_argument("--device", action="append", help="device(s)")
    p.add_argument("--dtype", action="append", help="float32, float16, bfloat16, float64 (default: the workload's)")
    p.add_argument("--batch-size", action="append", help="batch size(s) (default: the workload's)")
    p.add_argument("--size", action="append", help="tiny or full")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="workload option, e.g. new_tokens=16 (repeatable; as for `run`)")
    p.add_argument("--timeout", type=positive_seconds, help="seconds per case, > 0")
    add_policy_options(p, warmup_default="the suite's, else 3; as in run")
    p.add_argument("--out", default="results", help="output folder")
    p.add_argument("--label", default="", help="label stored in the runs")


# ---------------------------------------------------------------- loading runs

def load_side(ref: str, out_dir: str | Path) -> list[Run]:
    """Runs named by a folder of run files, or by any RUN spelling (harness.run.lookup: a file,
    a run id in runs/ or the history store, latest, latest~N[:suite=..,label=..])."""
    from harness.model.schema import load_run
    from harness.run.lookup import resolve_run

    path = Path(ref)
    if path.is_dir():
        files = sorted(path.rglob("*.json"))
        if not files:
            raise RunFileError(f"{path}: folder holds no run files (*.json)")
        return [load_run(f) for f in files]
    return [resolve_run(ref, out_dir)]


def _fail_on(text: str) -> tuple[Verdict, ...]:
    words = [w for w in text.split(",") if w.strip()]
    if not words:  # an unset CI variable (`--fail-on "$FAIL_ON"`) must not switch the gate off
        raise CliError(f"--fail-on {text!r} names no verdict; give a comma list of: {', '.join(VERDICT_ORDER)} "
                       f"(or leave it out for the default: {', '.join(DEFAULT_FAIL_ON)})")
    values = tuple(parse_verdict(w) for w in words)
    for word, value in zip(words, values, strict=True):
        if value is None:
            raise CliError(f"--fail-on {word.strip()!r} is not a verdict; use a comma list of: "
                           f"{', '.join(VERDICT_ORDER)}")
    return values  # type: ignore[return-value]


def _metrics(values: Sequence[str] | None) -> list[str] | None:
    from harness.cli.common import split_values

    names = split_values(values)
    bad = [n for n in names if n not in METRICS]
    if bad:
        raise CliError(f"--metric {bad[0]!r} is unknown; use one of {', '.join(METRICS)}")
    return names or None


def write_output(target: str, text: str) -> None:
    from harness.model.schema import write_text_atomic

    if target == "-":
        sys.stdout.write(text)
    else:
        write_text_atomic(target, text)


def render(cmp: Comparison, args: argparse.Namespace, versions: str = "") -> int:
    """Print the table, write markdown/JSON as asked; return the exit code: 1 for a failing
    verdict, 3 when the comparison could not judge (nothing compared, nothing judged, machine
    contended), else 0. `versions` (ab) names the builds on each side in the summary and the
    markdown title."""
    from harness.report.display import make_console, print_table
    from harness.report.gate_output import geomean_line, headline, json_text, markdown, terminal_table

    fail_on = _fail_on(args.fail_on)
    decision = cmp.decide(cmp.failing(fail_on))
    console = make_console(stderr=json_to_stdout(args) or args.markdown == "-")
    for warning in cmp.warnings:
        console.print(f"WARNING: {warning}", style="bold yellow", highlight=False)
    if cmp.cases:  # off a terminal (a CI log, a pipe): plain aligned text, nothing cut or wrapped
        print_table(console, terminal_table(cmp, show_all=args.all), args.format)
    for case in cmp.cases:
        for flag in case.flags:
            console.print(f"{case.case_id}: {flag}", style="yellow", highlight=False, markup=False)
    if versions:
        console.print(f"versions: {versions}", style="bold", highlight=False, markup=False)
    console.print(geomean_line(cmp), highlight=False, markup=False)
    line = headline(cmp, decision)
    style = {Outcome.FAIL: "bold red", Outcome.CANNOT_JUDGE: "bold magenta"}.get(decision.outcome, "bold green")
    console.print(line, style=style, highlight=False, markup=False)
    if args.markdown:
        title = f"compilebench {args.command}" + (f": {versions}" if versions else "")
        write_output(args.markdown, markdown(cmp, decision.failing, title=title))
    for target in json_targets(args):
        write_output(target, json_text(cmp, decision.failing, fail_on) + "\n")
    if decision.outcome is Outcome.CANNOT_JUDGE:  # the one line a CI log shows for exit 3
        print(f"compilebench: error: {decision.reason}", file=sys.stderr)
    return EXIT_FOR[decision.outcome]


def _compare(base: list[Run], head: list[Run], args: argparse.Namespace, ignore_fields: Sequence[str] = ()) -> Comparison:
    from harness.analysis.noise import load_noise_table
    from harness.analysis.thresholds import load_thresholds

    config = load_thresholds(args.thresholds)
    config.whole_model_override = getattr(args, "whole_model", None)
    config.policy_overrides["missing"] = getattr(args, "missing", None)
    config.policy_overrides["contended"] = getattr(args, "contended", None)
    config.policy_overrides["still_failing"] = getattr(args, "still_failing", None)
    noise = load_noise_table(args.noise) if args.noise else None
    _fail_on(args.fail_on)  # validate before any work
    if getattr(args, "markdown", None) == "-" and json_to_stdout(args):
        raise CliError("--json and --markdown - both write to stdout, which then parses as neither; "
                       "send one to a file (--markdown FILE or --json-file FILE)")
    return compare_runs(base, head, config, metrics=_metrics(args.metric), allow_mismatch=args.allow_mismatch,
                        ignore_fields=ignore_fields, noise=noise)


def cmd_compare(args: argparse.Namespace) -> int:
    base, head = load_side(args.base, args.out), load_side(args.head, args.out)
    return render(_compare(base, head, args), args)


# ---------------------------------------------------------------- ab / noise

def run_options_from(args: argparse.Namespace):
    from harness.cli.common import batch_sizes, policy_overrides, split_values
    from harness.run.runner import RunOptions, parse_option

    policy = policy_overrides(args)
    opts = RunOptions(suite=args.suite, workloads=split_values(args.workload), workload_files=args.workload_file,
                      scenarios=split_values(args.scenario), compilers=split_values(args.compiler), devices=split_values(args.device),
                      dtypes=split_values(args.dtype), batch_sizes=batch_sizes(split_values(args.batch_size)),
                      sizes=split_values(args.size), timeout_s=args.timeout, out_dir=args.out, label=args.label,
                      policy=policy, ingest=False, options=dict(parse_option(o) for o in args.option),
                      override_workloads=args.override_workloads)
    if hasattr(args, "trace"):  # ab and bisect have the diagnostic options; noise and versions do not
        from harness.cli.diagnostics import diagnostic_run_options

        for key, value in diagnostic_run_options(args).items():
            setattr(opts, key, value)
    if not opts.suite and not opts.compilers:
        opts.compilers = ["inductor"]
    if not opts.suite and not opts.devices:
        opts.devices = ["cpu"]
    return opts


def _progress(step: int, total: int, side: str, case, record) -> None:
    if record is not None:
        print(f"[{step + 1}/{total}] {side:4s} {record.status:8s} {case.case_id} "
              f"({record.worker.get('wall_s', 0):.1f}s)", file=sys.stderr, flush=True)


def _ab_sides(args: argparse.Namespace) -> tuple[str, str, dict]:
    """(base python, head python, side -> env description) from --env x2 or --base/--head-python."""
    if args.env:
        if args.base_python or args.head_python or len(args.env) != 2:
            raise CliError("ab takes either --env twice (base, then head) or --base-python and --head-python")
        from harness.cli.envs import resolve_cli_envs

        base, head = resolve_cli_envs(args.env, 2)
        return base.python, head.python, {"base": base.to_dict(), "head": head.to_dict()}
    if not (args.base_python and args.head_python):
        raise CliError("ab needs --base-python and --head-python, or --env twice (e.g. --env old=torch==2.12.1 "
                       "--env new=torch==2.13.0)")
    return args.base_python, args.head_python, {}


def versions_line(base: list[Run], head: list[Run]) -> str:
    """'base NAME (torch X, triton Y) -> head NAME (torch Z)': what an A/B across builds compared."""
    def side(name: str, runs: list[Run]) -> str:
        env = runs[0].environment if runs else {}
        packages = env.get("packages") or {}
        label = (env.get("env") or {}).get("name") or name
        extra = "".join(f", {k} {packages[k]}" for k in ("triton", "pytorch-triton") if packages.get(k))
        return f"{label} (torch {env.get('torch_version') or packages.get('torch') or '?'}{extra})"

    return f"base {side('base', base)} -> head {side('head', head)}"


DEFAULT_AB_ROUNDS = 8
# what the session itself fixed: --resume takes these from its journal
_AB_SESSION_OPTIONS = ("base_python", "head_python", "env", "base_env", "head_env", "rounds", "adaptive", "suite",
                       "workload", "workload_file", "override_workloads", "scenario", "compiler", "device", "dtype",
                       "batch_size", "size", "option", "timeout", "min_time", "min_samples", "warmup", "warmup_budget",
                       "label", "trace", "trace_max_mb", "warm_compile", "no_preload")


def session_interrupted(command: str, exc: KeyboardInterrupt, out_dir: str) -> int:
    """The line an interrupted ab / noise session ends with: what was kept and how to finish it."""
    session = getattr(exc, "ab_session", None)
    hint = (f"; finish it with: compilebench {command} --resume {session.name} --out {out_dir}"
            if session is not None and getattr(exc, "ab_resumable", False) else "")
    print(f"compilebench: {command} interrupted; finished rounds were saved{hint}", file=sys.stderr)
    return EXIT_INTERRUPTED


def _ab_options(args: argparse.Namespace):
    """(AbOptions, the interrupted session's journal or None) from the command line."""
    from harness.experiments.ab import AbOptions, load_ab_journal, parse_env_pairs

    if args.resume:
        refuse_session_options(args, _AB_SESSION_OPTIONS, "ab --resume reuses the interrupted session's own sides, "
                               "cases and rounds")
        journal = load_ab_journal(args.resume, args.out)
        opts = journal.opts
        if opts.stop_design is not None:  # the same rule, or the journaled rounds' error rates do not hold
            opts.stop_rule, design = _stop_rule(args, opts.rounds)
            then, now = _normalised(opts.stop_design), _normalised(design)
            differ = [key for key in then if now.get(key) != then[key]]  # an older journal: the keys it has
            if differ:
                raise CliError(f"ab --resume {args.resume}: the stop rule differs from the session's in "
                               f"{', '.join(differ)} (the thresholds and metrics it judges by, or its design); "
                               "pass the session's --thresholds and --metric")
        return opts, journal
    base_python, head_python, sides = _ab_sides(args)
    rounds = DEFAULT_AB_ROUNDS if args.rounds is None else args.rounds
    opts = AbOptions(run_options_from(args), base_python, head_python, rounds,
                     parse_env_pairs(args.base_env, "--base-env"), parse_env_pairs(args.head_env, "--head-env"),
                     sides=sides)
    if args.adaptive is not False:
        opts.stop_rule, opts.stop_design = _stop_rule(args, rounds)
    return opts, None


def _normalised(obj):
    import json

    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def cmd_ab(args: argparse.Namespace) -> int:
    from harness.experiments.ab import run_ab

    _fail_on(args.fail_on)
    opts, journal = _ab_options(args)
    try:
        base, head, folder = (run_ab(opts, progress=_progress, resume=journal) if journal
                              else run_ab(opts, progress=_progress))
    except KeyboardInterrupt as exc:
        return session_interrupted("ab", exc, opts.run.out_dir)
    print(f"ab session: {folder} (compare again: compilebench compare --allow-mismatch {folder}/base {folder}/head)",
          file=sys.stderr)
    # the two sides are two builds on purpose: versions may differ, hardware may not
    from harness.analysis.compare import COMPILER_FIELDS

    return render(_compare(base, head, args, ignore_fields=COMPILER_FIELDS), args, versions=versions_line(base, head))


def _stop_rule(args: argparse.Namespace, rounds: int):
    """ab --adaptive: the sequential rule over the gate's own thresholds, alpha and metrics."""
    from harness.analysis.sequential import SequentialDesign, stop_rule
    from harness.analysis.thresholds import load_thresholds

    config = load_thresholds(args.thresholds)
    design = SequentialDesign(max_rounds=rounds, alpha=config.alpha)
    metrics = _metrics(args.metric)
    # what the rule judges by, kept in the journal: a resume under other thresholds or metrics
    # would stop the rest of the session by another rule than its first rounds
    gated = {"metrics": metrics or "all", "thresholds": {"alpha": config.alpha, "defaults": config.defaults,
                                                         "suites": config.suites, "workloads": config.workloads,
                                                         "cases": config.cases}}
    return stop_rule(config, design, metrics), {**design.describe(), "gated": gated}


# what a noise session fixed: --resume takes these from its journal
_NOISE_SESSION_OPTIONS = ("rounds", "python", "from_runs", "suite", "workload", "workload_file", "override_workloads",
                          "scenario", "compiler", "device", "dtype", "batch_size", "size", "option", "timeout",
                          "min_time", "min_samples", "warmup", "warmup_budget", "label")


def _noise_session(args: argparse.Namespace):
    """(AbOptions, the interrupted session's journal or None): an A/A session, both sides one python."""
    from harness.analysis.noise import MIN_ROUNDS, check_rounds
    from harness.experiments.ab import AbOptions, load_ab_journal

    if not args.resume:
        rounds = MIN_ROUNDS if args.rounds is None else args.rounds
        check_rounds(rounds)
        python = args.python or sys.executable
        return AbOptions(run_options_from(args), python, python, rounds), None
    refuse_session_options(args, _NOISE_SESSION_OPTIONS, "noise --resume reuses the interrupted session's own "
                           "python, cases and rounds")
    journal = load_ab_journal(args.resume, args.out)
    opts = journal.opts
    if opts.base_python != opts.head_python or opts.base_env != opts.head_env or opts.stop_design is not None:
        raise CliError(f"noise --resume {args.resume}: session {journal.ab_id} is an A/B of two different sides "
                       f"(or adaptive), not an A/A noise session; finish it with `compilebench ab --resume "
                       f"{journal.ab_id} --out {opts.run.out_dir}`")
    check_rounds(opts.rounds, "the session's rounds")
    return opts, journal


def cmd_noise(args: argparse.Namespace) -> int:
    import json

    from rich.table import Table

    from harness.analysis.noise import MIN_ROUNDS, analyze_noise, save_noise
    from harness.analysis.thresholds import load_thresholds
    from harness.report.display import make_console, print_table

    config = load_thresholds(args.thresholds)
    if args.from_runs and not args.resume:
        runs = [run for ref in args.from_runs for run in load_side(ref, args.out)]
        if len(runs) < 2 * MIN_ROUNDS:
            raise CliError(f"noise --from-runs needs at least {2 * MIN_ROUNDS} A/A runs ({MIN_ROUNDS} rounds of two), "
                           f"got {len(runs)}; pass more runs of the same code")
        rounds = len(runs) // 2
    else:
        from harness.experiments.ab import run_ab

        opts, journal = _noise_session(args)
        try:
            base, head, _ = run_ab(opts, progress=_progress, resume=journal)
        except KeyboardInterrupt as exc:
            return session_interrupted("noise", exc, opts.run.out_dir)
        runs, rounds = base + head, opts.rounds
    data = analyze_noise(runs, rounds, config)
    table = Table(title=f"A/A noise on {data.get('host')} ({data.get('cpu_model')}), {rounds} round(s)")
    for col in ("case", "metric", "processes", "spread (cv)", "max A/A change", "detects (1 run/side)",
                f"detects (ab, {rounds} rounds)", "threshold"):
        table.add_column(col)
    for case_id, entry in data["cases"].items():
        for metric, s in entry["metrics"].items():
            noisy = metric in entry["too_noisy"]
            thr = s["threshold"]
            table.add_row(case_id, metric, str(s["n_processes"]), f"{s['cv']:.1%}", f"{s['max_pair_change']:.1%}",
                          ("[bold red]" if noisy else "") + f"{s['mdc_single']:.1%}" + (" TOO NOISY[/]" if noisy else ""),
                          f"{s['mdc_ab']:.1%}", f"{thr:.0%}" if isinstance(thr, float) else "-")
    console = make_console(stderr=json_to_stdout(args))
    print_table(console, table, args.format)
    if args.output:
        console.print(f"noise file: {save_noise(data, args.output)}", highlight=False, markup=False)
    for target in json_targets(args):
        write_output(target, json.dumps(data, indent=1) + "\n")
    return EXIT_OK


# ---------------------------------------------------------------- expected, pytest-benchmark

def cmd_expected(args: argparse.Namespace) -> int:
    from harness.analysis.expected import CLI_DIR, check, expected_path, pick_workloads, update
    from harness.run.runner import resolve_run

    if args.action != "pick" and not args.run:
        raise CliError(f"expected {args.action} needs a run: `compilebench expected {args.action} latest`")
    if args.per_family < 1 or (args.max_families is not None and args.max_families < 1):
        raise CliError(f"--per-family {args.per_family} / --max-families {args.max_families}: give positive counts")
    runs = [resolve_run(ref, args.out) for ref in args.run]
    if args.action == "pick":
        if not runs and not args.file:
            raise CliError("expected pick needs --file FILE or a run to pick workloads from")
        print(",".join(pick_workloads(args.file, runs, args.per_family, args.max_families)))
        return EXIT_OK
    # expected files are committed with the project: results/expected/ here, not under --out
    path = Path(args.file) if args.file else expected_path(runs[0], CLI_DIR)
    if args.action == "update":
        data = update(runs, path)
        print(f"expected file written: {path} ({len(data['cases'])} cases); review and commit it")
        return EXIT_OK
    failed = checked = False
    for run in runs:
        report = check(run, path)
        for line in report.warnings:
            print(f"warning: {line}", file=sys.stderr)
        for line in report.differences:
            print(f"DIFFERENT {line}")
        for case_id in report.new:
            print(f"not in expected file (add it with `compilebench expected update RUN --file {path}`): {case_id}")
        for case_id in report.missing:
            print(f"{'MISSING' if args.complete else 'not run'}: {case_id}")
        print(f"{run.run_id}: {report.checked} case(s) checked against {path}: "
              f"{len(report.differences)} difference(s), {len(report.missing)} not run, {len(report.new)} new")
        failed = failed or report.failed(args.complete)
        checked = checked or report.checked > 0
    if not failed and not checked:  # as compare with no case in common: nothing checked is no pass
        print(f"compilebench: error: nothing checked: no case of the run(s) is in {path}; check the run against "
              f"the file of its suite, or write one with `compilebench expected update RUN --file {path}`",
              file=sys.stderr)
        return EXIT_HARNESS
    if failed:
        print(f"expected results differ: fix the regression, or if intended run "
              f"`compilebench expected update RUN --file {path}` and commit")
    return EXIT_FAILED if failed else EXIT_OK


def cmd_import_pytest(args: argparse.Namespace) -> int:
    from harness.interop.pytest_bench import import_file
    from harness.model.schema import save_run
    from harness.run.runner import run_path

    run = import_file(args.file)
    path = save_run(run, run_path(args.out, run.run_id))
    if not args.no_ingest:
        from harness.run.store import HistoryStore

        with HistoryStore(Path(args.out) / "history.sqlite") as store:
            store.ingest(run)
    print(f"imported {len(run.records)} case(s) from {args.file}: {path}")
    return EXIT_OK


def cmd_export_pytest(args: argparse.Namespace) -> int:
    from harness.interop.pytest_bench import write_export
    from harness.run.runner import resolve_run

    run = resolve_run(args.run, args.out)
    path = write_export(run, args.output)
    print(f"pytest-benchmark JSON written: {path} (pytest-benchmark compare {path} ...)")
    return EXIT_OK
