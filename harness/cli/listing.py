"""`compilebench list`: what can be run here (suites, workloads, compilers, scenarios,
devices), and `show`'s machine-readable form.

Names are what users type, so they are never cut: on a terminal the tables fold long
names onto a second line; into a pipe or file the output is plain lines (one item a line,
tab-separated fields, nothing wrapped); `--json` is the same catalog as one JSON object.
A suite of more than `SUITE_PREVIEW` workloads (transformers-zoo-tiny has 280) shows its
count and first `PREVIEW_NAMES` names in the suites section; `list --suite S` lists S's workloads, one a
line, in the workloads section (the JSON always has every name).
"""

from __future__ import annotations

import json
from typing import Any

from harness.cli.common import EXIT_OK

SUITE_PREVIEW = 12  # a suite's row names all its workloads up to this many
PREVIEW_NAMES = 5  # else its count, this many names and how many more


def catalog(workload_files: list[str], compiler_files: list[str], override: bool = False,
            suite: str | None = None) -> dict[str, Any]:
    """Everything `list` shows, as plain data (the --json output); with `suite`, that suite
    and its workloads only (an unknown name is a one-line error naming the known ones)."""
    from compiler import COMPILERS, load_compiler_files
    from harness.measure.devices import DEVICE_TYPES, present_devices
    from harness.model.scenarios import SCENARIOS
    from harness.model.workloads import WORKLOADS
    from harness.run.runner import load_registries
    from suites import SUITES, get_suite

    load_registries(workload_files, override)
    load_compiler_files(compiler_files)
    present = present_devices()
    suites = [get_suite(suite)] if suite else sorted(SUITES.values(), key=lambda s: s.name)
    shown = set(suite_workloads(suites[0])) if suite else set(WORKLOADS)
    return {
        "suites": [{"name": s.name, "description": s.description, "workloads": suite_workloads(s)} for s in suites],
        "workloads": [{"name": w.name, "scenarios": list(w.scenarios), "sizes": list(w.sizes), "unit": w.unit,
                       "batch_size": w.batch_size, "description": w.description}
                      for w in sorted(WORKLOADS.values(), key=lambda w: w.name) if w.name in shown],
        "compilers": [{"name": c.name, "backend": c.backend, "mode": c.mode, "description": c.description}
                      for c in sorted(COMPILERS.values(), key=lambda c: c.name)],
        "scenarios": sorted(SCENARIOS),
        "devices": [{"name": d, "present": d in present} for d in DEVICE_TYPES],
    }


def suite_workloads(suite: Any) -> list[str]:
    """The suite's workloads in first-use order, each once (entries repeat a workload per
    compiler, device or size)."""
    return list(dict.fromkeys(w for entry in suite.entries for w in entry.workloads))


# (section, columns): the first column is the name users type
COLUMNS: dict[str, tuple[str, ...]] = {
    "suites": ("name", "description", "workloads"),
    "workloads": ("name", "scenarios", "sizes", "unit", "batch_size", "description"),
    "compilers": ("name", "backend", "mode", "description"),
}


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return "-" if value is None else str(value)


def workloads_cell(suite: dict[str, Any], listed_below: bool = False) -> str:
    """A suite's workloads: all of them up to SUITE_PREVIEW, else the count, the first
    names and where the rest are (the workloads section below, or `list --suite`)."""
    names = suite["workloads"]
    if len(names) <= SUITE_PREVIEW:
        return _cell(names)
    rest = "all listed under workloads" if listed_below else f"`compilebench list --suite {suite['name']}` lists all"
    return f"{len(names)} workloads: {_cell(names[:PREVIEW_NAMES])} and {len(names) - PREVIEW_NAMES} more ({rest})"


def display_rows(data: dict[str, Any], section: str, listed_below: bool = False) -> list[list[str]]:
    """The cells of one section as printed (the JSON keeps the full values)."""
    return [[workloads_cell(item, listed_below) if (section, c) == ("suites", "workloads") else _cell(item[c])
             for c in COLUMNS[section]] for item in data[section]]


def _devices_line(data: dict[str, Any]) -> str:
    return "devices: " + ", ".join(f"{d['name']} ({'present' if d['present'] else 'not present'})"
                                   for d in data["devices"])


def plain_lines(data: dict[str, Any], listed_below: bool = False) -> list[str]:
    """For pipes and files: a header per section, then one tab-separated line per item."""
    lines: list[str] = []
    for section, columns in COLUMNS.items():
        lines.append(f"{section}:\t" + "\t".join(columns))
        lines += ["  " + "\t".join(row) for row in display_rows(data, section, listed_below)]
    lines.append(f"scenarios: {', '.join(data['scenarios'])}")
    lines.append(_devices_line(data))
    return lines


def print_tables(data: dict[str, Any], console: Any = None, fmt: str = "table", listed_below: bool = False) -> None:
    """For a terminal: rich tables whose cells fold instead of ending in '…' (fmt 'table');
    or the same tables as markdown."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from harness.report.display import print_table

    console = console or Console()
    for section, columns in COLUMNS.items():
        table = Table(title=section)
        for column in columns:
            # fold, never '…' (rich's default): a too-narrow cell continues on the next line.
            # No min_width: rich overflows the console rather than shrink a column below it.
            table.add_column("batch" if column == "batch_size" else column, overflow="fold")
        for row in display_rows(data, section, listed_below):
            table.add_row(*(Text(cell) for cell in row))
        print_table(console, table, fmt)
    console.print(Text(f"scenarios: {', '.join(data['scenarios'])}"))
    console.print(Text(_devices_line(data)))


def cmd_list(args: Any) -> int:
    import sys

    data = catalog(args.workload_file, args.compiler_file, args.override_workloads, args.suite)
    fmt = args.format if args.format != "auto" else ("table" if sys.stdout.isatty() else "plain")
    listed_below = args.suite is not None  # the workloads section holds exactly the suite's
    if args.json:
        print(json.dumps(data, indent=1))
    elif fmt == "plain":
        print("\n".join(plain_lines(data, listed_below)))
    else:
        print_tables(data, fmt=fmt, listed_below=listed_below)
    return EXIT_OK
