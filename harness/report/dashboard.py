"""Nightly dashboard: a static site over the history store (no server, no CDN, works from file://).

Layout of the output folder:
  index.html          per device x compiler x suite: geomean speedup (chain-linked over cases
                      passing on both nights of each step, so an unrelated failure cannot move
                      it; the latest step's excluded cases are listed), pass rate, cold compile
                      time and memory compression over the nights, filters, workload list
  regressions.html    open regressions (series whose latest nights keep violating), first bad night
  workloads/<w>.html  drill-down: every metric of every case of one workload over time
  runs/<run>.html     each night's report (the points of every chart link here)

Regression flags (see docs/REPORTS.md): a night violates when it is worse than the median of
the trailing window of accepted nights by more than max(relative tolerance, 3 robust sigmas);
violating nights do not enter the baseline, so a step regression stays flagged until fixed.
A series alerts when at least `consecutive` nights in a row violate; it is *open* when that
streak reaches the latest night. Change points (ruptures binary segmentation, L2 cost, BIC-like
penalty) are marked on series that alert and on every group series.

Charts are drawn in the browser from inline JSON by a small inline script: a matplotlib
figure per series would cost about a second each, and a year of nightly drill-downs has
thousands of series.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import math
import multiprocessing
import os
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.model.errors import UserError
from harness.model.schema import write_text_atomic
from harness.report.report import render_report, template_env
from harness.run.store import HistoryStore


class DashboardError(UserError, ValueError):
    """Bad dashboard input (no database, empty history); the message names the fix."""


@dataclass(frozen=True)
class MetricSpec:
    name: str
    label: str
    higher_is_better: bool
    rel_tol: float  # relative change tolerated before a night counts as a violation
    fmt: str  # x | s | bytes | pct | int | num
    alerts: bool = True


GROUP_METRICS = (
    MetricSpec("geomean_speedup", "geomean speedup", True, 0.05, "x"),
    MetricSpec("pass_rate", "pass rate", True, 0.01, "pct"),
    MetricSpec("mean_compile_s", "mean cold compile time", False, 0.15, "s"),
    MetricSpec("compression", "memory compression (eager/compiled peak)", True, 0.10, "x"),
)
CASE_METRICS = (
    MetricSpec("ok", "passing (1) or failing (0)", True, 0.5, "int"),
    MetricSpec("speedup", "speedup", True, 0.05, "x"),
    MetricSpec("latency_s", "compiled latency", False, 0.05, "s", alerts=False),
    MetricSpec("throughput", "compiled throughput", True, 0.05, "num", alerts=False),
    MetricSpec("compile_time_s", "cold compile time", False, 0.15, "s"),
    MetricSpec("compiled_peak_memory_bytes", "compiled peak memory", False, 0.10, "bytes"),
    MetricSpec("eager_peak_memory_bytes", "eager peak memory", False, 0.10, "bytes", alerts=False),
    MetricSpec("compression_ratio", "memory compression", True, 0.10, "x", alerts=False),
    MetricSpec("graph_breaks", "graph breaks", False, 0.0, "int"),
    MetricSpec("recompiles", "recompiles", False, 0.0, "int"),
)


@dataclass
class DashboardOptions:
    window: int = 14  # nights in the trailing baseline
    min_history: int = 5  # accepted nights needed before judging
    consecutive: int = 2  # violations in a row before alerting
    noise_sigmas: float = 3.0
    chart_reports: int = 1  # latest nights whose reports get matplotlib charts (older: tables only)
    rebuild: bool = False  # re-render every night's report even when unchanged


@dataclass
class Flags:
    """What regression detection found on one series (indices into the series' nights)."""

    baseline: list[float | None]
    violations: list[bool]
    alerts: list[bool]
    open: bool = False
    first_bad: int | None = None
    change_points: list[int] = field(default_factory=list)


def detect(values: Sequence[float | None], higher_is_better: bool, rel_tol: float,
           opts: DashboardOptions | None = None) -> Flags:
    """Trailing-median baseline with a noise-aware tolerance; alert on `consecutive` violations."""
    opts = opts or DashboardOptions()
    n = len(values)
    baseline: list[float | None] = [None] * n
    violations = [False] * n
    accepted: list[float] = []
    for i, v in enumerate(values):
        if v is None or not math.isfinite(v):
            continue
        if len(accepted) >= opts.min_history:
            # stdlib median: on a 14-value window it is ~50x faster than np.median's overhead,
            # and a year of nightly history runs this loop hundreds of thousands of times
            hist = accepted[-opts.window:]
            med = statistics.median(hist)
            mad = statistics.median([abs(h - med) for h in hist]) * 1.4826
            tol = max(rel_tol * abs(med), opts.noise_sigmas * mad)
            worse = (med - v) if higher_is_better else (v - med)
            baseline[i] = med
            if worse > tol:
                violations[i] = True
                continue  # a violating night never becomes part of the baseline
        accepted.append(v)
    flags = Flags(baseline, violations, [False] * n)
    _mark_alerts(values, flags, opts.consecutive)
    return flags


def _mark_alerts(values: Sequence[float | None], flags: Flags, consecutive: int) -> None:
    observed = [i for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    streak: list[int] = []
    for i in observed + [None]:  # type: ignore[list-item]
        if i is not None and flags.violations[i]:
            streak.append(i)
            continue
        if len(streak) >= consecutive:
            for j in streak:
                flags.alerts[j] = True
            if i is None:  # the streak runs to the latest observed night
                flags.open, flags.first_bad = True, streak[0]
        streak = []


def change_points(values: Sequence[float | None], rel_tol: float) -> list[int]:
    """Indices where the level changes (ruptures Binseg, L2), ignoring shifts smaller than half the tolerance."""
    import ruptures

    idx = [i for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    if len(idx) < 8:
        return []
    y = np.asarray([values[i] for i in idx], dtype=float)
    scale = float(np.median(np.abs(y))) or 1.0
    y = y / scale
    sigma = float(np.median(np.abs(np.diff(y) - np.median(np.diff(y))))) * 1.4826 / math.sqrt(2)
    sigma = max(sigma, 1e-3)
    bkps = ruptures.Binseg(model="l2", min_size=3, jump=1).fit(y.reshape(-1, 1)).predict(pen=3 * sigma**2 * math.log(len(y)))
    out, start = [], 0
    bounds = [b for b in bkps if b < len(y)]
    for k, b in enumerate(bounds):
        end = bounds[k + 1] if k + 1 < len(bounds) else len(y)
        before, after = np.median(y[start:b]), np.median(y[b:end])
        if abs(after - before) > max(rel_tol / 2, 1e-9) * max(abs(before), 1e-9):
            out.append(idx[b])
        start = b
    return out


# -- data ---------------------------------------------------------------------------------------

def _slug(text: str) -> str:
    """A safe, unique file name for any workload or run id (names come from user files)."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60].strip("._") or "x"
    return f"{clean}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def run_page(run_id: str) -> str:
    return f"runs/{_slug(run_id)}.html"


def _clean(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def load_frames(db: str | Path):
    """(records DataFrame, runs DataFrame) from the history store; clear errors for bad input."""
    import pandas as pd

    db = Path(db)
    if not db.is_file():
        raise DashboardError(f"{db}: no history database; `compilebench run` creates results/history.sqlite, "
                             "or pass --db PATH")
    with HistoryStore(db) as store:
        df = store.dataframe()
        runs = pd.read_sql_query(
            "SELECT run_id, created_at, label, suite, host, git_commit, "
            "(label LIKE '%SYNTHETIC%' OR json_extract(environment_json, '$.synthetic') = 1) AS synthetic "
            "FROM runs ORDER BY created_at, run_id", store.conn)
    if runs.empty:
        raise DashboardError(f"{db}: the history holds no runs; ingest one with `compilebench run` first")
    return df, runs


def _group_series(df, run_index: dict[str, int]) -> list[dict[str, Any]]:
    """One series per device x compiler x suite, one point per run that has cases in the group."""
    df = df.assign(suite=df["suite"].fillna("").replace("", "adhoc"))
    for column in ("speedup", "compression_ratio", "compile_time_s"):
        # a column no record filled comes back from SQLite as object dtype (all None): np.log refuses it
        df[column] = df[column].astype(float)
    ok = df["status"] == "ok"
    df = df.assign(
        log_speedup=np.log(df["speedup"].where(ok & (df["speedup"] > 0))),
        log_compression=np.log(df["compression_ratio"].where(ok & (df["compression_ratio"] > 0))),
        ok_compile=df["compile_time_s"].where(ok),
        is_ok=ok.astype(float),
    )
    agg = df.groupby(["device", "compiler", "suite", "run_id"], sort=True).agg(
        log_speedup=("log_speedup", "mean"), pass_rate=("is_ok", "mean"), mean_compile_s=("ok_compile", "mean"),
        log_compression=("log_compression", "mean"), cases=("case_id", "count"))
    agg["compression"] = np.exp(agg["log_compression"])
    cases = df[["device", "compiler", "suite", "run_id", "case_id", "log_speedup"]]
    case_groups = dict(iter(cases.groupby(["device", "compiler", "suite"], sort=True)))
    out = []
    for (device, compiler, suite), g in agg.groupby(level=[0, 1, 2], sort=True):
        g = g.reset_index().assign(ix=lambda x: x["run_id"].map(run_index)).sort_values("ix")
        chained, excluded = chain_linked_geomean(case_groups[(device, compiler, suite)], g["run_id"].tolist())
        g["geomean_speedup"] = chained
        series = {"device": device, "compiler": compiler, "suite": suite, "x": g["ix"].tolist(),
                  "cases": int(g["cases"].iloc[-1]), "metrics": {}, "geomean_excluded": excluded}
        for spec in GROUP_METRICS:
            series["metrics"][spec.name] = [_clean(v) for v in g[spec.name]]
        out.append(series)
    return out


def chain_linked_geomean(cases, run_ids: list[str]) -> tuple[list[float | None], list[dict[str, str]]]:
    """Geomean speedup per night that a failing or missing case cannot move: the first
    night's geomean over its passing cases, then each night the previous value times the
    geomean of speedup_night / speedup_previous over the cases passing on BOTH nights. A
    plain per-night geomean jumps when an unrelated model fails (its speedup leaves the
    mean); this one moves only when cases that ran on both nights got faster or slower.
    Also returns the latest step's excluded cases, with why (`cases`: case_id, run_id,
    log_speedup; NaN where the case did not pass)."""
    by_run = {rid: g.dropna(subset=["log_speedup"]).set_index("case_id")["log_speedup"]
              for rid, g in cases.groupby("run_id")}
    present = {rid: set(g["case_id"]) for rid, g in cases.groupby("run_id")}
    values: list[float | None] = []
    excluded: list[dict[str, str]] = []
    for i, rid in enumerate(run_ids):
        now = by_run.get(rid, cases.iloc[:0].set_index("case_id")["log_speedup"])
        prev_value = values[-1] if values else None
        if i == 0 or prev_value is None:
            values.append(float(np.exp(now.mean())) if len(now) else None)
            continue
        before = by_run.get(run_ids[i - 1], now.iloc[:0])
        common = now.index.intersection(before.index)
        values.append(float(prev_value * np.exp((now[common] - before[common]).mean())) if len(common) else
                      (float(np.exp(now.mean())) if len(now) else None))
        if i == len(run_ids) - 1:
            seen = present.get(rid, set()) | present.get(run_ids[i - 1], set())
            excluded = [{"case_id": c, "reason": _why_excluded(c, now, before, present.get(rid, set()),
                                                               present.get(run_ids[i - 1], set()))}
                        for c in sorted(seen - set(common))]
    return values, excluded


def _why_excluded(case_id: str, now, before, in_now: set[str], in_before: set[str]) -> str:
    if case_id not in in_before:
        return "new this night"
    if case_id not in in_now:
        return "not run this night"
    return "failing this night" if case_id not in now.index else "failing the night before"


def _case_series(df, run_index: dict[str, int]) -> dict[str, list[dict[str, Any]]]:
    """workload -> one series per (case, suite) with every CASE_METRICS column."""
    df = df.assign(suite=df["suite"].fillna("").replace("", "adhoc"), ok=(df["status"] == "ok").astype(float),
                   ix=df["run_id"].map(run_index))
    not_ok = df["status"] != "ok"
    measured = [s.name for s in CASE_METRICS if s.name != "ok"]
    df.loc[not_ok, measured] = np.nan  # a failed night has no measurement, only its status
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for (workload, case_id, suite), g in df.sort_values("ix").groupby(["workload", "case_id", "suite"], sort=True):
        series = {"case_id": case_id, "suite": suite, "device": g["device"].iloc[-1], "compiler": g["compiler"].iloc[-1],
                  "x": g["ix"].tolist(), "status": g["status"].tolist(),
                  "metrics": {s.name: [_clean(v) for v in g[s.name]] for s in CASE_METRICS}}
        by_workload.setdefault(workload, []).append(series)
    return by_workload


def _flag_series(series: dict[str, Any], specs: Sequence[MetricSpec], opts: DashboardOptions,
                 always_change_points: bool) -> list[dict[str, Any]]:
    """Attach flags per metric (JSON-ready) and return the open regressions found."""
    found = []
    series["flags"] = {}
    for spec in specs:
        values = series["metrics"][spec.name]
        flags = detect(values, spec.higher_is_better, spec.rel_tol, opts) if spec.alerts else None
        cps = change_points(values, spec.rel_tol) if (always_change_points or (flags and any(flags.alerts))) else []
        if flags is None:
            series["flags"][spec.name] = {"cp": cps}
            continue
        series["flags"][spec.name] = {
            "base": [None if b is None else round(b, 6) for b in flags.baseline],
            "viol": [i for i, v in enumerate(flags.violations) if v],
            "alert": [i for i, a in enumerate(flags.alerts) if a],
            "cp": cps,
        }
        if flags.open and flags.first_bad is not None:
            last = max(i for i, v in enumerate(values) if v is not None)
            cp_before = [c for c in cps if c <= flags.first_bad + 1]
            found.append({"metric": spec, "first_bad": series["x"][flags.first_bad], "latest": values[last],
                          "baseline": flags.baseline[flags.first_bad], "nights": sum(flags.violations[flags.first_bad:]),
                          "change_point": series["x"][cp_before[-1]] if cp_before else None})
    return found


@dataclass(frozen=True)
class StartedFailing:
    """A case ok on its group's previous night that fails on the group's latest night."""

    case_id: str
    workload: str
    suite: str
    device: str
    compiler: str
    status: str
    night: int  # index into the nights
    previous_night: int
    reason: str = ""
    href: str = ""


def started_failing(by_workload: dict[str, list[dict[str, Any]]], latest: dict[tuple[str, str, str], int]) -> list[StartedFailing]:
    """Cases whose series ends on their group's latest night with a failure right after an ok
    night: what broke tonight, before two bad nights make it an open regression."""
    out = []
    for workload, series_list in by_workload.items():
        for s in series_list:
            x, status = s["x"], s["status"]
            group_latest = latest.get((s["device"], s["compiler"], s["suite"]))
            if len(x) >= 2 and x[-1] == group_latest and status[-1] != "ok" and status[-2] == "ok":
                out.append(StartedFailing(s["case_id"], workload, s["suite"], s["device"], s["compiler"], status[-1],
                                          x[-1], x[-2], href=f"workloads/{_slug(workload)}.html"))
    return sorted(out, key=lambda f: (f.suite, f.device, f.compiler, f.case_id))


def _with_reasons(db: str | Path, found: list[StartedFailing], run_ids: list[str]) -> list[StartedFailing]:
    """The exception type and first message line of each failure, from the stored record."""
    if not found:
        return found
    out = []
    with HistoryStore(db) as store:
        for f in found:
            row = store.conn.execute(
                "SELECT json_extract(record_json, '$.error.type'), json_extract(record_json, '$.error.message') "
                "FROM records WHERE run_id = ? AND case_id = ?", (run_ids[f.night], f.case_id)).fetchone()
            kind, message = (row or (None, None))
            first = (message or "").strip().splitlines()[0][:160] if (message or "").strip() else ""
            out.append(replace(f, reason=": ".join(p for p in (kind, first) if p)))
    return out


@dataclass(frozen=True)
class SuiteNight:
    """One suite x device x compiler on its latest night, beside the night before."""

    suite: str
    device: str
    compiler: str
    anchor: str
    cases: int
    pass_rate: float | None
    pass_rate_prev: float | None
    geomean: float | None
    geomean_prev: float | None
    started_failing: int
    night: int

    @property
    def ok(self) -> int:
        return round((self.pass_rate or 0.0) * self.cases)


def _previous(values: list[float | None]) -> float | None:
    return values[-2] if len(values) >= 2 else None


def suite_summary(groups: list[dict[str, Any]], failing: list[StartedFailing]) -> list[SuiteNight]:
    """Per suite x device x compiler: the latest night's pass rate and geomean speedup beside
    the previous night's, and how many cases started failing tonight (the index's top table)."""
    count: dict[tuple[str, str, str], int] = {}
    for f in failing:
        count[(f.suite, f.device, f.compiler)] = count.get((f.suite, f.device, f.compiler), 0) + 1
    rows = [SuiteNight(g["suite"], g["device"], g["compiler"], _group_anchor(g), g["cases"],
                       g["metrics"]["pass_rate"][-1], _previous(g["metrics"]["pass_rate"]),
                       g["metrics"]["geomean_speedup"][-1], _previous(g["metrics"]["geomean_speedup"]),
                       count.get((g["suite"], g["device"], g["compiler"]), 0), g["x"][-1]) for g in groups]
    return sorted(rows, key=lambda r: (r.suite, r.device, r.compiler))


# -- build ---------------------------------------------------------------------------------------

@dataclass
class DashboardResult:
    out: Path
    nights: int
    groups: int
    workloads: int
    open_regressions: int
    reports_rendered: int
    seconds: float
    index_bytes: int


def build_dashboard(db: str | Path, out: str | Path, opts: DashboardOptions | None = None) -> DashboardResult:
    """Write the whole static site under `out` and say what it holds."""
    start = time.perf_counter()
    opts = opts or DashboardOptions()
    out = Path(out)
    df, runs = load_frames(db)
    run_index = {rid: i for i, rid in enumerate(runs["run_id"])}
    nights = [{"id": r.run_id, "t": str(r.created_at)[:16].replace("T", " "), "href": run_page(r.run_id),
               "label": r.label or "", "commit": r.git_commit or ""} for r in runs.itertuples()]
    synthetic = bool(runs["synthetic"].fillna(0).astype(bool).any())

    groups = _group_series(df, run_index)
    regressions: list[dict[str, Any]] = []
    for g in groups:
        for reg in _flag_series(g, GROUP_METRICS, opts, always_change_points=True):
            regressions.append({**reg, "scope": "group", "name": f"{g['device']} / {g['compiler']} / {g['suite']}",
                                "href": "index.html#" + _group_anchor(g), "device": g["device"],
                                "compiler": g["compiler"], "suite": g["suite"]})
    by_workload = _case_series(df, run_index)
    failing_now = _with_reasons(db, started_failing(by_workload, {(g["device"], g["compiler"], g["suite"]): g["x"][-1]
                                                                  for g in groups}), list(runs["run_id"]))
    workload_rows = []
    for workload, series_list in sorted(by_workload.items()):
        page = f"workloads/{_slug(workload)}.html"
        open_here = 0
        for s in series_list:
            for reg in _flag_series(s, CASE_METRICS, opts, always_change_points=False):
                open_here += 1
                regressions.append({**reg, "scope": "case", "name": s["case_id"], "href": page, "device": s["device"],
                                    "compiler": s["compiler"], "suite": s["suite"]})
        workload_rows.append(_workload_row(workload, page, series_list, open_here, len(nights) - 1))
    regressions.sort(key=lambda r: (r["first_bad"], r["name"]))
    for r in regressions:
        r["first_bad_night"] = nights[r["first_bad"]]
        r["change_point_night"] = nights[r["change_point"]] if r["change_point"] is not None else None

    env = template_env()
    common = {"nights": nights, "synthetic": synthetic, "regressions": regressions, "generated": time.strftime("%Y-%m-%d %H:%M")}
    index_html = env.get_template("dashboard_index.html.j2").render(
        **common, groups=groups, workloads=workload_rows, group_metrics=GROUP_METRICS, anchor=_group_anchor,
        started_failing=failing_now, suites=suite_summary(groups, failing_now),
        data={"nights": nights, "groups": groups, "metrics": [_spec_json(s) for s in GROUP_METRICS], "root": ""})
    write_text_atomic(out / "index.html", index_html)
    write_text_atomic(out / "regressions.html", env.get_template("dashboard_regressions.html.j2").render(**common))
    for row in workload_rows:
        _write_workload_page(env, out / row["href"], row["workload"], by_workload[row["workload"]], common)
    rendered = _write_night_reports(db, out, runs, opts)
    return DashboardResult(out, len(nights), len(groups), len(by_workload), len(regressions), rendered,
                           time.perf_counter() - start, len(index_html.encode()))


def _group_anchor(g: dict[str, Any]) -> str:
    return "g-" + _slug(f"{g['device']}|{g['compiler']}|{g['suite']}")


def _spec_json(s: MetricSpec) -> dict[str, Any]:
    return {"name": s.name, "label": s.label, "higher": s.higher_is_better, "fmt": s.fmt, "tol": s.rel_tol}


def _workload_row(workload: str, page: str, series_list: list[dict[str, Any]], open_here: int,
                  latest_night: int) -> dict[str, Any]:
    """The index's row for a workload. Its geomean speedup is over the cases measured and ok
    in the latest night only: a case missing tonight must not count with an old value, and a
    case failing tonight is listed as excluded, not silently dropped."""
    speedups, excluded = [], []
    for s in series_list:
        value = s["metrics"]["speedup"][-1]
        if s["x"][-1] != latest_night:
            excluded.append({"case_id": s["case_id"], "reason": "not in the latest night"})
        elif s["status"][-1] != "ok":
            excluded.append({"case_id": s["case_id"], "reason": f"status {s['status'][-1]}"})
        elif value is None or value <= 0:
            excluded.append({"case_id": s["case_id"], "reason": "no speedup (eager-only or unmeasured)"})
        else:
            speedups.append(value)
    return {"workload": workload, "href": page, "cases": len(series_list), "open": open_here,
            "devices": sorted({s["device"] for s in series_list}), "compilers": sorted({s["compiler"] for s in series_list}),
            "suites": sorted({s["suite"] for s in series_list}),
            "latest_speedup": float(np.exp(np.mean(np.log(speedups)))) if speedups else None,
            "latest_speedup_cases": len(speedups), "latest_speedup_excluded": excluded,
            "failing": sum(1 for s in series_list if s["x"][-1] == latest_night and s["status"][-1] != "ok")}


def _write_workload_page(env, path: Path, workload: str, series_list: list[dict[str, Any]],
                         common: dict[str, Any]) -> None:
    nights = common["nights"]
    used = sorted({i for s in series_list for i in s["x"]})
    html = env.get_template("dashboard_workload.html.j2").render(
        **common, workload=workload, series=series_list, metrics=CASE_METRICS,
        data={"nights": {i: nights[i] for i in used}, "series": series_list,
              "metrics": [_spec_json(s) for s in CASE_METRICS], "root": "../"})
    write_text_atomic(path, html)


def _write_night_reports(db: str | Path, out: Path, runs, opts: DashboardOptions) -> int:
    """Each night's report under runs/; unchanged nights are skipped (fingerprint of the stored rows)."""
    stamp_path = out / "runs" / ".fingerprints.json"
    stamps: dict[str, str] = {}
    if stamp_path.is_file() and not opts.rebuild:
        try:
            stamps = json.loads(stamp_path.read_text())
        except (OSError, ValueError):
            stamps = {}
    ids = list(runs["run_id"])
    charted = set(ids[-opts.chart_reports:]) if opts.chart_reports > 0 else set()
    with HistoryStore(db) as store:
        prints = dict(store.conn.execute(
            "SELECT run_id, count(*) || ':' || sum(length(record_json)) FROM records GROUP BY run_id").fetchall())
    todo: list[tuple[str, bool]] = []
    for rid in ids:
        fingerprint, old = prints.get(rid, "0:0"), stamps.get(rid, "")
        # a report keeps its charts once it has them; only changed rows or missing charts re-render
        if (out / run_page(rid)).is_file() and old.startswith(fingerprint + ":") and (
                old.endswith(":charts") or rid not in charted):
            continue
        todo.append((rid, rid in charted))
        stamps[rid] = f"{fingerprint}:{'charts' if rid in charted else 'tables'}"
    _render_nights(str(db), str(out), todo)
    write_text_atomic(stamp_path, json.dumps(stamps))
    return len(todo)


PARALLEL_MIN_REPORTS = 24  # below this, starting worker processes costs more than it saves


def _render_nights(db: str, out: str, todo: list[tuple[str, bool]]) -> None:
    """Render night reports, over a process pool when there are many (a first build of a
    year of history); each worker opens its own read-only view of the store."""
    workers = min(os.cpu_count() or 1, 8, max(1, len(todo) // 12))
    if len(todo) < PARALLEL_MIN_REPORTS or workers < 2:
        _render_chunk(db, out, todo)
        return
    chunks = [todo[i::workers] for i in range(workers)]
    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding SQLite handles
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        for future in [pool.submit(_render_chunk, db, out, chunk) for chunk in chunks]:
            future.result()  # re-raise a worker's error here


def _render_chunk(db: str, out: str, todo: list[tuple[str, bool]]) -> int:
    links = {"dashboard": "../index.html", "open regressions": "../regressions.html"}
    with HistoryStore(db) as store:
        for rid, charts in todo:
            html = render_report(store.load_run(rid), charts=charts, links=links)
            write_text_atomic(Path(out) / run_page(rid), html)
    return len(todo)
