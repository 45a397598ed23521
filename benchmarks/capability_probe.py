"""Cost of the capability probe (harness.measure.capabilities) in a run's parent process.

Each repeat is a fresh interpreter that imports torch (the runner's parent does that anyway
for the environment capture), then times `capabilities_summary()`: wall and CPU seconds, and
which heavy modules the probe pulled in (it must import none of torch._dynamo, transformers'
cache classes or the diffusers UNet: it reads their source instead). Target: < 1 s of CPU
(the probe's own cost; wall time also counts whatever else the machine runs, so the load
average is printed next to it).

    python benchmarks/capability_probe.py [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch._dynamo", "torch._inductor", "transformers.cache_utils", "diffusers.models")
CHILD = r"""
HEAVY = __HEAVY__
import json, sys, time
import torch
wall, cpu = time.perf_counter(), time.process_time()
from harness.measure.capabilities import capabilities_summary
summary = capabilities_summary()
print(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                  "heavy_imported": [m for m in HEAVY if m in sys.modules], "missing": summary["missing"],
                  "versions": summary["versions"], "features": len(summary["features"])}))
""".replace("__HEAVY__", repr(HEAVY))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", help="write the samples here")
    args = p.parse_args(argv)
    runs = []
    for _ in range(args.repeats):
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, cwd=ROOT,
                             env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    wall = [r["wall_s"] for r in runs]
    cpu = [r["cpu_s"] for r in runs]
    heavy = sorted({m for r in runs for m in r["heavy_imported"]})
    print(f"capability probe, {len(runs)} fresh processes, {runs[0]['features']} features, versions {runs[0]['versions']}")
    print(f"  wall: median {statistics.median(wall):.3f} s, max {max(wall):.3f} s")
    print(f"  cpu:  median {statistics.median(cpu):.3f} s, max {max(cpu):.3f} s")
    print(f"  heavy modules imported by the probe: {heavy or 'none'}; missing features: {runs[0]['missing'] or 'none'}")
    print(f"  load average during the runs: {' '.join(f'{v:.1f}' for v in __import__('os').getloadavg())} "
          f"on {__import__('os').cpu_count()} CPUs")
    ok = max(cpu) < 1.0 and not heavy
    print(f"RESULT: {'PASS' if ok else 'FAIL'} (target: every run < 1 s of CPU, no heavy import)")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
