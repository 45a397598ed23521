"""Print a run's headline as markdown: wall time, statuses, one row per case.

    python3 benchmarks/gpu/summarize.py RUN.json [RUN.json ...] [--single SINGLE.json ...]

With --single (run files of the same cases measured on ONE GPU), it also prints the
multi-GPU speedup: the one-GPU worker time of the cases both sides ran, over the
multi-GPU run's wall time. Used by gpu_suite.sh and multi_gpu.sh; numbers come from the
run files only."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.model.schema import load_run  # noqa: E402
from harness.run.runner import summarize_statuses  # noqa: E402


def fmt(value: float | None, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def print_run(path: str) -> None:
    run = load_run(path)
    cfg = run.config
    print(f"## {Path(path).name}\n")
    print(f"host {run.environment.get('host')}, torch {run.environment.get('torch_version')}, "
          f"devices {[d.get('name') for d in (run.environment.get('devices') or {}).values()]}")
    print(f"wall {cfg.get('wall_s')} s, cases {len(run.records)}/{cfg.get('cases_planned')}, "
          f"interrupted {cfg.get('interrupted')}, shard {(cfg.get('shard') or {}).get('index')}/"
          f"{(cfg.get('shard') or {}).get('count')}, gpus {cfg.get('gpus')}, statuses {summarize_statuses(run.records)}\n")
    print("| case | status | compile s | speedup | throughput | compiled peak GB | worker s | gpu |")
    print("|---|---|---|---|---|---|---|---|")
    for r in run.records:
        m = r.metrics or {}
        peak = (r.compiled or r.eager or {}).get("peak_memory_bytes")
        err = f" ({(r.error or {}).get('type')}: {str((r.error or {}).get('message', ''))[:80]})" if r.error else ""
        print(f"| {r.case_id} | {r.status}{err} | {fmt(m.get('compile_time_s'))} | {fmt(m.get('speedup'))} | "
              f"{fmt(m.get('throughput'))} {m.get('throughput_unit') or ''} | {fmt(peak / 1e9 if peak else None)} | "
              f"{fmt(r.worker.get('wall_s'))} | {r.worker.get('gpu', '-')} |")
    print()


def speedup(multi: list[str], single: list[str]) -> None:
    single_wall = {}
    for path in single:
        for r in load_run(path).records:
            single_wall[r.case_id] = r.worker.get("wall_s")
    for path in multi:
        run = load_run(path)
        common = [r.case_id for r in run.records if single_wall.get(r.case_id)]
        serial = sum(single_wall[c] for c in common)
        wall = float(run.config.get("wall_s") or 0)
        ratio = serial / wall if wall else float("nan")
        print(f"multi-GPU speedup ({Path(path).name}): {len(common)}/{len(run.records)} cases also run on one GPU; "
              f"one-GPU worker time {serial:.1f} s / multi-GPU wall {wall:.1f} s = {ratio:.2f}x (target >= 1.6x)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--single", nargs="*", default=[])
    args = ap.parse_args()
    for path in args.runs:
        print_run(path)
    if args.single:
        speedup(args.runs, args.single)
    return 0


if __name__ == "__main__":
    sys.exit(main())
