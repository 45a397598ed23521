"""An A/A pair where the head side runs next to a CPU hog on every core: what does the gate say?

    python benchmarks/contention_aa.py [--hogs N] [--workload mlp-deep] [--min-time 1.0] [--out DIR]

Both sides measure the same case with the same code (`mlp-deep forward inductor tiny`, 2
OpenMP threads) through the real CLI: base on the machine as it is, head while N busy-loop
processes (default: one per core) hold every core; the script starts the hogs and kills
them after. Then `compilebench compare base head`. It prints the load average seen, each
record's contention block (`metrics.contention`: cpu_wait_fraction, contended, threads),
the latency and probe medians, compare's verdict lines and its exit code.

Issue 23 item 5: before compare knew contention, this pair gave `slower (eager too)`, exit 1;
with it, compare says `machine contended: cannot judge`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOG = "while True: pass"


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env, text=True, capture_output=True)


def run_side(out: Path, args: argparse.Namespace, env: dict[str, str]) -> Path:
    proc = cli("run", "-w", args.workload, "--scenario", "forward", "-c", args.compiler, "--size", "tiny",
               "--min-time", str(args.min_time), "--out", str(out), "--no-ingest", env=env)
    if proc.returncode != 0:
        sys.exit(f"run into {out} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return out / "runs"


def start_hogs(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(n)]


def stop_hogs(hogs: list[subprocess.Popen[bytes]]) -> None:
    for hog in hogs:
        hog.kill()
    for hog in hogs:
        hog.wait()


def describe(runs: Path) -> str:
    record = json.loads(next(runs.glob("*.json")).read_text())["records"][0]
    m = record.get("metrics") or {}
    c = m.get("contention") or {}
    probe = m.get("machine_probe") or {}
    medians = {k: statistics.median(v) * 1e6 for k, v in (probe.get("samples_s") or {}).items() if v}
    eager = statistics.median((record.get("eager") or {}).get("samples_s") or [0.0])
    return (f"status {record['status']}, compiled median {m.get('latency_s', 0) * 1e3:.3f} ms, "
            f"eager median {eager * 1e3:.3f} ms; "
            f"contention: cpu_wait_fraction {c.get('cpu_wait_fraction')}, contended {c.get('contended')}, "
            f"threads {c.get('threads')} (threshold {c.get('threshold')}), cpu_share {c.get('cpu_share')}, "
            f"rounds over threshold {c.get('rounds_over_threshold')}/{c.get('rounds')}, "
            f"read cost {c.get('read_cost_s', 0) * 1e3:.2f} ms {c.get('note', '')}; "
            f"probe {probe.get('version')} medians us " + ", ".join(f"{k} {v:.1f}" for k, v in medians.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="busy-loop processes (default: cores)")
    parser.add_argument("--workload", default="mlp-deep")
    parser.add_argument("--compiler", default="inductor")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of the case")
    parser.add_argument("--min-time", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=None, help="keep the run files here (default: a temp dir)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="contention-aa-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(args.threads)}

    print(f"cores {os.cpu_count()}, case {args.workload}/forward/{args.compiler}/tiny on {args.threads} threads, "
          f"{args.hogs} hog(s) on the head side; out {out}")
    print(f"load average before base: {os.getloadavg()}")
    base = run_side(out / "base", args, env)
    print(f"load average after base: {os.getloadavg()}")
    hogs = start_hogs(args.hogs)
    try:
        time.sleep(1.0)  # let the hogs reach the run queue
        head = run_side(out / "head", args, env)
        print(f"load average with the hogs, after head: {os.getloadavg()}")
    finally:
        stop_hogs(hogs)
    print(f"base: {describe(base)}")
    print(f"head: {describe(head)}")
    proc = cli("compare", str(base), str(head), env={**env, "COLUMNS": "200"})
    print(f"$ compilebench compare {base} {head}")
    print(proc.stdout.rstrip())
    if proc.stderr.strip():
        print(proc.stderr.rstrip())
    print(f"compare exit code: {proc.returncode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
