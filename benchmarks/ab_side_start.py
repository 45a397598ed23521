"""What a side of `compilebench ab` that runs another interpreter pays per process: spawned
(before e2b91a9: a python whose realpath was not the runner's was always spawned) or forked
from a preloaded server of its own python (after).

    python benchmarks/ab_side_start.py --tree OLD_CHECKOUT --tree . --rounds 2

Per tree (checkout), in the order given, and again in reverse, so drift lands on both: one
`compilebench ab` of the tiny CPU MLP (forward, inductor, --no-adaptive) with base = this
python and head = a copy of it (`venv --copies` plus a .pth file that sees this venv's
packages: another interpreter binary with the same torch). Prints, per tree and side, each
process's start path, wall and worker setup, the server's import time, the session's wall,
and the load average before and after.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import site
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def copied_interpreter(where: Path) -> str:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--copies", str(where)], check=True)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "runner_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return str(python)


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def session(tree: Path, head: str, rounds: int, out: Path) -> dict:
    argv = [sys.executable, "-m", "harness", "ab", "--base-python", sys.executable, "--head-python", head,
            "-w", "mlp-classic", "--scenario", "forward", "--compiler", "inductor", "--device", "cpu", "--size", "tiny",
            "--rounds", str(rounds), "--no-adaptive", "--out", str(out), "--format", "plain"]
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    before, started = load(), time.monotonic()
    subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    sides: dict[str, dict] = {}
    for path in sorted(glob.glob(str(out / "ab" / "*" / "*" / "round-*.json"))):
        run = json.loads(Path(path).read_text())
        side = sides.setdefault(run["config"]["ab"]["side"], {"start": [], "wall_s": [], "setup_s": [], "server_import_s": None})
        for rec in run["records"]:
            side["start"].append(rec["worker"].get("start"))
            side["wall_s"].append(rec["worker"].get("wall_s"))
            side["setup_s"].append((rec.get("metrics") or {}).get("phase_s", {}).get("setup"))
        servers = (run["config"].get("worker_start") or {}).get("servers") or []
        if servers:
            side["server_import_s"] = servers[0].get("import_s")
    return {"tree": str(tree), "session_wall_s": round(wall, 1), "load_before": before, "load_after": load(), "sides": sides}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="a compilebench checkout (twice: old, new)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="passes over the trees (each pass: in order, then reversed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cb-ab-side-start-"))
    head = copied_interpreter(work / "venv")
    results = []
    for n in range(args.repeat):
        for i, tree in enumerate([*args.tree, *reversed(args.tree)]):
            result = session(Path(tree).resolve(), head, args.rounds, work / f"out-{n}-{i}")
            results.append(result)
            for side, s in sorted(result["sides"].items()):
                walls = [w for w in s["wall_s"] if w is not None]
                setups = [x for x in s["setup_s"] if x is not None]
                print(f"{result['tree']}  {side}: start {s['start']}  wall {walls}  setup "
                      f"{[round(x, 2) for x in setups]}  (median wall {statistics.median(walls):.1f} s)  "
                      f"server imports {s['server_import_s']} s", flush=True)
            print(f"  session {result['session_wall_s']} s, load {result['load_before']} -> {result['load_after']}",
                  flush=True)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
