"""Where each record's peak memory came from, one line a case: the eager and compiled peaks
with their `memory_source`, `memory_rounds` (scope, reads, probe bytes subtracted, why not),
and the machine probe's version and sample count. For checking a memory-path change on a
GPU run (docs/RESULTS.md, "Peak memory").

    python3 benchmarks/gpu/memory_rounds_table.py RUN.json [RUN.json ...]
"""

from __future__ import annotations

import json
import sys
from typing import Any

MiB = float(1 << 20)


def peak(record: dict[str, Any], variant: str) -> str:
    block = record.get(variant) or {}
    if not block.get("peak_memory_bytes"):
        return "-"
    return f"{block['peak_memory_bytes'] / MiB:.1f}/{block.get('memory_source')}"


def line(record: dict[str, Any]) -> str:
    metrics = record.get("metrics") or {}
    rounds = metrics.get("memory_rounds") or {}
    probe = metrics.get("machine_probe") or {}
    case = record["case"]
    return (f"{case['workload']}/{case['scenario']}/{case['compiler']:<26} {record['status']:<6} "
            f"eager {peak(record, 'eager'):<16} compiled {peak(record, 'compiled'):<16} "
            f"scope {rounds.get('scope')} resident {rounds.get('probe_resident_bytes')} reads {rounds.get('reads')} "
            f"refused {rounds.get('refused')} probe {probe.get('version')} n={probe.get('n')}")


def main(paths: list[str]) -> int:
    if not paths:
        print("usage: memory_rounds_table.py RUN.json [RUN.json ...]", file=sys.stderr)
        return 2
    for path in paths:
        with open(path) as fh:
            for record in json.load(fh)["records"]:
                print(line(record))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
