"""Report charts: matplotlib figures serialised to inline SVG.

Text is emitted as SVG <text> (not glyph paths) so the files stay small and matplotlib
XML-escapes every label. Every label that comes from data goes through `plain()`, which
escapes `$`, so a dollar sign in a workload name is a dollar sign, never mathtext (mathtext
stays on for matplotlib's own log-axis tick labels). Big runs are capped to the rows people look at first (the
lowest speedups) and the chart says so: the case table always has every row.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from harness.model.schema import Record  # noqa: E402

_RC = {"svg.fonttype": "none", "svg.hashsalt": "compilebench", "font.size": 9}
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
# boxplot's `vert` is deprecated from matplotlib 3.10 on, `orientation` does not exist before it
_HORIZONTAL = {"orientation": "horizontal"} if tuple(map(int, matplotlib.__version__.split(".")[:2])) >= (3, 10) else {"vert": False}
MAX_BAR_ROWS = 60
MAX_BOX_CASES = 40


@dataclass
class Chart:
    """One rendered chart: an id for anchors and tests, a title, the SVG, a caption."""

    key: str
    title: str
    svg: str
    note: str = ""


def figure_svg(fig) -> str:
    """The figure as an inline <svg> element (XML prolog and DOCTYPE dropped)."""
    buf = io.StringIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    svg = buf.getvalue()
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)  # RDF boilerplate, ~1 KB per chart
    return svg[svg.index("<svg"):]


def plain(text: str) -> str:
    """A data string as literal text for matplotlib (no mathtext)."""
    return str(text).replace("$", r"\$")


def workload_key(r: Record) -> str:
    """The case key without the compiler: the row on which compilers are grouped."""
    c = r.case
    base = f"{c.workload}/{c.scenario}/{c.device}/{c.dtype}/bs{c.batch_size}/{c.size}"
    return base + ("/" + ",".join(f"{k}={v}" for k, v in c.options) if c.options else "")


def _compiler_colors(records: Iterable[Record]) -> dict[str, str]:
    names = sorted({r.case.compiler for r in records})
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def _cap_rows(keys: list[str], worst_first: dict[str, float], limit: int) -> tuple[list[str], str]:
    """At most `limit` rows, keeping the lowest-speedup ones, plus a caption saying so."""
    if len(keys) <= limit:
        return keys, ""
    kept = set(sorted(keys, key=lambda k: worst_first.get(k, float("inf")))[:limit])
    return [k for k in keys if k in kept], f"showing the {limit} lowest-speedup of {len(keys)} rows; the table has all"


def _log_axis(axis, suffix: str) -> None:
    """Log scale with plain tick labels at 1-2-5 steps ("0.5x", "2s") instead of 10^k mathtext."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.axes.set_xscale("log")
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}{suffix}"))
    axis.set_minor_formatter(NullFormatter())


def _lowest_speedup_cases(rows: Sequence[Record], limit: int) -> tuple[list[Record], str]:
    lowest = {r.case_id: r.metrics.get("speedup") or float("inf") for r in rows}
    keys, note = _cap_rows([r.case_id for r in rows], lowest, limit)
    kept = set(keys)
    return [r for r in rows if r.case_id in kept], note


def speedup_bars(records: Sequence[Record]) -> Chart | None:
    """Speedup per workload, one bar per compiler, with the 95% bootstrap CI as error bars."""
    with_speedup = [r for r in records if r.metrics.get("speedup")]
    if not with_speedup:
        return None
    with matplotlib.rc_context(_RC):
        colors = _compiler_colors(with_speedup)
        by_key: dict[str, dict[str, Record]] = defaultdict(dict)
        for r in with_speedup:
            by_key[workload_key(r)][r.case.compiler] = r
        lowest = {k: min(r.metrics["speedup"] for r in d.values()) for k, d in by_key.items()}
        keys, note = _cap_rows(list(by_key), lowest, MAX_BAR_ROWS)
        n_comp = len(colors)
        height = 0.8 / n_comp
        fig, ax = plt.subplots(figsize=(9, max(2.0, 0.22 * len(keys) * max(1, n_comp * 0.7) + 1.3)))
        for ci, (compiler, color) in enumerate(colors.items()):
            ys, vals, lo, hi = [], [], [], []
            for row, key in enumerate(keys):
                r = by_key[key].get(compiler)
                if r is None:
                    continue
                v = r.metrics["speedup"]
                ys.append(row - 0.4 + height * (ci + 0.5))
                vals.append(v)
                lo.append(max(0.0, v - (r.metrics.get("speedup_ci_low") or v)))
                hi.append(max(0.0, (r.metrics.get("speedup_ci_high") or v) - v))
            ax.barh(ys, vals, height=height, xerr=[lo, hi], color=color, capsize=2, label=plain(compiler),
                    error_kw={"elinewidth": 0.8})
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(range(len(keys)), [plain(k) for k in keys], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("speedup over eager (ratio of medians, 95% CI); right of the line = faster")
        ax.legend(loc="best", fontsize=7, title="compiler")
        fig.tight_layout()
        return Chart("speedup", "Speedup per workload", figure_svg(fig), note)


def compile_vs_speedup(records: Sequence[Record]) -> Chart | None:
    """Cold compile time (log x) against speedup: is the compile cost buying anything?"""
    pts = [r for r in records if r.metrics.get("speedup") and r.metrics.get("compile_time_s")]
    if not pts:
        return None
    with matplotlib.rc_context(_RC):
        colors = _compiler_colors(pts)
        fig, ax = plt.subplots(figsize=(7, 4))
        for compiler, color in colors.items():
            mine = [r for r in pts if r.case.compiler == compiler]
            ax.scatter([r.metrics["compile_time_s"] for r in mine], [r.metrics["speedup"] for r in mine],
                       color=color, label=plain(compiler), s=18, alpha=0.8)
        ax.axhline(1.0, color="black", linewidth=0.8)
        _log_axis(ax.xaxis, "s")
        ax.set_xlabel("cold compile time (log scale)")
        ax.set_ylabel("speedup over eager")
        ax.legend(fontsize=7, title="compiler")
        fig.tight_layout()
        return Chart("compile-vs-speedup", "Compile time vs speedup", figure_svg(fig))


def peak_memory(records: Sequence[Record]) -> Chart | None:
    """Eager and compiled peak memory side by side per case (MiB)."""
    rows = [r for r in records if (r.eager or {}).get("peak_memory_bytes") and (r.compiled or {}).get("peak_memory_bytes")]
    if not rows:
        return None
    with matplotlib.rc_context(_RC):
        kept, note = _lowest_speedup_cases(rows, MAX_BAR_ROWS)
        keys = [r.case_id for r in kept]
        by_id = {r.case_id: r for r in kept}
        mib = 2 ** 20
        fig, ax = plt.subplots(figsize=(9, max(2.0, 0.3 * len(keys) + 1.3)))
        idx = range(len(keys))
        ax.barh([i - 0.2 for i in idx], [by_id[k].eager["peak_memory_bytes"] / mib for k in keys], height=0.4,
                color="#9e9e9e", label="eager")
        ax.barh([i + 0.2 for i in idx], [by_id[k].compiled["peak_memory_bytes"] / mib for k in keys], height=0.4,
                color="#1f77b4", label="compiled")
        kinds = sorted({str(by_id[k].eager.get("memory_kind", "")) for k in keys} - {""})
        ax.set_yticks(list(idx), [plain(k) for k in keys], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(plain("peak memory (MiB)" + (f" [{', '.join(kinds)}]" if kinds else "")))
        ax.legend(fontsize=7)
        fig.tight_layout()
        return Chart("memory", "Peak memory, eager vs compiled", figure_svg(fig), note)


def latency_distributions(records: Sequence[Record]) -> Chart | None:
    """Box plots of the raw per-call samples, eager vs compiled, per case. Each case is scaled
    by its own eager median so cases microseconds and seconds apart share one axis; the
    table has the absolute latencies."""
    rows = [r for r in records if (r.eager or {}).get("samples_s") and (r.compiled or {}).get("samples_s")]
    if not rows:
        return None
    with matplotlib.rc_context(_RC):
        kept, note = _lowest_speedup_cases(rows, MAX_BOX_CASES)
        keys = [r.case_id for r in kept]
        data, positions, colors = [], [], []
        for i, r in enumerate(kept):
            # samples_s are already per call (the timer divides by its inner loop count)
            scale = float(np.median(r.eager["samples_s"])) or 1.0
            data += [np.asarray(r.eager["samples_s"]) / scale, np.asarray(r.compiled["samples_s"]) / scale]
            positions += [i - 0.2, i + 0.2]
            colors += ["#9e9e9e", "#1f77b4"]
        fig, ax = plt.subplots(figsize=(9, max(2.0, 0.35 * len(keys) + 1.3)))
        box = ax.boxplot(data, positions=positions, widths=0.35, patch_artist=True, showfliers=False,
                         medianprops={"color": "black"}, **_HORIZONTAL)
        for patch, color in zip(box["boxes"], colors, strict=True):
            patch.set_facecolor(color)
        ax.axvline(1.0, color="black", linewidth=0.6, linestyle=":")
        ax.set_yticks(range(len(keys)), [plain(k) for k in keys], fontsize=7)
        ax.invert_yaxis()
        _log_axis(ax.xaxis, "x")
        ax.set_xlabel("latency per call / the case's eager median (log); grey = eager, blue = compiled")
        fig.tight_layout()
        return Chart("latency", "Latency distributions (raw samples)", figure_svg(fig), note)


def report_charts(records: Sequence[Record]) -> list[Chart]:
    """Every report chart that has data, in reading order."""
    makers = (speedup_bars, compile_vs_speedup, peak_memory, latency_distributions)
    return [c for c in (m(records) for m in makers) if c is not None]
