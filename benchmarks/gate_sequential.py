"""Adaptive A/B rounds (`ab --adaptive`) against fixed `--rounds 8`: the same error rates at
fewer processes? Two pieces of evidence, each printed as a markdown table:

    python benchmarks/gate_sequential.py --replay DIR [DIR ...]   # real ab sessions
    python benchmarks/gate_sequential.py --simulate [--sessions 2000]

`--replay`: every ab session folder under DIR (DIR/ab/<id>/{base,head}/round-NN.json, e.g. a
`benchmarks/gate_error_rates.py --setup ab` study run without --adaptive) is decided twice
on its own measured rounds: fixed, by the real gate on all its rounds; sequential, by the
stop rule (harness/analysis/sequential.py) on each prefix of rounds 4..R-1, and where it
stops, by the real gate on that prefix only (what `ab --adaptive` would have measured and
judged). Arms come from the head's slowdown variables (benchmarks/gate_workloads.py).

`--simulate`: the rule's operating characteristics on log-normal per-process values whose
spread is calibrated to the committed error-rate study (results/baselines/cpu2core-
2026-11-30/measurements/gate-error-rates-ab8-*-rows.jsonl: the A/A sessions' 8-round
latency changes) and whose changes are that study's measured median changes per arm.
Synthetic: it shows the design, not this machine. The committed study kept per-session
verdicts, not its round files, so it cannot be replayed itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gate_error_rates import KIND_ENV, RUNTIME_METRICS, cli_compare  # noqa: E402

from harness.analysis.sequential import SequentialDesign, case_decision, operating_characteristics  # noqa: E402
from harness.analysis.thresholds import ThresholdConfig  # noqa: E402
from harness.model.schema import load_run, torch_builds_differ  # noqa: E402

STUDY = ROOT / "results" / "baselines" / "cpu2core-2026-11-30" / "measurements"


def arm_of(run_config: dict[str, Any]) -> str:
    env = (run_config.get("ab") or {}).get("env") or {}
    for kind, name in KIND_ENV.items():
        if name in env:
            return f"{kind} +{float(env[name]):.0%}"
    return "A/A"


def _prefix_gate(session: Path, rounds: int, metrics: tuple[str, ...]) -> dict[str, Any]:
    """The real gate on the first `rounds` round files of each side."""
    with tempfile.TemporaryDirectory() as tmp:
        for side in ("base", "head"):
            (Path(tmp) / side).mkdir()
            for f in sorted((session / side).glob("round-*.json"))[:rounds]:
                (Path(tmp) / side / f.name).symlink_to(f.resolve())
        return cli_compare(Path(tmp) / "base", Path(tmp) / "head", command="gate", metrics=metrics)


def replay_session(session: Path, design_for: int | None = None) -> dict[str, Any] | None:
    files = {side: sorted((session / side).glob("round-*.json")) for side in ("base", "head")}
    rounds = min(len(files["base"]), len(files["head"]))
    if rounds < 2:
        return None
    runs = {side: [load_run(f) for f in files[side][:rounds]] for side in ("base", "head")}
    warm = _warm(runs)
    metrics = RUNTIME_METRICS if warm else ()
    design = SequentialDesign(max_rounds=design_for or rounds)
    config = ThresholdConfig()
    gated = [m for m in metrics if m in ("latency", "speedup")] or None
    fixed = _prefix_gate(session, rounds, metrics)
    stop_at, why = rounds, "reached the last round"
    case_ids = sorted({r.case_id for run in runs["base"] for r in run.records})
    # as `ab` tells its rule: the probe normalises latency exactly when the gate will
    torch_differs = torch_builds_differ([r.environment for r in runs["base"]], [r.environment for r in runs["head"]])
    for k in design.interim_looks:
        reasons = []
        for case_id in case_ids:
            base = [r for run in runs["base"][:k] for r in run.records if r.case_id == case_id]
            head = [r for run in runs["head"][:k] for r in run.records if r.case_id == case_id]
            reason = case_decision(base, head, config, design, gated, torch_differs) if base and head else None
            if reason is None:
                break
            reasons.append(reason)
        else:
            stop_at, why = k, "; ".join(reasons)
            break
    sequential = fixed if stop_at == rounds else _prefix_gate(session, stop_at, metrics)
    return {"session": str(session), "arm": arm_of(runs["head"][0].config), "rounds": rounds, "stop_at": stop_at,
            "why": why, "fixed": fixed, "sequential": sequential, "warm_cache": warm}


def _warm(runs: dict[str, list]) -> bool:
    """A study run with --ab-warm-cache (runtime metrics only): its processes hit a shared cache."""
    argv = " ".join(map(str, runs["base"][0].config.get("argv") or []))
    return "--metric" in argv


def replay(dirs: list[Path]) -> list[dict[str, Any]]:
    sessions = sorted({p.parent.parent for d in dirs for p in d.rglob("base/round-00.json")})
    rows = []
    for session in sessions:
        row = replay_session(session)
        if row is not None:
            rows.append(row)
            print(f"{row['arm']:14s} {session.name}: fixed exit {row['fixed']['exit']} ({row['fixed']['verdict']}), "
                  f"sequential stop after {row['stop_at']}/{row['rounds']}: exit {row['sequential']['exit']} "
                  f"({row['sequential']['verdict']})", file=sys.stderr, flush=True)
    return rows


def replay_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| arm | sessions | fixed: gate failed | sequential: gate failed | same exit | "
             "processes per side, fixed | sequential (mean) | stopped after (rounds) |",
             "|---|--:|--:|--:|--:|--:|--:|---|"]
    for arm in sorted({r["arm"] for r in rows}, key=lambda a: (a != "A/A", a)):
        mine = [r for r in rows if r["arm"] == arm]
        fixed = sum(r["fixed"]["exit"] == 1 for r in mine)
        seq = sum(r["sequential"]["exit"] == 1 for r in mine)
        same = sum(r["fixed"]["exit"] == r["sequential"]["exit"] for r in mine)
        lines.append(f"| {arm} | {len(mine)} | {fixed}/{len(mine)} | {seq}/{len(mine)} | {same}/{len(mine)} | "
                     f"{np.mean([r['rounds'] for r in mine]):.1f} | {np.mean([r['stop_at'] for r in mine]):.2f} | "
                     f"{', '.join(str(r['stop_at']) for r in mine)} |")
    return lines


# ---------------------------------------------------------------- simulation calibrated to the committed study

def committed_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(STUDY.glob("gate-error-rates-ab8-*-rows.jsonl"))
            for line in f.read_text().splitlines()]


def calibrated_sigma(aa_change_sd: float, rounds: int = 8, seed: int = 0) -> float:
    """The per-process log-sd whose simulated 8-vs-8 median-ratio change has the A/A sessions'
    measured sd (the gate's change is a ratio of medians of per-process medians)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1, (20000, 2, rounds))
    unit_sd = float(np.std(np.median(z[:, 1], axis=1) - np.median(z[:, 0], axis=1)))
    return aa_change_sd / unit_sd


def simulate(sessions: int) -> tuple[list[str], dict[str, Any]]:
    rows = committed_rows()
    aa = [r["latency_change"] for r in rows if r["arm"] == "A/A" and r.get("latency_change") is not None]
    sigma = calibrated_sigma(float(np.std(aa, ddof=1)))
    design = SequentialDesign()
    lines = [f"per-process log-sd {sigma:.4f}, calibrated to {len(aa)} committed A/A sessions (8-round latency "
             f"change sd {np.std(aa, ddof=1):.2%}); {sessions} simulated sessions per arm; design "
             f"{json.dumps(design.describe())}", "",
             "| arm (committed study) | simulated change | committed fixed-8: gate failed | simulated fixed-8 | "
             "simulated sequential | processes per side, fixed | sequential (mean) |",
             "|---|--:|--:|--:|--:|--:|--:|"]
    out = {"sigma": sigma, "arms": {}}
    for arm in sorted({r["arm"] for r in rows}, key=lambda a: (a != "A/A", a)):
        mine = [r for r in rows if r["arm"] == arm]
        change = 0.0 if arm == "A/A" else float(np.median([r["latency_change"] for r in mine]))
        oc = operating_characteristics(design, change, sigma, sessions, seed=zlib.crc32(arm.encode()))
        failed = sum(r["exit"] == 1 for r in mine)
        out["arms"][arm] = {**oc, "committed_failed": failed, "committed_sessions": len(mine)}
        lines.append(f"| {arm} | {change:+.1%} | {failed}/{len(mine)} | {oc['fixed_fail_rate']:.1%} | "
                     f"{oc['sequential_fail_rate']:.1%} | {oc['fixed_processes']:.0f} | "
                     f"{oc['sequential_processes']:.2f} |")
    return lines, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replay", nargs="+", metavar="DIR", help="folders holding ab session folders (ab/<id>/base|head)")
    p.add_argument("--simulate", action="store_true", help="operating characteristics calibrated to the committed study")
    p.add_argument("--sessions", type=int, default=2000, help="--simulate: sessions per arm")
    p.add_argument("--json", help="write every row here")
    args = p.parse_args()
    if not (args.replay or args.simulate):
        p.error("pass --replay DIR... and/or --simulate")
    result: dict[str, Any] = {}
    if args.replay:
        rows = replay([Path(d) for d in args.replay])
        result["replay"] = rows
        print(f"\n## ab sessions replayed: fixed rounds vs the sequential rule on their own rounds ({len(rows)} sessions)\n")
        print("\n".join(replay_table(rows)))
    if args.simulate:
        lines, result["simulate"] = simulate(args.sessions)
        print("\n## simulated (SYNTHETIC), calibrated to the committed cpu2core-2026-11-30 ab --rounds 8 study\n")
        print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
