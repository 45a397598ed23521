"""Cold-start table for one workload (default: the tiny deep MLP on CPU), each row a fresh
process: JIT cold, JIT warm, Mega-Cache, aot_compile load, AOTInductor load.

Target (issue 5): loading an AOT artifact in a fresh process reaches its first correct
result at least 3x faster than a cold JIT compile. Exit 1 when no AOT path meets it or a
row failed.

    python benchmarks/coldstart.py [--workload mlp-deep] [--device cpu] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402

from harness.experiments.lifecycle import ROWS, ColdStartOptions, coldstart, coldstart_table, speedup_vs_cold  # noqa: E402
from harness.model.schema import write_json_atomic  # noqa: E402

TARGET = 3.0
AOT_ROWS = ("aot_compile", "aot_compile_warm", "aoti")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="mlp-deep")
    p.add_argument("--workload-file", action="append", default=[])
    p.add_argument("--size", default="tiny")
    p.add_argument("--batch-size", type=int)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--steady-calls", type=int, default=30)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per process (build or row)")
    p.add_argument("--json", help="write the full result here")
    args = p.parse_args(argv)
    console = Console(width=220)
    result = coldstart(ColdStartOptions(workload=args.workload, size=args.size, batch_size=args.batch_size,
                                        device=args.device, dtype=args.dtype, rows=args.rows.split(","),
                                        workload_files=args.workload_file, steady_calls=args.steady_calls,
                                        timeout_s=args.timeout),
                       progress=lambda r: console.print(f"  {r['row']} ({r.get('kind', '')}): {r.get('status')} "
                                                        f"{r.get('error', '')[:300]}", highlight=False))
    console.print(coldstart_table(result))
    skipped = [r for r in result["rows"] + result["builds"] if r.get("status") == "skipped"]
    failed = [r for r in result["rows"] + result["builds"] if r.get("status") not in ("ok", "skipped")]
    for r in skipped:
        console.print(f"SKIPPED {r['row']} ({r.get('kind', '')}): {r.get('error', '')[:400]}")
    for r in failed:
        console.print(f"{r.get('status', '').upper()} {r['row']} ({r.get('kind', '')}): {r.get('error', '')[:400]}")
    for r in result["builds"]:
        console.print(f"build {r['row']}: {r.get('ready_s', float('nan')):.1f} s, artifact {r.get('artifact_bytes', 0)} bytes")
    speedups = speedup_vs_cold(result)
    best = max((speedups[r] for r in AOT_ROWS if r in speedups), default=0.0)
    for row in AOT_ROWS:
        if row in speedups:
            console.print(f"{row}: time to first result {speedups[row]:.1f}x faster than JIT cold "
                          f"({'meets' if speedups[row] >= TARGET else 'misses'} the {TARGET:g}x target)")
    if args.json:
        write_json_atomic(Path(args.json), result)
    ok = best >= TARGET and not failed
    console.print(f"RESULT: {'PASS' if ok else 'FAIL'}: best AOT load {best:.1f}x vs JIT cold (target >= {TARGET:g}x)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
