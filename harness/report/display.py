"""Terminal output: the progress line while running and the results table (rich)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from harness.model.schema import Case, Record, Run
from harness.report.eta import CaseTimes, EtaEstimator, fmt_eta

# wide enough that rich never wraps or cuts a line into a pipe or a CI log (its default is 80)
PIPE_WIDTH = 100_000
FORMATS = ("auto", "table", "plain", "markdown")


def make_console(stderr: bool = False) -> Console:
    """A console that never squeezes a line into a CI log or a pipe: off a terminal it is
    as wide as any line and does not wrap (soft_wrap), so names and verdicts stay whole."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True)
    return console


def cell_text(cell: Any) -> str:
    """A table cell as the plain text it shows: markup strings rendered, Text unstyled."""
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        try:
            return Text.from_markup(cell).plain
        except Exception:  # noqa: BLE001 - not markup after all (an unbalanced '[/]'): show it as written
            return cell
    return str(cell)


def table_rows(table: Table) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of a rich Table as plain strings, whatever its cells hold."""
    headers = [cell_text(c.header) for c in table.columns]
    columns = [[cell_text(cell) for cell in c.cells] for c in table.columns]
    return headers, [list(row) for row in zip(*columns, strict=True)] if columns else []


def plain_table(table: Table) -> str:
    """Aligned columns, two spaces apart, nothing cut or wrapped (one row, one line): for
    CI logs, pipes and grep. Multi-line cells are joined with ' / '."""
    headers, rows = table_rows(table)
    rows = [[" / ".join(v.splitlines()) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    right = [c.justify == "right" for c in table.columns]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)).rstrip()

    title = cell_text(table.title) if table.title else ""
    out = ([title] if title else []) + [line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]
    return "\n".join(out)


def markdown_table(table: Table) -> str:
    """GitHub markdown (e.g. for $GITHUB_STEP_SUMMARY); '|' in a cell is escaped."""
    headers, rows = table_rows(table)

    def line(values: list[str]) -> str:
        return "| " + " | ".join(" ".join(v.splitlines()).replace("|", "\\|") for v in values) + " |"

    align = ["---:" if c.justify == "right" else "---" for c in table.columns]
    title = cell_text(table.title) if table.title else ""
    return "\n".join(([f"**{title}**", ""] if title else []) + [line(headers), "| " + " | ".join(align) + " |"]
                     + [line(r) for r in rows])


def print_table(console: Console, table: Table, fmt: str = "auto") -> None:
    """Print a table in one of FORMATS. auto: rich's table on a terminal (cells fold, never
    end in '…'), plain aligned text anywhere else, so a CI log never cuts a case id or a
    verdict. Every command that prints a table goes through here (its --format option)."""
    if fmt == "auto":
        fmt = "table" if console.is_terminal else "plain"
    if fmt == "table":
        for column in table.columns:
            if column.overflow == "ellipsis":  # rich's default: fold instead, a name is never cut
                column.overflow = "fold"
        console.print(table)
    elif fmt == "plain":
        console.print(Text(plain_table(table)), soft_wrap=True)
    elif fmt == "markdown":
        console.print(Text(markdown_table(table)), soft_wrap=True)
    else:
        raise ValueError(f"unknown table format {fmt!r}; use one of {', '.join(FORMATS)}")


STATUS_STYLE = {"ok": "green", "skipped": "dim", "fail_accuracy": "magenta"}


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f}us"
    if s < 1:
        return f"{s * 1e3:.2f}ms"
    return f"{s:.2f}s"


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return str(n)


def format_value(v: float | None, fmt: str) -> str:
    """A metric by its spec's format (x, pct, s, bytes, int): the Python twin of the
    dashboard's inline JS formatter, for server-rendered tables (report and dashboard)."""
    if v is None:
        return "-"
    return {"x": lambda: f"{v:.2f}x", "pct": lambda: f"{100 * v:.1f}%", "s": lambda: fmt_seconds(v),
            "bytes": lambda: fmt_bytes(int(v)), "int": lambda: str(round(v))}.get(fmt, lambda: f"{v:.4g}")()


def fmt_speedup(m: dict[str, Any]) -> str:
    sp = m.get("speedup")
    if sp is None:
        return "-"
    lo, hi = m.get("speedup_ci_low"), m.get("speedup_ci_high")
    return f"{sp:.2f}x [{lo:.2f},{hi:.2f}]" if lo is not None and hi is not None else f"{sp:.2f}x"


def results_table(run: Run, title: str | None = None) -> Table:
    table = Table(title=title or f"run {run.run_id}", show_lines=False)
    for col, just in [("case", "left"), ("status", "left"), ("speedup [95% CI]", "right"), ("latency", "right"),
                      ("throughput", "right"), ("compile", "right"), ("peak mem e/c", "right"),
                      ("breaks", "right"), ("recomp", "right"), ("accuracy", "left")]:
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in run.records:
        table.add_row(*record_cells(r))
    return table


def record_cells(r: Record) -> list[Any]:
    m = r.metrics or {}
    acc = m.get("accuracy") or {}
    thr = m.get("throughput")
    mem_e = (r.eager or {}).get("peak_memory_bytes")
    mem_c = (r.compiled or {}).get("peak_memory_bytes")
    status = Text(r.status, style=STATUS_STYLE.get(r.status, "bold red"))
    return [
        Text(r.case_id),  # Text(): never interpret markup from workload names
        status,
        fmt_speedup(m),
        fmt_seconds(m.get("latency_s")),
        f"{thr:,.1f} {m.get('throughput_unit', '')}" if thr else "-",
        fmt_seconds(m.get("compile_time_s")),
        f"{fmt_bytes(mem_e)}/{fmt_bytes(mem_c)}" if mem_e or mem_c else "-",
        str(m.get("graph_breaks", "-")),
        str(m.get("recompiles", "-")),
        Text(str(acc.get("status", "-"))),
    ]


def print_failures(console: Console, run: Run) -> None:
    for r in run.records:
        if r.status not in ("ok", "skipped") and r.error:
            console.print(Text(f"{r.case_id}: {r.status}: {r.error.get('type')}: {r.error.get('message', '')[:300]}",
                               style="red"))
        elif r.status == "skipped":  # every skip says why: a run of skips is the first thing CI asks about
            why = (r.error or {}).get("message") or "no reason recorded"
            console.print(Text(f"{r.case_id}: skipped: {why}", style="dim"))


def derived_from(record: Record) -> str | None:
    """The twin case id a derived eager record came from (harness/run/twins.py), else None."""
    worker = record.worker or {}
    return worker.get("from_case") if worker.get("start") == "derived" else None


class ProgressPrinter:
    """One line per finished case; on a terminal also a live line per running case with its
    elapsed time (CI logs get plain start/finish lines instead). With `--gpus` several cases
    run at once: their "start" events come from the pool's slot threads as each GPU starts a
    case (a lock keeps the lines whole), and each finished line gives that case's own time.
    `clock`: seconds, monotonic (tests pass a fake)."""

    def __init__(self, console: Console | None = None, history: CaseTimes | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.console = console or make_console(stderr=True)
        self.clock = clock
        self.run_started = clock()
        self.running: dict[str, tuple[float, Any]] = {}  # case id -> (its start, its live task or None)
        self.most_running = 1  # the most cases seen running at once: the ETA's lanes (--gpus: the GPUs)
        self.live = None
        self.lock = threading.Lock()
        self.eta = EtaEstimator(history)  # remaining time from this run's cases and the store's (harness/report/eta.py)

    def __call__(self, event: str, case: Case, index: int, total: int, record: Record | None) -> None:
        with self.lock:
            if event == "start":
                self._started(case, index, total)
            else:
                assert record is not None
                self._finished(case, index, total, record)

    def _started(self, case: Case, index: int, total: int) -> None:
        started = self.clock()
        self.most_running = max(self.most_running, len(self.running) + 1)
        eta = fmt_eta(self.eta.remaining_s(total - index, case.suite, self.most_running))
        text = f"[{index + 1}/{total}] running {case.case_id}" + (f" ({eta})" if eta else "")
        self.running[case.case_id] = (started, self._add_live(text))

    def _finished(self, case: Case, index: int, total: int, record: Record) -> None:
        started, task = self.running.pop(case.case_id, (None, None))
        self._remove_live(task)
        total_elapsed = self.clock() - self.run_started
        style = STATUS_STYLE.get(record.status, "bold red")
        line = Text(f"[{index + 1}/{total}] ")
        line.append(record.status, style=style)
        twin = derived_from(record)
        if twin is not None:
            self.eta.derived()  # the cases still to come are derived in about the same share
            where = f"derived: eager figures from {twin}, no process of its own"
        elif started is not None:
            elapsed = self.clock() - started
            self.eta.finished(case.case_id, elapsed)
            where = f"in {elapsed:.1f}s"
        else:
            where = "finished"  # no start seen: no time of its own to give
        # a derived case had no "start" (it ran no process) and is not fed to the ETA: its microseconds
        # would pull down the time expected of the cases that do run
        eta = fmt_eta(self.eta.remaining_s(total - index - 1, case.suite, self.most_running))
        line.append(f" {case.case_id} {where} (run {total_elapsed:.0f}s{', ' + eta if eta else ''})")
        sp = (record.metrics or {}).get("speedup")
        if sp:
            line.append(f"  speedup {sp:.2f}x")
        self.console.print(line, highlight=False)

    def _add_live(self, text: str) -> Any:
        """A spinner line for a running case on a terminal (its task id); elsewhere a plain line."""
        if not self.console.is_terminal:
            self.console.print(Text(text + " ..."), highlight=False)
            return None
        if self.live is None:
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.live = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=self.console, transient=True)
            self.live.start()
        return self.live.add_task(escape(text), total=None)

    def _remove_live(self, task: Any) -> None:
        if self.live is None:
            return
        if task is not None:
            self.live.remove_task(task)
        if not self.live.tasks:
            self._stop_live()

    def _stop_live(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def close(self) -> None:
        self._stop_live()
