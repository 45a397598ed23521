"""Markdown table of diffusion run files: one row per case, figures from the records only.

    python3 benchmarks/diffusion_table.py RUN.json [RUN.json ...]

Columns: status, eager and compiled median latency, speedup with its 95% CI, cold compile
(first compiled call), peak memory of each variant, graph breaks, recompiles, CUDA-graph
skips, accuracy, and the worker's wall time (build + cold compile + measurement).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.model.schema import Record, load_run  # noqa: E402

HEADER = ("| case | status | eager ms | compiled ms | speedup [95% CI] | cold compile s | eager peak GiB "
          "| compiled peak GiB | breaks | recompiles | cg skips | accuracy | worker s |")


def _num(value: Any, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def _median_ms(block: dict[str, Any] | None) -> str:
    median = ((block or {}).get("summary") or {}).get("median")
    return _num(median * 1e3 if median is not None else None, ".1f")


def _peak_gib(block: dict[str, Any] | None) -> str:
    peak = (block or {}).get("peak_memory_bytes")
    return _num(peak / 2**30 if peak else None, ".2f")


def row(record: Record) -> str:
    m = record.metrics or {}
    speedup = "-"
    if m.get("speedup") is not None:
        speedup = f"{m['speedup']:.2f}x [{_num(m.get('speedup_ci_low'), '.2f')}, {_num(m.get('speedup_ci_high'), '.2f')}]"
    status = record.status
    if record.error:
        status += f" ({record.error.get('type')}: {str(record.error.get('message', ''))[:90]})"
    accuracy = (m.get("accuracy") or {}).get("status", "-")
    return (f"| {record.case_id} | {status} | {_median_ms(record.eager)} | {_median_ms(record.compiled)} | {speedup} "
            f"| {_num(m.get('compile_time_s'), '.1f')} | {_peak_gib(record.eager)} | {_peak_gib(record.compiled)} "
            f"| {_num(m.get('graph_breaks'))} | {_num(m.get('recompiles'))} | {_num(m.get('cudagraph_skips'))} "
            f"| {accuracy} | {_num((record.worker or {}).get('wall_s'), '.1f')} |")


def table(paths: list[str]) -> str:
    lines = [HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
    for path in paths:
        lines += [row(r) for r in load_run(path).records]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    print(table(sys.argv[1:]))
