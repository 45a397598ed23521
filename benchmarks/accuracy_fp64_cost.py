"""What the `dynamo` accuracy rule's float64 reference costs, per case of a run.

For every case judged by the dynamo rule (docs/SUITES.md "Accuracy as HUD judges it"): the
verdict and the test that decided it, whether the float64 reference was used (or why not),
its estimated working set against the free memory, and the reference run's wall time
(`phase_s.fp64_reference`) against the case's whole worker time (the sum of its phases).

    python benchmarks/accuracy_fp64_cost.py RUN.json
    python benchmarks/accuracy_fp64_cost.py RUN.json --markdown   # the table docs/SUITES.md quotes
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.model.schema import Record, load_run  # noqa: E402

GIB = float(1 << 30)


def row(record: Record) -> dict[str, Any] | None:
    acc = record.metrics.get("accuracy") or {}
    if acc.get("rule") != "dynamo":
        return None
    phases = record.metrics.get("phase_s") or {}
    fp64_s = phases.get("fp64_reference")
    total = sum(v for v in phases.values() if isinstance(v, (int, float)))
    free = acc.get("fp64_bytes_free")
    return {
        "case": f"{record.case.workload}/{record.case.scenario}/{record.case.compiler}/{record.case.device}",
        "status": record.status, "accuracy": acc.get("status"), "decided_by": acc.get("decided_by"),
        "tol": acc.get("tol"), "fp64": "used" if acc.get("fp64_used") else f"no: {acc.get('fp64_fallback', '')}",
        "res/ref rmse": (f"{acc['res_rmse']:.3g}/{acc['ref_rmse']:.3g} (x{acc['rmse_multiplier']:g})"
                         if acc.get("res_rmse") is not None else "-"),
        "max_abs_err": acc.get("max_abs_err"),
        "need GiB": acc.get("fp64_bytes_needed", 0) / GIB, "free GiB": None if free is None else free / GIB,
        "fp64 s": fp64_s, "case s": total, "share": (fp64_s / total) if fp64_s and total else None,
    }


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run JSON file")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args(argv)
    run = load_run(args.run)
    rows = [r for r in (row(rec) for rec in run.records) if r is not None]
    if not rows:
        print(f"{args.run}: no case judged by the dynamo rule (hf/timm workloads, a compiled variant)")
        return 1
    keys = list(rows[0])
    if args.markdown:
        print("| " + " | ".join(keys) + " |")
        print("|" + "---|" * len(keys))
        for r in rows:
            print("| " + " | ".join(fmt(r[k]) for k in keys) + " |")
    else:
        for r in rows:
            print("  ".join(f"{k}={fmt(r[k])}" for k in keys))
    shares = [r["share"] for r in rows if r["share"] is not None]
    if shares:
        print(f"\nfloat64 reference: {sum(r['fp64 s'] or 0 for r in rows):.2f} s of "
              f"{sum(r['case s'] for r in rows):.2f} s worker time over {len(rows)} cases "
              f"(per case {min(shares):.1%} to {max(shares):.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
