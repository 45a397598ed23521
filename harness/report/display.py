"""Terminal output: the progress line while running and the results table (rich)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from harness.model.schema import Case, Record, Run


def make_console(stderr: bool = False) -> Console:
    """A console that does not squeeze tables to 80 columns in CI logs and pipes."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=220)
    return console


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


class ProgressPrinter:
    """One line per finished case; on a terminal also a live line with the running case and
    its elapsed time (CI logs get plain start/finish lines instead)."""

    def __init__(self, console: Console | None = None):
        self.console = console or make_console(stderr=True)
        self.started = 0.0
        self.run_started = time.monotonic()
        self.live = None
        self.task = None

    def __call__(self, event: str, case: Case, index: int, total: int, record: Record | None) -> None:
        prefix = f"[{index + 1}/{total}]"
        if event == "start":
            self.started = time.monotonic()
            self._start_live(f"{prefix} running {case.case_id}")
            return
        self._stop_live()
        assert record is not None
        elapsed = time.monotonic() - self.started
        total_elapsed = time.monotonic() - self.run_started
        style = STATUS_STYLE.get(record.status, "bold red")
        line = Text(f"{prefix} ")
        line.append(record.status, style=style)
        line.append(f" {case.case_id} in {elapsed:.1f}s (run {total_elapsed:.0f}s)")
        sp = (record.metrics or {}).get("speedup")
        if sp:
            line.append(f"  speedup {sp:.2f}x")
        self.console.print(line, highlight=False)

    def _start_live(self, text: str) -> None:
        if not self.console.is_terminal:
            self.console.print(Text(text + " ..."), highlight=False)
            return
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.live = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                             console=self.console, transient=True)
        self.live.start()
        self.task = self.live.add_task(escape(text), total=None)

    def _stop_live(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def close(self) -> None:
        self._stop_live()
