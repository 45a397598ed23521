"""Proof for `compilebench bisect`: N environments, an INJECTED regression from env K on.

    python benchmarks/bisect_injected.py --envs 8 --first-bad 5 --base torch==2.13.0

The environments are executable wrappers (the `--env NAME=PYTHON` form) around one real
interpreter (`--base`: a pip spec, built into the env cache, or a Python path). Wrappers
from index K on export COMPILEBENCH_GATE_EXTRA_WORK=F (default 1.0): the gate workload
`gate-mlp-wide` (benchmarks/gate_workloads.py, compute-bound) then makes its *compiled*
graph do F more rows of real work per call. That slowdown is injected, on purpose, and documented as such
in every wrapper; everything else -- the workers, the timings, the verdicts -- is real.

The script runs `compilebench bisect --metric speedup` over the wrappers (speedup pairs
eager and compiled rounds in one process, so a busy machine moves both; latency alone
moved 2-3x between processes on a shared 2-core box, which no threshold survives), checks that it
names env K as the first bad one, and prints how many measurements it took against the
budget (1 + ceil(log2 N); noisy verdicts add repeats, which the output shows).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WRAPPER = """#!/bin/sh
# compilebench bisect proof env {name}: {what}
{export}exec {python} "$@"
"""


def make_wrappers(folder: Path, python: str, n: int, first_bad: int, extra: float) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        injected = i >= first_bad
        path = folder / f"e{i}"
        path.write_text(WRAPPER.format(
            name=f"e{i}", python=python,
            what=f"INJECTED regression: compiled graph does {extra:.0%} extra rows" if injected else "no injection",
            export=f"export COMPILEBENCH_GATE_EXTRA_WORK={extra}\n" if injected else "export COMPILEBENCH_GATE_EXTRA_WORK=0\n"))
        os.chmod(path, 0o755)
        paths.append(path)
    return paths


def base_python(text: str) -> str:
    from harness.experiments.envs import parse_env, resolve_env

    return resolve_env(parse_env(text)).python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--first-bad", type=int, default=5)
    parser.add_argument("--extra-work", type=float, default=1.0, help="injected extra compiled work (fraction of rows)")
    parser.add_argument("--base", default=sys.executable, help="interpreter to wrap: a path or a pip spec")
    parser.add_argument("--workload", default="gate-mlp-wide", help="a gate workload (benchmarks/gate_workloads.py)")
    parser.add_argument("--metric", default="speedup", help="speedup (default: eager and compiled interleaved in one "
                        "process, so a busy machine cancels out) or latency")
    parser.add_argument("--threshold", type=float, default=0.2, help="change that counts as bad")
    parser.add_argument("--out", default="results/bisect-proof")
    parser.add_argument("--min-time", type=float, default=0.3)
    args = parser.parse_args(argv)
    if not 1 <= args.first_bad < args.envs:
        parser.error(f"--first-bad must be in 1..{args.envs - 1}")
    from harness.cli.main import main as cli

    out = Path(args.out)
    python = args.base if os.sep in args.base else base_python(args.base)
    wrappers = make_wrappers(out / "envs", python, args.envs, args.first_bad, args.extra_work)
    state = out / "state.json"
    state.unlink(missing_ok=True)
    rc = cli(["bisect", "-w", args.workload, "--workload-file", str(ROOT / "benchmarks" / "gate_workloads.py"),
              "--scenario", "forward", "-c", "inductor", "--metric", args.metric, "--threshold", str(args.threshold),
              "--min-time", str(args.min_time), "--min-samples", "15", "--state", str(state),
              "--markdown", str(out / "issue.md"), "--out", str(out),
              *[a for i, w in enumerate(wrappers) for a in ("--env", f"e{i}={w}")]])
    data = json.loads(state.read_text())
    result = data["result"] or {}
    budget = 1 + math.ceil(math.log2(args.envs))
    repeats = sum(s.get("repeats", 0) for s in data["steps"])
    print(f"expected first bad: e{args.first_bad}; bisect said: {result.get('first_bad')}; "
          f"{result.get('measurements')} measurements (budget {budget} + {2 * repeats} for {repeats} noisy repeat(s))")
    ok = rc == 0 and result.get("first_bad") == f"e{args.first_bad}"
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
