"""A `--gpus` run's scheduling figures (config.multi_gpu, harness/run/multigpu.py) for the
terminal: a per-GPU table (cases, busy, idle, busy share) and the scaling headline, printed
by `compilebench run` after its summary and by `compilebench show`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table
from rich.text import Text


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def gpu_table(summary: Mapping[str, Any]) -> Table:
    table = Table(title=f"{summary.get('n_gpus')} GPUs, pool wall {summary.get('wall_s', 0):.1f}s")
    for col in ("gpu", "cases", "busy s", "idle s", "busy share", "overhead s"):
        table.add_column(col, justify="left" if col == "gpu" else "right")
    for row in summary.get("per_gpu") or []:
        table.add_row(*(Text(c) for c in (str(row["gpu"]), str(row["cases"]), f"{row['busy_s']:.1f}",
                                          f"{row['idle_s']:.1f}", _pct(row.get("busy_share")),
                                          f"{row.get('overhead_s') or 0.0:.1f}")))
    return table


def scaling_lines(summary: Mapping[str, Any]) -> list[str]:
    """The efficiency against each one-GPU figure that exists, then the definition and how
    the queue was ordered (how many cases had no history of their own)."""
    scaling = summary.get("scaling") or {}
    lines = []
    for key, what in (("vs_history", "one-GPU walls from the history store"), ("vs_own_walls", "this run's own case walls")):
        block = scaling.get(key) or {}
        if block.get("efficiency") is None:
            if key == "vs_history":
                lines.append(f"scaling vs {what}: not given ({block.get('cases_known', 0)}/{summary.get('cases')} "
                             "cases measured one at a time in the store)")
            continue
        lines.append(f"scaling vs {what}: {block['one_gpu_s']:.1f}s on one GPU / {summary.get('wall_s', 0):.1f}s = "
                     f"{block['speedup']:.2f}x on {summary.get('n_gpus')} GPUs, efficiency {_pct(block['efficiency'])}")
    lines.append(f"busy share mean {_pct(summary.get('busy_share_mean'))}, min {_pct(summary.get('busy_share_min'))}; "
                 + str(scaling.get("definition", "")))
    sources = (summary.get("order") or {}).get("expected_from") or {}
    if sources:
        lines.append("queue: longest expected first; expected time from "
                     + ", ".join(f"{what} {n}" for what, n in sorted(sources.items())))
    return lines
