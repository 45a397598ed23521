"""Does the warm-up budget move the figures? (issue 25; harness/measure/timing.py warmup_rounds)

Reads run files of the same cases measured with `--warmup-budget 0` (every warm-up round of the
policy) and with a budget (fewer rounds where one round is long), and prints, per case and side:
the processes, the warm-up rounds made, the measure phase's seconds, each variant's median
sample, the speedup with its CI, and the peak memory of both variants; then, for every process
that made all the rounds, each warm-up call against that process's median timed sample, so a
reader sees whether the rounds the budget drops still changed anything (a call that had
settled reads about 1.0x, the samples' own spread around it).

    python benchmarks/warmup_budget.py RUN.json [RUN.json ...]

Run files are grouped by the budget their records' policy holds (`metrics.policy.warmup_budget_s`,
missing in files from before the budget: 0). `compilebench compare A B --all` gives the gate's
verdicts for the same files.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

MiB = 1 << 20


def records(paths: list[str]) -> list[dict[str, Any]]:
    """Every ok compiled record of the files, each with its file's name."""
    out = []
    for path in paths:
        for record in json.loads(Path(path).read_text())["records"]:
            if record.get("status") == "ok" and record.get("compiled") and record.get("eager"):
                out.append({**record, "_file": Path(path).name})
    return out


def budget_of(record: dict[str, Any]) -> float:
    return float((record["metrics"].get("policy") or {}).get("warmup_budget_s", 0.0))


def median(block: dict[str, Any]) -> float:
    return statistics.median(block["samples_s"])


def side_row(case_id: str, budget: float, group: list[dict[str, Any]]) -> str:
    m = [r["metrics"] for r in group]
    rounds = sorted({(x.get("warmup") or {}).get("rounds", x["policy"]["warmup"]) for x in m})
    speedups = " ".join(f"{x['speedup']:.3f}x [{x['speedup_ci_low']:.2f}, {x['speedup_ci_high']:.2f}]" for x in m)
    eager = " ".join(f"{median(r['eager']) * 1e3:.4g}" for r in group)
    compiled = " ".join(f"{median(r['compiled']) * 1e3:.4g}" for r in group)
    peaks = " ".join(f"{r['eager']['peak_memory_bytes'] / MiB:.2f}/{r['compiled']['peak_memory_bytes'] / MiB:.2f}"
                     for r in group)
    measure = " ".join(f"{x['phase_s']['measure']:.1f}" for x in m)
    return (f"| {case_id} | {budget:g} | {len(group)} | {','.join(map(str, rounds))} | {measure} | {eager} | {compiled} "
            f"| {speedups} | {peaks} |")


def settle_rows(group: list[dict[str, Any]]) -> list[str]:
    rows = []
    for r in group:
        calls = (r["metrics"].get("warmup") or {}).get("calls_s") or {}
        for variant in ("eager", "compiled"):
            seconds = calls.get(variant) or []
            if len(seconds) < 3:
                continue
            med = median(r[variant])
            spread = (min(r[variant]["samples_s"]) / med, max(r[variant]["samples_s"]) / med)
            ratios = " ".join(f"{s / med:.3f}" for s in seconds)
            rows.append(f"| {r['case_id']} | {r['_file'][:24]} | {variant} | {ratios} | {spread[0]:.3f}-{spread[1]:.3f} |")
    return rows


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python benchmarks/warmup_budget.py RUN.json [RUN.json ...]", file=sys.stderr)
        return 2
    by_case: dict[str, dict[float, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for record in records(argv):
        by_case[record["case_id"]][budget_of(record)].append(record)
    if not by_case:
        print("warmup_budget.py: no ok compiled records in these files", file=sys.stderr)
        return 1
    print("| case | budget s | processes | warm-up rounds | measure s | eager median ms | compiled median ms "
          "| speedup [CI] | peak MiB eager/compiled |")
    print("|---|--:|--:|--:|--:|--:|--:|---|---|")
    for case_id in sorted(by_case):
        for budget in sorted(by_case[case_id]):
            print(side_row(case_id, budget, by_case[case_id][budget]))
    rows = [row for sides in by_case.values() for group in sides.values() for row in settle_rows(group)]
    if rows:
        print("\nEach warm-up call over its process's median timed sample (the last column: the samples' own "
              "min-max over that median)\n")
        print("| case | run file | variant | warm-up calls / median sample | samples min-max / median |")
        print("|---|---|---|---|---|")
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
