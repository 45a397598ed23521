"""What `--compile-overlap` did to a run's figures (issue 25, item 1), from the run file alone.

  python benchmarks/overlap_check.py OVERLAPPED.json [--serial ONE_AT_A_TIME.json]

Per compiled case: its compile wall, the compiling process's own CPU seconds, wall per CPU
second (waiting for a core or for the compile-worker pool shows here, not a slower host,
which moves both), the share of the compile another worker was busy for, and the seconds of
its measurement another worker was busy for (must be 0). The overlap figures are derived again
with this tree's harness/run/overlap.py from the lock's raw moments in each record, so a file
written by an older rule is read by the current one. With --serial, the same case's figures
one at a time beside it, and whether the peaks are equal to the byte.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.model.schema import Record, load_run  # noqa: E402
from harness.run.overlap import OVERLAP_KEY, POOL_KEY, annotate  # noqa: E402


def reannotated(path: str) -> list[Record]:
    records = load_run(path).records
    for rec in records:
        rec.notes = [n for n in rec.notes if "quiet lock did not hold" not in n]
        rec.metrics.pop(OVERLAP_KEY, None)
    annotate([r for r in records if POOL_KEY in (r.worker or {})])
    return records


def _peaks(rec: Record) -> tuple[object, object]:
    return tuple((getattr(rec, v) or {}).get("peak_memory_bytes") for v in ("eager", "compiled"))


def _ratio(rec: Record) -> float | None:
    wall, cpu = rec.metrics.get("compile_time_s"), rec.metrics.get("compile_cpu_s")
    return wall / cpu if wall and cpu else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--serial", help="the same suite run with --compile-overlap 1")
    args = ap.parse_args(argv)
    records = reannotated(args.run)
    serial = {r.case_id: r for r in load_run(args.serial).records} if args.serial else {}
    head = f"{'case':<62} {'compile':>8} {'cpu':>7} {'w/cpu':>6} {'beside':>7} {'meas.b':>7}"
    print(head + (f" {'1-at-a-time':>11} {'cpu':>7} {'w/cpu':>6} {'peaks':>6}" if serial else ""))
    totals = {"wall": 0.0, "cpu": 0.0, "s_wall": 0.0, "s_cpu": 0.0}
    worst = 0.0
    for rec in records:
        block = rec.metrics.get(OVERLAP_KEY) or {}
        worst = max(worst, float(block.get("measured_beside_s") or 0.0))
        if rec.metrics.get("compile_time_s") is None:
            continue
        ratio = _ratio(rec)
        totals["wall"] += rec.metrics["compile_time_s"]
        totals["cpu"] += rec.metrics.get("compile_cpu_s") or 0.0
        line = (f"{rec.case_id[:62]:<62} {rec.metrics['compile_time_s']:8.2f} {rec.metrics.get('compile_cpu_s') or 0:7.2f} "
                f"{ratio or 0:6.3f} {block.get('share') or 0:7.0%} {block.get('measured_beside_s') or 0:7.3f}")
        other = serial.get(rec.case_id)
        if other is not None and other.metrics.get("compile_time_s") is not None:
            totals["s_wall"] += other.metrics["compile_time_s"]
            totals["s_cpu"] += other.metrics.get("compile_cpu_s") or 0.0
            same = "equal" if _peaks(other) == _peaks(rec) else "DIFFER"
            line += (f" {other.metrics['compile_time_s']:11.2f} {other.metrics.get('compile_cpu_s') or 0:7.2f} "
                     f"{_ratio(other) or 0:6.3f} {same:>6}")
        print(line)
    print(f"compiles: {totals['wall']:.1f} s wall, {totals['cpu']:.1f} s CPU, wall/CPU "
          f"{totals['wall'] / max(totals['cpu'], 1e-9):.3f}"
          + (f"; one at a time: {totals['s_wall']:.1f} s wall, {totals['s_cpu']:.1f} s CPU, wall/CPU "
             f"{totals['s_wall'] / max(totals['s_cpu'], 1e-9):.3f}" if serial else ""))
    if serial:
        differ = [r.case_id for r in records if r.case_id in serial and _peaks(serial[r.case_id]) != _peaks(r)]
        print(f"peaks equal to the byte in {len(records) - len(differ)} of {len(records)} cases"
              + (f"; differ: {', '.join(differ)}" if differ else ""))
    print(f"most seconds of a measurement another worker was busy for: {worst:.3f}")
    return 0 if worst == 0.0 else 1


if __name__ == "__main__":
    sys.exit(main())
