"""Performance of the HTML outputs, on SYNTHETIC data (generated, clearly labelled, not measured).

Targets (issue 7): a 500-case report renders in under 10 s; a dashboard over 365 nights x
100 cases builds in under 60 s with an index page under 3 MB.

    .venv/bin/python benchmarks/report_perf.py [--cases 500] [--nights 365] [--night-cases 100] [--keep DIR]

Prints one line per measurement and a JSON summary (also written to $OUT/report_perf.json
when OUT is set). The generated history carries the SYNTHETIC label in every run and the
dashboard prints a SYNTHETIC DATA banner. Wall times depend on machine load: quote them
with the load average printed alongside.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.dashboard import DashboardOptions, build_dashboard  # noqa: E402
from harness.report import render_report  # noqa: E402
from harness.store import HistoryStore  # noqa: E402
from harness.synthetic_history import Step, SyntheticSpec, synthetic_history, synthetic_run  # noqa: E402

REPORT_TARGET_S, DASHBOARD_TARGET_S, INDEX_TARGET_BYTES = 10.0, 60.0, 3 * 2**20


def bench_report(cases: int, repeats: int) -> dict:
    run = synthetic_run(SyntheticSpec(cases=cases, samples=200, fail_rate=0.03, seed=1), night=0)
    render_report(run)  # warm: imports, template compilation, matplotlib font cache
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        html = render_report(run)
        times.append(time.perf_counter() - start)
    return {"cases": cases, "render_s_median": statistics.median(times), "render_s_all": [round(t, 3) for t in times],
            "html_bytes": len(html.encode()), "target_s": REPORT_TARGET_S,
            "ok": statistics.median(times) < REPORT_TARGET_S}


def bench_dashboard(nights: int, night_cases: int, folder: Path) -> dict:
    db = folder / "history.sqlite"
    spec = SyntheticSpec(cases=night_cases, samples=30, fail_rate=0.005, seed=2, steps=(
        Step("synth-001", nights - 5, "speedup", 0.8), Step("synth-007", nights // 2, "compile_time_s", 1.5),
        Step("synth-011", nights - 3, "status", 0.0)))
    start = time.perf_counter()
    with HistoryStore(db) as store:
        for run in synthetic_history(spec, nights):
            store.ingest(run)
    ingest_s = time.perf_counter() - start
    cold = build_dashboard(db, folder / "site", DashboardOptions())
    warm = build_dashboard(db, folder / "site", DashboardOptions())
    return {"nights": nights, "cases_per_night": night_cases, "ingest_s": round(ingest_s, 2),
            "db_bytes": db.stat().st_size, "build_s": round(cold.seconds, 2), "incremental_build_s": round(warm.seconds, 2),
            "reports_rendered": cold.reports_rendered, "index_bytes": cold.index_bytes, "groups": cold.groups,
            "workloads": cold.workloads, "open_regressions": cold.open_regressions,
            "site_bytes": sum(p.stat().st_size for p in (folder / "site").rglob("*") if p.is_file()),
            "target_s": DASHBOARD_TARGET_S, "index_target_bytes": INDEX_TARGET_BYTES,
            "ok": cold.seconds < DASHBOARD_TARGET_S and cold.index_bytes < INDEX_TARGET_BYTES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--night-cases", type=int, default=100)
    parser.add_argument("--keep", type=Path, help="build the dashboard here and keep it (default: a temp folder)")
    args = parser.parse_args()
    print(f"SYNTHETIC data; load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    report = bench_report(args.cases, args.repeats)
    print(f"report: {report['cases']} cases rendered in {report['render_s_median']:.2f}s median of {args.repeats} "
          f"({report['render_s_all']}), {report['html_bytes'] / 2**20:.2f} MiB; target < {REPORT_TARGET_S:.0f}s: "
          f"{'PASS' if report['ok'] else 'FAIL'}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        dash = bench_dashboard(args.nights, args.night_cases, folder)
    print(f"dashboard: {dash['nights']} nights x {dash['cases_per_night']} cases (ingest {dash['ingest_s']}s, "
          f"db {dash['db_bytes'] / 2**20:.1f} MiB) built in {dash['build_s']}s cold ({dash['reports_rendered']} night "
          f"reports), {dash['incremental_build_s']}s incremental; index.html {dash['index_bytes'] / 2**20:.2f} MiB, "
          f"site {dash['site_bytes'] / 2**20:.1f} MiB, {dash['open_regressions']} open regressions; "
          f"target < {DASHBOARD_TARGET_S:.0f}s and < 3 MiB: {'PASS' if dash['ok'] else 'FAIL'}", flush=True)
    summary = {"synthetic": True, "loadavg_after": round(os.getloadavg()[0], 2), "report": report, "dashboard": dash}
    print(json.dumps(summary, indent=1))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "report_perf.json").write_text(json.dumps(summary, indent=1))
    return 0 if report["ok"] and dash["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
