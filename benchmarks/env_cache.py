"""How long an environment takes to come out of the env cache (issue budget: under 5 s).

    python benchmarks/env_cache.py --env torch==2.13.0 --repeats 5

Resolves the env once (building its venv if it is not cached yet: that time is printed
too, it is the one-off cost), then resolves it `--repeats` more times, each a fresh
`resolve_env` as a command does it (find the cached venv, read its marker, probe the
package versions in the env's own interpreter), and prints the times. Exits 1 when the
slowest cache hit is over the budget. Offline installs: set PIP_FIND_LINKS to a folder of
wheels (and PIP_NO_INDEX=1) before the first run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from harness.experiments.envs import parse_env, resolve_env

BUDGET_S = 5.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="torch==2.13.0", help="NAME=SPEC or SPEC (default torch==2.13.0)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    spec = parse_env(args.env)
    started = time.perf_counter()
    first = resolve_env(spec)
    print(f"{spec.name}: torch {first.torch} at {first.python}: "
          f"{'cache hit' if first.from_cache else 'built'} in {time.perf_counter() - started:.2f}s")
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        env = resolve_env(spec)
        times.append(time.perf_counter() - t0)
        assert env.from_cache
    print(f"cache hits ({len(times)}): median {statistics.median(times):.3f}s, max {max(times):.3f}s, "
          f"min {min(times):.3f}s (budget {BUDGET_S:.0f}s)")
    return 0 if max(times) < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
