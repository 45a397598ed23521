"""One line per case per process, grouped by side: where it started (preloaded/spawn), compile
wall and CPU seconds, the Inductor phase of it, its garbage-collector pauses and minor page
faults, the worker's RSS when the compile began and its peak while compiling
(compare's `compile_host_memory`), and the eager and compiled median sample; then each side's
median of those per case. For telling a figure the instrument moved (every process of one side
off) from a host that ran one process slow (one row off).

    python3 benchmarks/gpu/per_process_table.py pre=DIR/pre nopre=DIR/nopre old=DIR/old
"""

from __future__ import annotations

import glob
import json
import statistics
import sys
from pathlib import Path
from typing import Any

MiB = float(1 << 20)
COLUMNS = ("compile_s", "compile_cpu_s", "inductor_s", "gc_s", "faults_k", "rss_before_mib", "rss_peak_mib", "eager_us", "compiled_us")


def median_us(block: dict[str, Any] | None) -> float | None:
    samples = (block or {}).get("samples_s") or []
    return statistics.median(samples) * 1e6 if samples else None


def row(record: dict[str, Any]) -> dict[str, Any]:
    metrics = record.get("metrics") or {}

    def mib(key: str) -> float | None:
        return metrics[key] / MiB if metrics.get(key) else None

    faults = metrics.get("compile_minor_faults")
    return {"compile_s": metrics.get("compile_time_s"), "compile_cpu_s": metrics.get("compile_cpu_s"),
            "inductor_s": (metrics.get("compile_breakdown_s") or {}).get("inductor"),
            "gc_s": (metrics.get("compile_gc") or {}).get("seconds"),
            "faults_k": faults / 1000 if faults is not None else None,
            "rss_before_mib": mib("compile_rss_before_bytes"), "rss_peak_mib": mib("compile_peak_rss_bytes"),
            "eager_us": median_us(record.get("eager")), "compiled_us": median_us(record.get("compiled"))}


def side_rows(folder: str) -> dict[str, list[dict[str, Any]]]:
    """case -> one row per process (derived eager rows left out: no process of their own)."""
    out: dict[str, list[dict[str, Any]]] = {}
    files = sorted(glob.glob(str(Path(folder) / "runs" / "*.json")) or glob.glob(str(Path(folder) / "*.json")))
    for path in files:
        run = json.loads(Path(path).read_text())
        for record in run.get("records", []):
            start = (record.get("worker") or {}).get("start") or "spawn"
            if start == "derived" or record.get("status") != "ok":
                continue
            case = record["case"]
            name = f"{case['workload']}/{case['scenario']}/{case['compiler']}"
            out.setdefault(name, []).append({"run": Path(path).stem[:15], "start": start, **row(record)})
    return out


def fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def main(argv: list[str]) -> int:
    if not argv or any("=" not in a for a in argv):
        print("usage: per_process_table.py SIDE=FOLDER [SIDE=FOLDER ...]", file=sys.stderr)
        return 2
    sides = {name: side_rows(folder) for name, folder in (a.split("=", 1) for a in argv)}
    cases = sorted({case for rows in sides.values() for case in rows})
    header = f"{'side':<6} {'run':<15} {'start':<9} " + " ".join(f"{c:>14}" for c in COLUMNS)
    for case in cases:
        print(f"== {case}\n{header}")
        for name, rows in sides.items():
            for r in rows.get(case, []):
                print(f"{name:<6} {r['run']:<15} {r['start']:<9} " + " ".join(f"{fmt(r[c]):>14}" for c in COLUMNS))
        for name, rows in sides.items():
            values = rows.get(case, [])
            meds = [statistics.median(v) if (v := [r[c] for r in values if r[c] is not None]) else None for c in COLUMNS]
            print(f"{name:<6} {'median of ' + str(len(values)):<25} " + " ".join(f"{fmt(m):>14}" for m in meds))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
