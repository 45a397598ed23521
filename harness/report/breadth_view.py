"""The breadth headline (harness.analysis.breadth) as a terminal table, for `compilebench show`."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from harness.analysis.breadth import BREADTH_COLUMNS, BreadthRow, row_cells

_RIGHT = {"pass rate", "geomean speedup", "mean cold compile", "memory compression", "graph breaks"}


def breadth_table(rows: Sequence[BreadthRow], title: str = "headline by suite") -> Table:
    """One row per suite x device x compiler; cells never interpret markup (names come from users)."""
    table = Table(title=title)
    for col in BREADTH_COLUMNS:
        table.add_column(col, justify="right" if col in _RIGHT else "left", overflow="fold")
    for row in rows:
        table.add_row(*(Text(c) for c in row_cells(row)))
    return table
