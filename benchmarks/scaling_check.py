"""The `--gpus all` run against its shards: the same run case for case, and how well it scaled.

    python3 benchmarks/scaling_check.py check GPUS_RUN MERGED_RUN [--allow-mismatch] [--figures warn]
    python3 benchmarks/scaling_check.py table --suite hf --gpus-run RUN --shard-runs RUN... \\
        [--merged RUN] [--markdown OUT.md]

`check`: the same case ids, statuses, graph breaks and accuracy, and figures within noise by
compare's verdicts (harness/analysis/scaling.py). Exit 0 when both hold, 1 when not
(`--figures warn`: figures beyond noise are printed but do not fail), 2 on bad input.

`table`: one markdown row of docs/SCALING.md's table per call (appended to --markdown): the
`--gpus all` run's pool wall and busy shares, the one-GPU figure = the sum of the same
cases' worker walls in the shard runs (each shard ran one case at a time on its own GPU),
speedup, scaling efficiency (its definition is printed under the table), the slowest
shard's wall, and the check's answer when --merged is given. Numbers come from run files only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.analysis.scaling import EFFICIENCY_DEFINITION, case_walls, check_runs, scaling_row  # noqa: E402
from harness.model.errors import UserError  # noqa: E402
from harness.model.schema import RunFileError  # noqa: E402
from harness.run.lookup import resolve_run  # noqa: E402

HEADER = ("| suite | cases (ok) | GPUs | `--gpus all` wall s | 1-GPU s (shards' case walls) | speedup | efficiency "
          "| busy share mean / min | slowest of the shards s | merged = `--gpus all` |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def _fmt(value, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _pct(value) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def markdown_row(row: dict) -> str:
    same = {None: "not checked", True: "same cases", False: "DIFFERENT"}[row["same_cases"]]
    if row["figures_agree"] is not None:
        same += ", figures " + ("within noise" if row["figures_agree"] else "BEYOND NOISE")
    return (f"| {row['suite']} | {row['cases']} ({row['ok']}) | {row['gpus']} | {_fmt(row['wall_s'])} | "
            f"{_fmt(row['one_gpu_s'])} ({row['one_gpu_cases']} cases) | {_fmt(row['speedup'], '.2f')}x | "
            f"{_pct(row['efficiency'])} | {_pct(row['busy_share_mean'])} / {_pct(row['busy_share_min'])} | "
            f"{_fmt(row['shards_wall_s'])} ({row['shards']} shards) | {same} |")


def cmd_check(args: argparse.Namespace) -> int:
    a, b = resolve_run(args.a, args.out), resolve_run(args.b, args.out)
    check = check_runs(a, b, allow_mismatch=args.allow_mismatch)
    print("\n".join(check.lines()))
    if not check.same_cases:
        return 1
    return 0 if check.figures_agree or args.figures == "warn" else 1


def cmd_table(args: argparse.Namespace) -> int:
    gpus_run = resolve_run(args.gpus_run, args.out)
    if not gpus_run.config.get("multi_gpu"):
        raise UserError(f"{args.gpus_run}: not a --gpus run (no config.multi_gpu); pass the `run --gpus all` run file")
    shards = [resolve_run(ref, args.out) for ref in args.shard_runs]
    check = check_runs(gpus_run, resolve_run(args.merged, args.out), allow_mismatch=True) if args.merged else None
    row = scaling_row(args.suite, gpus_run, case_walls(shards), shard_runs=shards, check=check)
    env = gpus_run.environment or {}
    devices = sorted({str((d or {}).get("name")) for d in (env.get("devices") or {}).values()})
    text = [HEADER, markdown_row(row), "",
            f"{EFFICIENCY_DEFINITION}. Run {gpus_run.run_id}: torch {env.get('torch_version')}, "
            f"devices {', '.join(devices) or '-'}, host {env.get('host')}, command `{' '.join(gpus_run.config.get('argv') or [])}`."]
    print("\n".join(text))
    if args.markdown:
        with open(args.markdown, "a") as fh:
            fh.write("\n".join(text) + "\n\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("check", help="two runs of one plan: the same case for case, figures within noise?")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--allow-mismatch", action="store_true", help="compare across different environments")
    p.add_argument("--figures", choices=("fail", "warn"), default="fail")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("table", help="one markdown row of the scaling table")
    p.add_argument("--suite", required=True)
    p.add_argument("--gpus-run", required=True)
    p.add_argument("--shard-runs", nargs="+", required=True)
    p.add_argument("--merged")
    p.add_argument("--markdown")
    p.set_defaults(func=cmd_table)
    for p in sub.choices.values():
        p.add_argument("--out", default="results", help="results folder for run ids")
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except (UserError, RunFileError) as exc:
        print(f"scaling_check: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
