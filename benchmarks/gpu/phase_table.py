"""Where a run's time goes: per phase summed over its cases, plus per-case wall (issue 25, item 1).

  python3 benchmarks/gpu/phase_table.py RUN.json [RUN2.json ...]   # several: shards of one suite

Phases come from each record's `metrics.phase_s` (the worker's own clock): setup (imports
and resolution: worker setup), isa_probe, build, eager_first_call, compile, accuracy, measure,
memory (the memory pass), break_cost, done; quiet (--compile-overlap: waiting until no other
worker builds, compiles or measures) and, before the first phase, "waiting to start" (the
same lock, while another worker measured). "outside any phase" is a case's wall
(`worker.wall_s`: the runner's spawn-or-fork to reap) minus its phases: interpreter start,
imports before the first phase, record write, exit. "runner, between cases" is the run's
wall (`config.wall_s`) minus the cases' walls: planning, journal, preloading servers
(`config.worker_start.servers[].import_s` is shown apart), the warm-compile worker and
tlparse. A derived case (its eager figures from a compiled twin's process, wall 0) is counted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PHASES = ("setup", "isa_probe", "build", "eager_first_call", "compile", "accuracy", "quiet", "measure", "memory",
          "break_cost", "done")
LABELS = {"setup": "worker setup (imports, resolve)", "isa_probe": "CPU ISA probe", "build": "model build",
          "eager_first_call": "eager first call", "compile": "compile (first compiled call)", "accuracy": "accuracy",
          "quiet": "waiting to measure alone",
          "measure": "measure (warm-up + timed rounds)", "memory": "memory pass", "break_cost": "graph-break cost pass",
          "done": "finish (derived metrics)"}


def phase_totals(runs: list[dict[str, Any]]) -> tuple[dict[str, float], list[dict[str, Any]], float, float]:
    """(seconds per phase incl. 'outside any phase', per-case rows, sum of case walls, sum of run walls)."""
    totals = {p: 0.0 for p in PHASES}
    totals["outside any phase"] = 0.0
    rows = []
    case_wall = run_wall = 0.0
    for run in runs:
        run_wall += float(run.get("config", {}).get("wall_s") or 0.0)
        for rec in run["records"]:
            phases = (rec.get("metrics") or {}).get("phase_s") or {}
            wall = float((rec.get("worker") or {}).get("wall_s") or 0.0)
            for name, seconds in phases.items():
                totals[name] = totals.get(name, 0.0) + float(seconds)
            # --compile-overlap: a worker that started while another measured waited before its first phase
            times = (rec.get("worker") or {}).get("quiet") or {}
            start_wait = (max(float(times["shared_at"]) - float(times["shared_asked"]), 0.0)
                          if "shared_at" in times and "shared_asked" in times and wall else 0.0)
            totals["waiting to start"] = totals.get("waiting to start", 0.0) + start_wait
            outside = max(wall - sum(float(v) for v in phases.values()) - start_wait, 0.0)
            totals["outside any phase"] += outside
            case_wall += wall
            rows.append({"case_id": rec["case_id"], "status": rec["status"], "wall_s": wall, "outside_s": outside,
                         "start": (rec.get("worker") or {}).get("start", "spawn"),
                         **{p: float(phases.get(p, 0.0)) for p in PHASES}})
    return totals, rows, case_wall, run_wall


def preload_seconds(runs: list[dict[str, Any]]) -> float:
    servers = [s for run in runs for s in ((run.get("config") or {}).get("worker_start") or {}).get("servers") or []]
    return sum(float(s.get("import_s") or 0.0) for s in servers)


def print_tables(runs: list[dict[str, Any]]) -> None:
    totals, rows, case_wall, run_wall = phase_totals(runs)
    n = len(rows)
    print(f"{n} case(s) from {len(runs)} run file(s); run wall {run_wall:.1f} s, sum of case walls {case_wall:.1f} s")
    print(f"{'where':<36} {'seconds':>9} {'share':>7}")
    for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        if seconds:
            print(f"{LABELS.get(name, name):<36} {seconds:9.1f} {seconds / max(run_wall, case_wall, 1e-9):7.1%}")
    between = run_wall - case_wall
    if between >= 0:
        print(f"{'runner, between cases':<36} {between:9.1f} {between / max(run_wall, 1e-9):7.1%}")
    else:  # --compile-overlap: workers ran side by side, so their walls add up to more than the run's
        print(f"{'cases side by side (walls overlap)':<36} {-between:9.1f}   (--compile-overlap "
              f"{max(int((r.get('config') or {}).get('compile_overlap') or 1) for r in runs)})")
    prestart = [(run.get("config") or {}).get("worker_start", {}).get("prestart") or {} for run in runs]
    together = sum(float(p.get("wall_s") or 0.0) for p in prestart)
    if together:  # the GPU servers started together before the first case (runner.prestart_servers)
        servers = sum(int(p.get("servers") or 0) for p in prestart)
        print(f"{'  of which: servers started together':<36} {together:9.1f}   "
              f"({servers} server(s), {preload_seconds(runs):.1f} s of imports in all)")
    elif preload_seconds(runs):
        print(f"{'  of which: server preload (imports)':<36} {preload_seconds(runs):9.1f}")
    print()
    cols = ("setup", "build", "eager_first_call", "compile", "measure", "memory")
    print(f"{'case':<64} {'status':<13} {'start':<9} {'wall':>7} " + " ".join(f"{c[:8]:>8}" for c in cols)
          + f" {'outside':>8}")
    for r in rows:
        print(f"{r['case_id'][:64]:<64} {r['status']:<13} {r['start']:<9} {r['wall_s']:7.1f} "
              + " ".join(f"{r[c]:8.1f}" for c in cols) + f" {r['outside_s']:8.1f}")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    print_tables([json.loads(Path(p).read_text()) for p in argv])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
