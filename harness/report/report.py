"""HTML run report: one self-contained file (inline CSS, JS and SVG, no network).

Rendered with Jinja2 with autoescaping on, so every string that came from a model, a
workload file or an exception is escaped; data handed to inline JS goes through `|tojson`,
which escapes `<`, `>` and `&` so a `</script>` in a name cannot end the script block.
Charts come from `harness.report.charts` (matplotlib -> inline SVG).
"""

from __future__ import annotations

import functools
import math
import os
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from harness.analysis.breadth import FAILURE_ORDER, BreadthRow, breadth_rows, family_of
from harness.analysis.compare import probe_factors
from harness.analysis.verdicts import Verdict
from harness.measure.probe import kernel_medians, probe_block
from harness.model.schema import Record, Run
from harness.report.display import fmt_bytes, fmt_seconds, format_value

FAILED_STATUSES_ORDER = FAILURE_ORDER  # one order for every view


@functools.lru_cache(maxsize=1)
def template_env() -> Environment:
    """The Jinja2 environment shared by the report and the dashboard (autoescape always on).
    Cached: compiling the templates costs more than rendering one report."""
    env = Environment(loader=PackageLoader("harness.report", "templates"), autoescape=select_autoescape(default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["seconds"] = fmt_seconds
    env.filters["bytes"] = fmt_bytes
    env.filters["x"] = lambda v, digits=2: "-" if v is None else f"{v:.{digits}f}x"
    env.filters["metric"] = format_value
    env.filters["pct"] = lambda v, digits=0: "-" if v is None else f"{100 * v:.{digits}f}%"
    return env


def headline(run: Run, baseline: Run | None = None) -> list[BreadthRow]:
    """Per suite x device x compiler: pass rate, geomean speedup, cold compile time, memory
    compression, graph breaks and failures by status (harness.analysis.breadth). With a
    baseline the geomeans count only the cases passing in both runs, so an unrelated model
    starting to fail cannot move them; the cases left out are listed with why."""
    base_status = {r.case_id: r.status for r in baseline.records} if baseline is not None else None
    return breadth_rows(run.records, base_status)


# -- machine probe per process ---------------------------------------------------------------

CASE_PAGE = 250  # the case table shows this many matching rows until "show all" (a 1,000-row layout is slow)
PROBE_FLAG = 0.10  # a process whose probe is this far from the run's median ran on a differently fast host


@dataclass(frozen=True)
class ProbeFactor:
    """How much slower the machine was in this case's process than the run's median process
    (compare's probe_factors, rescaled to the median; same probe set only)."""

    factor: float
    version: str
    flagged: bool

    @property
    def text(self) -> str:
        return f"{self.factor:.2f}x"


def probe_factors_by_case(records: list[Record]) -> dict[str, ProbeFactor]:
    """Case id -> its process's probe factor relative to the median of the run's processes
    with a usable probe of the same set; cases without one are absent."""
    by_version: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        block = probe_block(r.metrics)
        if block is not None and kernel_medians(block) is not None:
            by_version[str(block.get("version"))].append(r)
    out: dict[str, ProbeFactor] = {}
    for version, recs in by_version.items():
        found = probe_factors(recs, len(recs))
        if found is None:
            continue
        factors, _ = found
        median = statistics.median(factors)
        for r, f in zip(recs, factors, strict=True):
            rel = f / median
            out[r.case_id] = ProbeFactor(rel, version, abs(math.log(rel)) > math.log1p(PROBE_FLAG))
    return out


def trace_href(info: Any, base_dir: Path | None) -> str | None:
    """Link to a case's trace: tlparse's index.html when it was rendered, else the log folder.
    Relative to the report's folder when that is known (the report and results move together)."""
    if not isinstance(info, dict) or not (info.get("html") or info.get("dir")):
        return None
    target = Path(str(info.get("html") or info.get("dir")))
    if base_dir is not None:
        try:
            return Path(os.path.relpath(target, base_dir)).as_posix()
        except ValueError:  # another drive (Windows)
            pass
    return target.resolve().as_uri() if target.is_absolute() else target.as_posix()


def cache_summary(m: dict[str, Any]) -> str:
    """'fx 3/3, aot 0/3' (hits/lookups per layer that was looked up), '-' when nothing was."""
    parts = []
    short = {"fx_graph": "fx", "aot_autograd": "aot", "autotune": "autotune"}
    for layer, name in short.items():
        block = (m.get("cache_layers") or {}).get(layer) or {}
        looked = sum(int(block.get(k) or 0) for k in ("hits", "misses", "bypasses"))
        if looked:
            parts.append(f"{name} {int(block.get('hits') or 0)}/{looked}")
    return ", ".join(parts) or "-"


def graphs_detail(m: dict[str, Any]) -> str:
    """'3 graphs, ops 6/3/1, 0 frames fell back to eager': what the break count alone hides
    (more breaks can mean more ops captured)."""
    ops = [g.get("ops") for g in m.get("ops_per_graph") or [] if isinstance(g, dict)]
    if not ops:
        return ""
    text = f"{len(ops)} graph(s), ops {'/'.join(str(o) for o in ops)}"
    if isinstance(m.get("calls_captured"), int):
        text += f", {m['calls_captured']} calls captured"
    if isinstance(m.get("frames_fell_back"), int):
        text += f", {m['frames_fell_back']} frame(s) fell back to eager"
    return text


def compile_beside_share(metrics: Mapping[str, Any]) -> float | None:
    """--compile-overlap: the share of the cold compile another worker was busy beside (None:
    the case compiled alone, or the run was one case at a time)."""
    block = metrics.get("compile_overlap")
    share = block.get("share") if isinstance(block, Mapping) else None
    return float(share) if isinstance(share, (int, float)) and share > 0 else None


def case_rows(run: Run, base_dir: Path | None = None) -> list[dict[str, Any]]:
    """One dict per record with what the case table shows; sort keys are plain numbers."""
    rows = []
    probes = probe_factors_by_case(run.records)
    for r in run.records:
        m = r.metrics or {}
        bd = m.get("compile_breakdown_s") or {}
        warm = m.get("warm_compile") if isinstance(m.get("warm_compile"), dict) else {}
        rows.append({
            "record": r,
            "case_id": r.case_id,
            "workload": r.case.workload,
            "suite": r.case.suite or "adhoc",
            "family": family_of(r),
            "probe": probes.get(r.case_id),
            "compiler": r.case.compiler,
            "device": r.case.device,
            "status": r.status,
            "speedup": m.get("speedup"),
            "ci": (m.get("speedup_ci_low"), m.get("speedup_ci_high")),
            "latency_s": m.get("latency_s"),
            "throughput": m.get("throughput"),
            "unit": m.get("throughput_unit") or "",
            "compile_s": m.get("compile_time_s"),
            "compile_beside": compile_beside_share(m),
            "warm_compile_s": m.get("warm_compile_time_s"),
            "stages": {k: bd.get(k) for k in ("dynamo", "aot_autograd")} | {
                "inductor": (bd.get("inductor") or 0) + (bd.get("inductor_codegen") or 0) if bd else None},
            "mem_eager": (r.eager or {}).get("peak_memory_bytes"),
            "mem_compiled": (r.compiled or {}).get("peak_memory_bytes"),
            "compile_rss": m.get("compile_peak_rss_bytes"),
            "compile_device_peak": m.get("compile_device_peak_bytes"),
            "cache": cache_summary(m),
            "warm_layers_hit": warm.get("layers_hit") or [],
            "warm_status": warm.get("status"),
            "trace_href": trace_href(m.get("trace"), base_dir),
            "warm_trace_href": trace_href(m.get("warm_trace"), base_dir),
            "trace_notes": [n for n in ((m.get("trace") or {}).get("notes") or [])] if isinstance(m.get("trace"), dict) else [],
            "outside_graphs_s": m.get("outside_graphs_s_per_call"),
            "graph_breaks": m.get("graph_breaks"),
            "graphs_detail": graphs_detail(m),
            "recompiles": m.get("recompiles"),
            "accuracy": (m.get("accuracy") or {}).get("status") if isinstance(m.get("accuracy"), dict) else None,
        })
    return rows


def grouped_reasons(records: list[Record], attr: str) -> list[dict[str, Any]]:
    """Graph-break or recompile reasons grouped by (reason, location) across cases. Breaks are
    ranked by cost (eager seconds per call, summed over cases; see harness/measure/break_cost.py),
    then by count: a frequent break can be cheap and a single one can dominate."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        for item in getattr(r, attr) or []:
            key = (str(item.get("reason", "")), str(item.get("location", "unknown")))
            g = groups.setdefault(key, {"reason": key[0], "location": key[1], "count": 0, "cases": [],
                                        "function": item.get("function", ""), "user_stack": item.get("user_stack", ""),
                                        "user_location": item.get("user_location", ""), "eager_s_per_call": None,
                                        "runs_per_call": None})
            g["count"] += int(item.get("count", 1) or 1)
            for cost in ("eager_s_per_call", "runs_per_call"):
                if isinstance(item.get(cost), (int, float)):
                    g[cost] = (g[cost] or 0.0) + float(item[cost])
            if r.case_id not in g["cases"]:
                g["cases"].append(r.case_id)
    return sorted(groups.values(), key=lambda g: (-(g["eager_s_per_call"] or 0.0), -g["count"], g["location"]))


# -- comparison with a baseline run ------------------------------------------------------------

# compare.py's metric names -> the report's delta columns (relative changes only; counts go to "why")
DELTA_COLUMNS = {"speedup": "speedup", "latency": "latency_s", "compile_time": "compile_time_s",
                 "peak_memory": "compiled_peak_memory_bytes", "compile_host_memory": "compile_peak_rss_bytes"}
_JUDGED = frozenset(Verdict) - {Verdict.MISSING, Verdict.NEW, Verdict.STILL_FAILING, Verdict.UNCHANGED,
                                  Verdict.NOT_APPLICABLE}


@dataclass
class Delta:
    """One case compared with the baseline, as the report shows it."""

    case_id: str
    verdict: str
    base_speedup: float | None = None
    head_speedup: float | None = None
    base_status: str | None = None
    head_status: str | None = None
    changes: dict[str, float | None] = field(default_factory=dict)  # column -> relative change (head/base - 1)
    reasons: list[str] = field(default_factory=list)


def compare_for_report(base: Run, head: Run) -> tuple[list[Delta], list[str]]:
    """Per-case deltas with harness.analysis.compare's verdicts (statistics on the raw samples plus
    thresholds), worst first, and the comparison's warnings. A report still renders across
    different environments: the mismatch becomes a warning at the top instead of an error."""
    from harness.analysis.compare import compare_runs

    comparison = compare_runs([base], [head], allow_mismatch=True)
    b_map, h_map = base.record_map(), head.record_map()
    deltas = []
    for c in comparison.cases:
        b, h = b_map.get(c.case_id), h_map.get(c.case_id)
        d = Delta(c.case_id, c.verdict, _speedup(b), _speedup(h), c.status_base, c.status_head)
        for m in c.metrics:
            if m.metric in DELTA_COLUMNS:
                d.changes[DELTA_COLUMNS[m.metric]] = m.change
            if m.verdict in _JUDGED:
                d.reasons.append(_reason(m))
        d.reasons += list(c.flags) + ([c.error] if c.error else [])
        deltas.append(d)
    return deltas, list(comparison.warnings)


def _speedup(r: Record | None) -> float | None:
    return (r.metrics or {}).get("speedup") if r is not None else None


def _reason(m: Any) -> str:
    if m.change is None:
        text = f"{m.metric} {m.verdict}"
    elif m.metric in DELTA_COLUMNS:
        text = f"{m.metric} {m.change:+.1%}"
    else:
        text = f"{m.metric} {m.change:+g}"
    if m.p_value is not None:
        text += f" (p={m.p_value:.2g})"
    return text + (f": {m.note}" if m.note else "")


# -- rendering ---------------------------------------------------------------------------------

def report_context(run: Run, baseline: Run | None = None, charts: bool = True,
                   base_dir: Path | None = None) -> dict[str, Any]:
    """Everything the template needs; `charts=False` skips matplotlib (dashboard night pages).
    `base_dir`: the folder the page is written to (trace links are made relative to it)."""
    deltas, compare_warnings = compare_for_report(baseline, run) if baseline is not None else ([], [])
    verdict_counts: dict[str, int] = defaultdict(int)
    for d in deltas:
        verdict_counts[d.verdict] += 1
    status_counts: dict[str, int] = defaultdict(int)
    for r in run.records:
        status_counts[r.status] += 1
    rows = case_rows(run, base_dir)
    return {
        "run": run,
        "synthetic": is_synthetic(run),
        "headline": headline(run, baseline),
        "rows": rows,
        "traced": any(isinstance((r.metrics or {}).get("trace"), dict) for r in run.records),
        "statuses": sorted(status_counts),
        "status_counts": dict(status_counts),
        "compilers": sorted({r.case.compiler for r in run.records}),
        "suites": sorted({row["suite"] for row in rows}),
        "families": sorted({row["family"] for row in rows}),
        "probed": any(row["probe"] is not None for row in rows),
        "probe_flagged": sum(1 for row in rows if row["probe"] is not None and row["probe"].flagged),
        "probe_flag": PROBE_FLAG,
        "case_page": CASE_PAGE,
        "charts": _charts(run) if charts else [],
        "charts_omitted": not charts,
        "graph_breaks": grouped_reasons(run.records, "graph_break_reasons"),
        "recompiles": grouped_reasons(run.records, "recompile_reasons"),
        "failed": sorted((r for r in run.records if r.error),
                         key=lambda r: (_status_rank(r.status), r.case_id)),
        "baseline": baseline,
        "deltas": deltas,
        "verdict_counts": dict(verdict_counts),
        "compare_warnings": compare_warnings,
    }


def _charts(run: Run) -> list:
    from harness.report.charts import report_charts  # matplotlib: only imported when a page has charts

    return report_charts(run.records)


def _status_rank(status: str) -> int:
    return FAILED_STATUSES_ORDER.index(status) if status in FAILED_STATUSES_ORDER else len(FAILED_STATUSES_ORDER)


def is_synthetic(run: Run) -> bool:
    """Generated data (benchmarks, demos) is flagged in the run so every page can say so."""
    return bool(run.environment.get("synthetic")) or "SYNTHETIC" in (run.label or "")


def render_report(run: Run, baseline: Run | None = None, charts: bool = True, links: dict[str, str] | None = None,
                  base_dir: Path | None = None) -> str:
    """The report as one HTML string. `links` adds navigation (e.g. back to the dashboard)."""
    template = template_env().get_template("report.html.j2")
    return template.render(**report_context(run, baseline, charts, base_dir), links=links or {})


def write_report(run: Run, out: str | Path, baseline: Run | None = None) -> Path:
    from harness.model.schema import write_text_atomic

    return write_text_atomic(out, render_report(run, baseline, base_dir=Path(out).resolve().parent))
