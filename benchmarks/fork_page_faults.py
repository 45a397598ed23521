"""Page faults and time of one compile in a forked child against a fresh process: does a
fork leave the compile copy-on-write work a spawned worker never does, and does
harness.run.forkserver.own_inherited_pages take it away?

    python benchmarks/fork_page_faults.py [--repeat 2]

Each round runs three processes, one after the other: `fork` (a parent imports torch's
compile stack, forks, and the child compiles a 16-block MLP), `fork-own` (the same, the child
first copies the pages it shares, as a forked case does) and `spawn` (a fresh process imports
and compiles). Prints per process the compile's seconds, its minor faults (getrusage) and the
peak RSS; for `fork-own` also what own_inherited_pages copied and how long it took.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compile_once(tag: str) -> None:
    import torch

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="cb-faults-")  # cold, every time
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU()) for _ in range(16)])
    x = torch.randn(32, 256)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    torch.compile(model)(x)
    seconds = time.perf_counter() - start
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    hwm = int(Path("/proc/self/status").read_text().split("VmHWM:")[1].split()[0]) >> 10
    print(f"{tag:<9} compile {seconds:6.2f} s  minor faults {faults:7d}  peak RSS {hwm} MiB", flush=True)


def one_process(mode: str) -> None:
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401

    if mode == "spawn":
        compile_once(mode)
        return
    pid = os.fork()
    if pid == 0:
        if mode == "fork-own":
            from harness.run.forkserver import own_inherited_pages

            owned = own_inherited_pages()
            print(f"          owned {owned['bytes'] >> 20} MiB in {owned['runs']} runs "
                  f"({owned['refused']} refused), {owned['seconds']:.3f} s", flush=True)
        compile_once(mode)
        os._exit(0)
    os.waitpid(pid, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--mode", choices=("fork", "fork-own", "spawn"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mode:
        one_process(args.mode)
        return 0
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for _ in range(args.repeat):
        for mode in ("fork", "fork-own", "spawn"):
            subprocess.run([sys.executable, __file__, "--mode", mode], env=env, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
