"""Commands over environments: env (build / list cached envs), versions (sweep), bisect.

Every command here takes `--env NAME=PYTHON` or `--env NAME=SPEC` (see
harness/experiments/envs.py); a SPEC is built once into a cached venv, with a progress
display while pip installs it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.cli.common import (
    ALLOW_SKIPS_HELP,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CliError,
    add_output_options,
    json_to_stdout,
    non_negative_int,
    nothing_measured,
    positive_number,
)
from harness.cli.compare import run_options_from, selection_options, write_output

ENV_HELP = ("environment: NAME=PYTHON (an interpreter or wrapper) or NAME=SPEC (pip requirement, e.g. "
            "t212=torch==2.12.1, built once into a cached venv; PIP_FIND_LINKS=DIR installs from local wheels)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("env", help="build environments from pip specs (cached venvs) or list the cached ones",
                       description="`compilebench env create --env t212=torch==2.12.1` builds (or finds) the cached "
                                   "venv and prints its versions and how long it took; `compilebench env list` lists "
                                   "the cache ($COMPILEBENCH_ENV_CACHE, default ~/.cache/compilebench/envs).")
    p.add_argument("action", choices=("create", "list"))
    p.add_argument("--env", action="append", default=[], help=ENV_HELP)
    add_output_options(p, "the environments")
    p.set_defaults(func=cmd_env)

    p = sub.add_parser("versions", help="version sweep: the same cases under N environments, one HTML report",
                       description="Run the selection once per --env (oldest first), one run file per env (all "
                                   "ingested into OUT/history.sqlite), then write an HTML report with a column per "
                                   "env: speedup, compile time with its stage breakdown, peak memory, graph breaks, "
                                   "recompiles, pass/fail; changes beyond the noise floor between adjacent envs are "
                                   "highlighted.")
    p.add_argument("--env", action="append", default=[], help=ENV_HELP + "; repeat, oldest first")
    p.add_argument("--report", metavar="HTML", help="report path (default OUT/versions/<sweep_id>.html)")
    p.add_argument("--from-manifest", metavar="FILE", help="re-render the report of a finished sweep (no measuring)")
    p.add_argument("--thresholds", help="TOML file of threshold overrides (what counts as beyond the noise floor)")
    p.add_argument("--allow-skips", action="store_true", help=ALLOW_SKIPS_HELP)
    selection_options(p)
    p.set_defaults(func=cmd_versions)

    p = sub.add_parser("bisect", help="find the first environment where one case went bad (binary search)",
                       description="Binary search over --env environments ordered good first, bad last, for the "
                                   "first one where the case's metric is worse than in the first env beyond the "
                                   "threshold. N envs take 1 + ceil(log2 N) measurements (8 envs: 4), plus repeats "
                                   "when a verdict is noisy. Prints `first bad: NAME`, its good neighbour and the "
                                   "evidence; every measurement is kept in the state file, and running the same "
                                   "command again resumes it.")
    p.add_argument("--env", action="append", default=[], help=ENV_HELP + "; repeat, good first, bad last")
    p.add_argument("--metric", required=True, choices=("latency", "speedup", "compile_time", "graph_breaks",
                                                       "peak_memory", "status"))
    p.add_argument("--threshold", type=positive_number, help="change that counts as bad, > 0: a fraction for latency, speedup, "
                   "compile_time, peak_memory (0.1 = 10%%), a count for graph_breaks (default: the metric's "
                   "threshold from compare)")
    p.add_argument("--direction", choices=("worse", "better"), default="worse",
                   help="hunt the first env where the metric got worse (default) or better")
    p.add_argument("--repeats", type=non_negative_int, default=2, help="extra processes per side when a verdict is noisy (default 2)")
    p.add_argument("--state", help="state file (default OUT/bisect/<hash of the inputs>.json: the same command resumes)")
    p.add_argument("--markdown", metavar="FILE", help="write the issue markdown here ('-': stdout)")
    p.add_argument("--thresholds", help="TOML file of threshold overrides")
    selection_options(p)
    from harness.cli.diagnostics import add_diagnostic_options

    add_diagnostic_options(p, trace_dir="OUT/traces/bisect-<env>-mNN/<case>/ (NN: the measurement's number "
                                        "in the state file, so a resumed bisect never overwrites an earlier trace)")
    p.set_defaults(func=cmd_bisect)


# ---------------------------------------------------------------- env resolution with a progress display

class EnvProgress:
    """A spinner with the current pip line and elapsed time while a spec installs; plain
    lines when stderr is not a terminal (CI logs)."""

    def __init__(self) -> None:
        from harness.report.display import make_console

        self.console = make_console(stderr=True)
        self.progress: Any = None
        self.task: Any = None
        self.packages = 0

    def __call__(self, stage: str, message: str) -> None:
        from rich.markup import escape

        if stage == "done":
            self._stop()
            self.console.print(escape(message), highlight=False)
            return
        if stage in ("venv", "install") and message.startswith(("Processing", "Collecting")):
            self.packages += 1
        if not self.console.is_terminal:
            if stage == "venv" or not message.startswith((" ", "Processing", "Collecting", "Looking", "WARNING")):
                self.console.print(escape(f"[{stage}] {message}"), highlight=False)
            return
        if self.progress is None:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                     console=self.console, transient=True)
            self.progress.start()
            self.task = self.progress.add_task("", total=None)
        self.progress.update(self.task, description=escape(f"{stage}: {self.packages} pkgs | {message[:90]}"))

    def _stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress, self.packages = None, 0


def resolve_cli_envs(texts: Sequence[str], minimum: int) -> list:
    from harness.experiments.envs import parse_envs, resolve_envs

    specs = parse_envs(texts, minimum)  # every --env checked before anything is built
    return resolve_envs(specs, EnvProgress())


def cmd_env(args: argparse.Namespace) -> int:
    import json

    from rich.table import Table
    from rich.text import Text

    from harness.experiments.envs import cached_envs, envs_root
    from harness.report.display import make_console, print_table

    console = make_console(stderr=json_to_stdout(args))
    if args.action == "list":
        cached = cached_envs()
        if args.json:
            print(json.dumps({"cache": str(envs_root()), "envs": cached}, indent=1, default=str))
            return EXIT_OK
        console.print(Text(f"env cache: {envs_root()}"))
        table = Table(title="cached environments")
        for col in ("path", "requirements", "created"):
            table.add_column(col)
        for env in cached:
            table.add_row(Text(env["path"]), Text(" ".join(env["requirements"])), Text(env.get("created_at", "")))
        print_table(console, table, args.format)
        return EXIT_OK
    envs = resolve_cli_envs(args.env, 1)
    table = Table(title="environments")
    for col in ("name", "torch", "triton", "transformers", "diffusers", "python", "ready in"):
        table.add_column(col)
    for env in envs:
        p = env.packages
        table.add_row(env.name, str(p.get("torch")), str(p.get("triton") or p.get("pytorch-triton")),
                      str(p.get("transformers")), str(p.get("diffusers")), env.python,
                      f"{env.ready_s:.2f}s{' (cached)' if env.from_cache else ' (built)'}")
    print_table(console, table, args.format)
    if args.json:
        print(json.dumps([env.to_dict() for env in envs],
                         indent=1, default=str))
    return EXIT_OK


# ---------------------------------------------------------------- versions

def cmd_versions(args: argparse.Namespace) -> int:
    from harness.analysis.thresholds import load_thresholds
    from harness.report.versions import write_versions_report

    config = load_thresholds(args.thresholds)
    if args.from_manifest:
        from harness.experiments.versions import load_manifest

        sweep = load_manifest(args.from_manifest)
    else:
        sweep = _run_sweep(args)
        if sweep is None:
            return EXIT_INTERRUPTED
    target = args.report or str(Path(sweep.manifest or ".").with_suffix(".html"))
    title = "compilebench version sweep: " + " -> ".join(
        f"{e['name']} (torch {(e.get('packages') or {}).get('torch')})" for e in sweep.envs)
    path = write_versions_report(sweep.runs, target, title=title, config=config, manifest=str(sweep.manifest or ""))
    print(f"versions report: {path}")
    statuses = [r.status for run in sweep.runs for r in run.records]
    if any(s not in ("ok", "skipped") for s in statuses):
        return EXIT_FAILED
    return nothing_measured(statuses, args.allow_skips)


def _run_sweep(args: argparse.Namespace):
    from harness.experiments.versions import run_versions
    from harness.report.display import ProgressPrinter, make_console

    if not args.env:
        raise CliError("versions needs --env for each environment (at least two), e.g. --env torch==2.12.1 "
                       "--env torch==2.13.0, or --from-manifest FILE")
    opts = run_options_from(args)
    opts.ingest = True  # every env's run goes into the history like a nightly
    envs = resolve_cli_envs(args.env, 2)
    console = make_console(stderr=True)
    progress = ProgressPrinter()
    try:
        sweep = run_versions(opts, envs, progress,
                             on_env=lambda env: console.print(f"== {env.label()}: {env.python}", highlight=False))
    except KeyboardInterrupt:
        progress.close()
        console.print("interrupted: finished envs are in their run files", style="yellow")
        return None
    finally:
        progress.close()
    for env, run in zip(envs, sweep.runs, strict=True):
        console.print(f"{env.label()}: run {run.run_id} ({run.config.get('path')})", highlight=False)
    console.print(f"sweep manifest: {sweep.manifest}", highlight=False)
    return sweep


# ---------------------------------------------------------------- bisect

def cmd_bisect(args: argparse.Namespace) -> int:
    from harness.analysis.bisect_verdict import judge
    from harness.analysis.thresholds import load_thresholds
    from harness.experiments.bisect import default_state_path, open_state, run_bisect, state_key
    from harness.report.bisect_output import issue_markdown, summary_lines

    if args.repeats < 0:
        raise CliError(f"--repeats {args.repeats} must be 0 or more")
    if len(args.env) < 2:
        raise CliError("bisect needs at least two --env, good first and bad last, e.g. --env torch==2.11.0 "
                       "--env torch==2.12.1 --env torch==2.13.0")
    config = load_thresholds(args.thresholds)
    case, opts, policy, timeout = _one_case(args)
    envs = resolve_cli_envs(args.env, 2)
    env_dicts = [e.to_dict() for e in envs]
    key = state_key(case.case_id, args.metric, args.threshold, args.direction, env_dicts,
                    measure=_measure_settings(opts, policy, timeout))
    path = Path(args.state) if args.state else default_state_path(args.out, key)
    state, resumed = open_state(path, key, env_dicts)
    if resumed:
        print(f"resuming bisect from {path} ({state.measurement_count()} measurement(s) kept, "
              f"{len(state.steps)} step(s) decided)", file=sys.stderr)
    else:
        print(f"bisect state: {path} (run the same command again to resume)", file=sys.stderr)
    measure = _measurer(case, opts, policy, timeout, envs, state.measurement_count)
    decide = lambda ref, cand: judge(ref, cand, args.metric, args.direction, args.threshold, config)  # noqa: E731
    from harness.run.forkserver import preloaded_workers

    try:
        # a preloaded server per env being measured: the good env's stays while a noisy probe may
        # measure it again (each repeat forks instead of importing again), a candidate's goes once
        # its step is decided (run_bisect's `release`), so the servers do not pile up over the search
        with preloaded_workers(opts.preload) as pool:
            run_bisect(state, measure, decide, max_repeats=args.repeats, progress=_BisectProgress(len(envs)),
                       release=server_releaser(pool, [env.python for env in envs]))
    except KeyboardInterrupt:
        print(f"compilebench: bisect interrupted; {state.measurement_count()} measurement(s) kept in {path}: "
              f"run the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    data = state.to_dict()
    for line in summary_lines(data):
        print(line)
    print(f"state file (every measurement): {path}")
    if args.markdown:
        write_output(args.markdown, issue_markdown(data))
    return EXIT_OK


def server_releaser(pool: Any, pythons: Sequence[str]) -> Callable[[int], None]:
    """run_bisect's `release`: close the fork servers of an env that will not be measured
    again, unless another env not released yet runs the same python (`--env a=PY --env b=PY`)."""
    pending = set(range(len(pythons)))

    def release(index: int) -> None:
        pending.discard(index)
        python = pythons[index]
        if pool is not None and not any(pythons[i] == python for i in pending):
            pool.close_python(python)

    return release


def _one_case(args: argparse.Namespace):
    from harness.measure.timing import StopPolicy
    from harness.run.runner import plan_cases
    from suites import SUITES

    opts = run_options_from(args)
    cases, suite_policy = plan_cases(opts)
    if len(cases) != 1:
        shown = ", ".join(c.case_id for c in cases[:4]) + (" ..." if len(cases) > 4 else "")
        raise CliError(f"bisect needs exactly one case; the selection matches {len(cases)} ({shown}): narrow it "
                       f"with -w, --scenario, -c, --device")
    policy = {**StopPolicy().to_dict(), **suite_policy, **opts.policy}
    timeout = opts.timeout_s or (SUITES[opts.suite].timeout_s if opts.suite else 600.0)
    return cases[0], opts, policy, timeout


def _measure_settings(opts, policy: dict[str, Any], timeout: float) -> dict[str, Any]:
    """What one measurement depends on besides the case and the env (goes into the state key):
    the whole stop policy (suite defaults + --min-time/--min-samples), the worker timeout, the
    memory limit and --warm-compile. Traces are left out: they observe, they do not change
    the numbers."""
    return {**policy, "timeout_s": timeout, "max_memory_gb": opts.max_memory_gb,
            "warm_compile": bool(opts.warm_compile)}


def _measurer(case, opts, policy: dict[str, Any], timeout: float, envs: Sequence[Any],
              kept: Callable[[], int]):
    """One fresh worker of the case in env i. Run options travel in `opts` (a RunOptions)
    through make_spec, as for `run`: options added to RunOptions (e.g. tracing) reach the
    bisect's workers here without touching the search. `kept()` is how many measurements the
    state file already holds: traces are numbered after it, so a resumed bisect continues
    the numbering instead of writing over the first run's traces."""
    from harness.run.runner import default_cache_root, make_spec, run_worker
    from harness.run.traces import case_slug, trace_settings

    isa_cache = default_cache_root() / "isa-probe"
    isa_cache.mkdir(parents=True, exist_ok=True)

    def measure(index: int):
        env = envs[index]
        number = kept() + 1  # the state adds each record right after this returns
        trace = (trace_settings(opts.out_dir, f"bisect-{case_slug(env.name)}-m{number:02d}", opts.trace_max_mb)
                 if opts.trace else None)
        record = run_worker(case, make_spec(case, opts, policy, str(isa_cache)), timeout, python=env.python,
                            trace=trace)
        record.worker.update({"env": env.name, "env_torch": env.torch})
        return record

    return measure


class _BisectProgress:
    """Progress as plain lines: measurement k (of the expected 1 + ceil(log2 N)), env, outcome."""

    def __init__(self, n_envs: int) -> None:
        from harness.experiments.bisect import probes_needed

        self.expected = 1 + probes_needed(n_envs)
        self.started = 0.0

    def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event == "measure":
            self.started = time.monotonic()
            print(f"[measurement {info['done'] + 1}/{self.expected}+] {info['env']} ...", file=sys.stderr, flush=True)
        elif event == "measured":
            print(f"  {info['env']}: {info['status']} in {time.monotonic() - self.started:.1f}s", file=sys.stderr)
        elif event == "step":
            from harness.report.bisect_output import verdict_text

            print(f"  step {info['env']}: verdict {verdict_text(info)}", file=sys.stderr, flush=True)
