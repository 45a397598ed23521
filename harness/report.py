"""HTML run report: one self-contained file (inline CSS and SVG, no network).

Rendered with Jinja2 with autoescaping on, so every string that came from a model, a
workload file or an exception is escaped. Charts are matplotlib figures serialised to SVG
and inlined.
"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from .display import fmt_bytes, fmt_seconds
from .schema import Run
from .stats import geomean


def _env() -> Environment:
    env = Environment(loader=PackageLoader("harness", "templates"), autoescape=select_autoescape(["html", "j2"]))
    env.filters["seconds"] = fmt_seconds
    env.filters["bytes"] = fmt_bytes
    return env


def headline(run: Run) -> list[dict[str, Any]]:
    """Per device x compiler: geomean speedup over passing cases, pass rate, compile time."""
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for r in run.records:
        groups[(r.case.device, r.case.compiler)].append(r)
    rows = []
    for (device, compiler), recs in sorted(groups.items()):
        ok = [r for r in recs if r.status == "ok"]
        compile_times = [r.metrics.get("compile_time_s") for r in ok if r.metrics.get("compile_time_s") is not None]
        failures: dict[str, int] = defaultdict(int)
        for r in recs:
            if r.status != "ok":
                failures[r.status] += 1
        rows.append({
            "device": device,
            "compiler": compiler,
            "geomean_speedup": geomean([r.metrics.get("speedup") for r in ok]),
            "pass_rate": len(ok) / len(recs) if recs else 0.0,
            "cases": len(recs),
            "mean_compile_s": sum(compile_times) / len(compile_times) if compile_times else None,
            "geomean_compression": geomean([r.metrics.get("compression_ratio") for r in ok]),
            "failures": dict(failures),
        })
    return rows


def speedup_chart_svg(run: Run) -> str:
    """Horizontal bars: speedup per case with its bootstrap CI, 1.0x marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in run.records if r.metrics.get("speedup")]
    if not recs:
        return ""
    labels = [r.case_id for r in recs]
    values = [r.metrics["speedup"] for r in recs]
    lows = [v - (r.metrics.get("speedup_ci_low") or v) for v, r in zip(values, recs)]
    highs = [(r.metrics.get("speedup_ci_high") or v) - v for v, r in zip(values, recs)]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(recs) + 1.2))
    colors = ["#2e7d32" if v >= 1 else "#c62828" for v in values]
    ax.barh(range(len(recs)), values, xerr=[lows, highs], color=colors, capsize=3)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(recs)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speedup over eager (median ratio, 95% CI)")
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]  # drop the XML prolog so it inlines in HTML


def render_report(run: Run) -> str:
    template = _env().get_template("report.html.j2")
    return template.render(run=run, headline=headline(run), chart_svg=speedup_chart_svg(run))


def write_report(run: Run, out: str | Path) -> Path:
    from .schema import write_text_atomic

    return write_text_atomic(out, render_report(run))
