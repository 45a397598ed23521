"""What `--trace` costs: the wall time of a case with and without it, on this machine.

    .venv/bin/python benchmarks/trace_overhead.py [--pairs 3] [-w mlp-deep] [--scenario forward] [--json OUT]

Each pair runs the same case twice through the real runner path (`run_worker`: a fresh
worker process, cold Inductor cache), once plain and once with `--trace` (TORCH_TRACE in the
worker's environment, then the log capped and rendered by tlparse when it is installed), in
ABBA order so drift on a shared machine lands on both arms. The wall time of a case is what
the runner waits for: the worker process plus the trace's post-processing. Reported: each
arm's median, the overhead of the medians, the median of the per-pair ratios, and the
structured-logging overhead torch itself attributes to the trace (inside compile time).
Goal (issue 16): at most 15%. Exit 1 when the median overhead is above --limit.
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.run.runner import RunOptions, default_cache_root, make_spec, plan_cases, run_worker  # noqa: E402
from harness.run.traces import tlparse_executable, trace_settings  # noqa: E402

# the smoke suite's policy: a real case, not a stopwatch around compile alone
POLICY = {"min_time_s": 0.3, "min_samples": 10, "max_samples": 2000, "warmup": 3, "max_time_s": 10.0}


def one_case(opts: RunOptions, traced: bool, out: Path, tag: str) -> dict[str, Any]:
    (case,), _ = plan_cases(opts)
    isa = default_cache_root() / "isa-probe"
    isa.mkdir(parents=True, exist_ok=True)
    trace = trace_settings(out, f"overhead-{tag}") if traced else None
    started = time.perf_counter()
    record = run_worker(case, make_spec(case, opts, POLICY, str(isa)), 900.0, trace=trace)
    wall = time.perf_counter() - started
    m = record.metrics
    return {"traced": traced, "status": record.status, "wall_s": wall, "worker_wall_s": record.worker.get("wall_s"),
            "compile_time_s": m.get("compile_time_s"), "logging_overhead_s": m.get("structured_logging_overhead_s"),
            "trace_bytes": (m.get("trace") or {}).get("bytes"), "trace_html": bool((m.get("trace") or {}).get("html"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("-w", "--workload", default="mlp-deep")
    ap.add_argument("--scenario", default="forward")
    ap.add_argument("--compiler", default="inductor")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--limit", type=float, default=0.15, help="allowed overhead (fraction), default 0.15")
    ap.add_argument("--json", help="write every measurement here")
    args = ap.parse_args(argv)
    opts = RunOptions(workloads=[args.workload], scenarios=[args.scenario], compilers=[args.compiler],
                      devices=[args.device], sizes=["tiny"], ingest=False)
    print(f"case {args.workload}/{args.scenario}/{args.compiler}/{args.device} tiny, {args.pairs} ABBA pairs, "
          f"tlparse {'installed' if tlparse_executable() else 'NOT installed'}, load {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs", flush=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cb-trace-overhead-") as tmp:
        for i in range(args.pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            pair = {traced: one_case(opts, traced, Path(tmp), f"{i}") for traced in order}
            for traced in order:
                r = pair[traced]
                rows.append({**r, "pair": i})
                print(f"pair {i} {'trace' if traced else 'plain'}: {r['status']} wall {r['wall_s']:.2f}s "
                      f"(compile {r['compile_time_s'] or 0:.2f}s, logging {r['logging_overhead_s'] or 0:.3f}s, "
                      f"trace {(r['trace_bytes'] or 0) / 1e6:.2f} MB{', html' if r['trace_html'] else ''})", flush=True)
    plain = [r["wall_s"] for r in rows if not r["traced"]]
    traced = [r["wall_s"] for r in rows if r["traced"]]
    ratios = [t["wall_s"] / p["wall_s"] for t in rows if t["traced"] for p in rows
              if not p["traced"] and p["pair"] == t["pair"]]
    overhead = statistics.median(traced) / statistics.median(plain) - 1
    logging = statistics.median([r["logging_overhead_s"] or 0.0 for r in rows if r["traced"]])
    print(f"median wall: plain {statistics.median(plain):.2f}s, trace {statistics.median(traced):.2f}s -> "
          f"overhead {overhead:+.1%} (median per-pair ratio {statistics.median(ratios) - 1:+.1%}); torch's "
          f"structured-logging time inside compile {logging:.3f}s; limit {args.limit:.0%}: "
          f"{'PASS' if overhead <= args.limit else 'FAIL'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "overhead": overhead, "limit": args.limit}, indent=1))
    return 0 if overhead <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
