"""Where does max-autotune's compile time go on this GPU box? Two SDXL-sized GEMMs, compiled
under variants of Inductor's settings, each in a fresh process with an empty cache.

    python3 benchmarks/gpu/autotune_probe.py --json $OUT/autotune_probe.json

Why: the SDXL ladder's max-autotune rungs spent 15-45 s autotuning each GEMM shape on an
H200 (torch 2.11, "0.0003 seconds precompiling for 22 choices"), so the whole UNet could not
compile inside a call. The variants separate the candidate causes:

- `default`: the SDXL recipe's settings (compiler/configs.py SDXL_TUTORIAL_OPTIONS) under
  mode max-autotune-no-cudagraphs;
- `no_epilogue_bench`: the same with `benchmark_epilogue_fusion=False` (Inductor otherwise
  compiles and benchmarks each template fused with its epilogue, one at a time);
- `subproc`: the same with `autotune_in_subproc=True` (benchmarking in a child process);
- `threads1`: `TORCHINDUCTOR_COMPILE_THREADS=1`, the serial control: if `default` is as slow,
  precompilation is not running in parallel.

Each line of the output: variant, compile seconds of the first call, Inductor's own
"AUTOTUNE benchmarking takes X seconds and Y seconds precompiling" lines, and the
select_algorithm counters.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, str]]] = {  # name -> (inductor options, environment)
    "default": ({}, {}),
    "no_epilogue_bench": ({"benchmark_epilogue_fusion": False}, {}),
    "subproc": ({"autotune_in_subproc": True}, {}),
    "threads1": ({}, {"TORCHINDUCTOR_COMPILE_THREADS": "1"}),
}
AUTOTUNE_LINE = re.compile(r"AUTOTUNE benchmarking takes ([\d.]+) seconds and ([\d.]+) seconds precompiling for (\d+)")


def child(options: dict[str, Any], device: str, tokens: int) -> dict[str, Any]:
    """One fresh process: compile two GEMMs with epilogues, report compile seconds and counters."""
    import torch
    from torch._dynamo.utils import counters

    sys.path.insert(0, str(ROOT))
    from compiler.configs import SDXL_TUTORIAL_OPTIONS

    class Block(torch.nn.Module):  # the SDXL feed-forward at width 640: GEGLU up, down
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(640, 5120)
            self.down = torch.nn.Linear(2560, 640)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, gate = self.up(x).chunk(2, dim=-1)
            return x + self.down(a * torch.nn.functional.gelu(gate))

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = Block().to(device, dtype)
    x = torch.randn(tokens, 640, device=device, dtype=dtype)
    # mode max-autotune-no-cudagraphs spelled as options: torch.compile takes one or the other
    settings = {"max_autotune": True, "triton.cudagraphs": False, **SDXL_TUTORIAL_OPTIONS, **options}
    compiled = torch.compile(model, options=settings)
    t = time.perf_counter()
    with torch.no_grad():
        compiled(x)
    if device == "cuda":
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t
    return {"compile_s": round(compile_s, 2), "threads": torch._inductor.config.compile_threads,
            "counters": {k: v for k, v in counters["inductor"].items() if "select_algorithm" in k or "autotune" in k},
            "torch": torch.__version__}


def run_variant(name: str, device: str, tokens: int, timeout_s: float) -> dict[str, Any]:
    options, extra_env = VARIANTS[name]
    with tempfile.TemporaryDirectory(prefix="cb-autotune-") as cache:
        env = {**os.environ, **extra_env, "TORCHINDUCTOR_CACHE_DIR": cache, "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, __file__, "--child", json.dumps(options), "--device", device, "--tokens", str(tokens)]
        t = time.perf_counter()
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return {"variant": name, "status": "timeout", "wall_s": timeout_s}
    wall = time.perf_counter() - t
    lines = [m.groups() for m in AUTOTUNE_LINE.finditer(proc.stderr)]
    result: dict[str, Any] = {"variant": name, "status": "ok" if proc.returncode == 0 else f"exit {proc.returncode}",
                              "wall_s": round(wall, 1),
                              "autotune": [{"benchmark_s": float(b), "precompile_s": float(p), "choices": int(n)}
                                           for b, p, n in lines]}
    try:
        result.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (IndexError, json.JSONDecodeError):
        result["stderr_tail"] = proc.stderr[-1500:]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tokens", type=int, default=8192, help="GEMM rows (SDXL at 1024 px, CFG batch 2: 8192)")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per variant")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child), args.device, args.tokens)))
        return 0
    results = []
    for name in args.variants.split(","):
        if name not in VARIANTS:
            parser.error(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")
        r = run_variant(name, args.device, args.tokens, args.timeout)
        results.append(r)
        tuned = ", ".join(f"{a['benchmark_s']:.1f}+{a['precompile_s']:.1f}s/{a['choices']}" for a in r.get("autotune", []))
        print(f"{name:18s} {r['status']:8s} compile {r.get('compile_s', '-')} s, wall {r['wall_s']} s, "
              f"threads {r.get('threads')}; autotune (bench+precompile/choices): {tuned or '-'}; "
              f"{r.get('counters', r.get('stderr_tail', ''))}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
