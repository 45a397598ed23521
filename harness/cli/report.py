"""`compilebench report` and `compilebench dashboard`: the HTML outputs.

report:    one self-contained HTML file for a run, optionally compared with a baseline run.
dashboard: the static nightly site over the history store.
"""

from __future__ import annotations

import argparse

EXIT_OK = 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write a self-contained HTML report for a run",
                       description="Write one HTML file (inline CSS/JS/SVG, opens from file://) for RUN; with "
                                   "--baseline, add per-case deltas coloured by verdict, regressions first.")
    p.add_argument("run", help="run file, run id, or 'latest'")
    p.add_argument("-o", "--output", required=True, help="HTML file to write, e.g. reports/smoke.html")
    p.add_argument("--baseline", metavar="RUN", help="baseline run (file, run id or 'latest') to compare against")
    p.add_argument("--out", default="results", help="results folder holding runs/")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("dashboard", help="build the static nightly dashboard from the history store",
                       description="Write a static site (index.html, regressions.html, workloads/, runs/) over "
                                   "the history database; open OUTPUT/index.html, no server needed.")
    p.add_argument("--out", default="results", help="results folder: the history is OUT/history.sqlite, as for "
                                                    "every other command (default: %(default)s)")
    p.add_argument("--db", help="history database, when it is not OUT/history.sqlite")
    p.add_argument("-o", "--output", default="reports/dashboard/", help="output folder (default: %(default)s)")
    p.add_argument("--window", type=int, default=14, help="nights in the trailing median baseline (default: %(default)s)")
    p.add_argument("--consecutive", type=int, default=2,
                   help="violating nights in a row before a regression alerts (default: %(default)s)")
    p.add_argument("--chart-reports", type=int, default=1,
                   help="latest nights whose reports include charts; older ones get tables only (default: %(default)s)")
    p.add_argument("--rebuild", action="store_true", help="re-render every night's report, changed or not")
    p.set_defaults(func=cmd_dashboard)


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report.report import write_report
    from harness.run.runner import resolve_run

    run = resolve_run(args.run, args.out)
    baseline = resolve_run(args.baseline, args.out) if args.baseline else None
    path = write_report(run, args.output, baseline=baseline)
    print(f"report written: {path}")
    return EXIT_OK


def cmd_dashboard(args: argparse.Namespace) -> int:
    from harness.cli.common import CliError
    from harness.report.dashboard import DashboardOptions, build_dashboard

    for name in ("window", "consecutive"):
        if getattr(args, name) < 1:
            raise CliError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.chart_reports < 0:
        raise CliError(f"--chart-reports must be 0 or more, got {args.chart_reports}")
    opts = DashboardOptions(window=args.window, consecutive=args.consecutive, chart_reports=args.chart_reports,
                            rebuild=args.rebuild)
    from pathlib import Path

    db = args.db or str(Path(args.out) / "history.sqlite")
    result = build_dashboard(db, args.output, opts)  # a DashboardError is a UserError: exit 2
    print(f"dashboard written: {result.out / 'index.html'} ({result.nights} runs, {result.groups} series groups, "
          f"{result.workloads} workloads, {result.open_regressions} open regressions, "
          f"{result.reports_rendered} reports rendered, {result.seconds:.1f}s)")
    return EXIT_OK
