"""How much the harness's decode loop adds over a minimal hand-written loop.

Both loops call the SAME compiled decode step (model forward + argmax against one static KV
cache) for the same number of tokens from the same rewound state; the minimal loop only
feeds the token back and advances the position. The harness loop (`suites.llm.DecodeLoop`)
also keeps the output tokens, clones the first logits and marks every token on its clock
(device events on GPU). Rounds alternate A/B/B/A so drift hits both; the figure is the ratio
of medians. Target: under 5 %.

    python benchmarks/llm_decode_overhead.py                       # tiny Llama, CPU
    python benchmarks/llm_decode_overhead.py --device cuda --size full --dtype bfloat16 \\
        --mode reduce-overhead                                     # Llama-3.1-8B on a GPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET = 0.05


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="llama-3.1-8b")
    p.add_argument("--device", default="cpu")
    p.add_argument("--size", default="tiny", choices=("tiny", "full"))
    p.add_argument("--dtype", default="float32")
    p.add_argument("--mode", default="default", help="torch.compile mode (default, reduce-overhead, ...)")
    p.add_argument("--prompt-len", type=int, default=None)
    p.add_argument("--new-tokens", type=int, default=None)
    p.add_argument("--rounds", type=int, default=30, help="timed rounds per loop")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (CPU default 1: spinning OpenMP threads on a shared, "
                        "oversubscribed box add more noise than a tiny model gains)")
    p.add_argument("--json", help="also write the figures to this file")
    return p.parse_args(argv)


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def setup(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    import suites.llm as llm
    from harness.model.workloads import WorkloadContext

    options = {k: v for k, v in (("prompt_len", args.prompt_len), ("new_tokens", args.new_tokens)) if v}
    ctx = WorkloadContext(device=args.device, dtype=getattr(torch, args.dtype), batch_size=1, size=args.size,
                          options=options)
    family = next(f for f in llm.FAMILIES if f.name == args.workload)
    torch.manual_seed(0)
    built = llm.make_factory(family)(ctx)
    model, prompt, opts = built.model, built.extras["prompt"], built.extras["options"]
    cache, first, step = llm.static_decode_step(model, prompt, opts["prompt_len"] + opts["new_tokens"])
    compiled = torch.compile(step, mode=None if args.mode == "default" else args.mode)
    loop = llm.DecodeLoop(compiled, cache, first, opts["prompt_len"], opts["new_tokens"],
                          llm.TokenClock(args.device), mark_cudagraph_step=True)
    return {"loop": loop, "opts": opts, "params": llm.count_parameters(model)}


def minimal_loop(loop: Any) -> Any:
    """The hand-written loop: same step, same static inputs, nothing else."""
    import torch

    step, token, position, n = loop.step, loop.token, loop.position, loop.new_tokens

    def run() -> None:
        with torch.no_grad():
            loop.rewind()
            for _ in range(n):
                torch.compiler.cudagraph_mark_step_begin()
                nxt, _ = step(token, position)
                token.copy_(nxt)
                position.add_(1)

    return run


def time_call(fn: Any, device: str) -> float:
    sync(device)
    start = time.perf_counter_ns()
    fn()
    sync(device)
    return (time.perf_counter_ns() - start) / 1e9


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    threads = args.threads or (1 if args.device == "cpu" else None)
    if threads:
        torch.set_num_threads(threads)
    state = setup(args)
    harness_loop, minimal = state["loop"], minimal_loop(state["loop"])
    compile_start = time.perf_counter()
    for _ in range(3):  # compile + CUDA-graph warm-up of the shared step
        harness_loop()
        minimal()
    sync(args.device)
    warm_s = time.perf_counter() - compile_start
    samples: dict[str, list[float]] = {"harness": [], "minimal": []}
    for i in range(args.rounds):
        order = ("harness", "minimal") if i % 2 == 0 else ("minimal", "harness")
        for name in order:
            samples[name].append(time_call(harness_loop if name == "harness" else minimal, args.device))
    med = {k: statistics.median(v) for k, v in samples.items()}
    overhead = med["harness"] / med["minimal"] - 1.0
    # the minimum is what noise cannot inflate: a second view on a loaded machine
    overhead_min = min(samples["harness"]) / min(samples["minimal"]) - 1.0
    tokens = state["opts"]["new_tokens"]
    result = {
        "workload": args.workload, "size": args.size, "device": args.device, "dtype": args.dtype, "mode": args.mode,
        "param_count": state["params"], "prompt_len": state["opts"]["prompt_len"], "new_tokens": tokens,
        "rounds": args.rounds, "compile_and_warmup_s": round(warm_s, 2),
        "harness_tpot_ms_median": med["harness"] / tokens * 1e3, "minimal_tpot_ms_median": med["minimal"] / tokens * 1e3,
        "overhead": overhead, "overhead_of_minimums": overhead_min, "threads": torch.get_num_threads(),
        "target": TARGET, "pass": overhead < TARGET,
        "torch": torch.__version__,
        "samples_s": samples,
    }
    print(f"{args.workload}/{args.size} on {args.device} ({args.dtype}, mode={args.mode}), {tokens} tokens per loop, "
          f"{args.rounds} interleaved rounds (compile + warm-up {warm_s:.1f} s)")
    print(f"  minimal loop : {result['minimal_tpot_ms_median']:.3f} ms/token (median)")
    print(f"  harness loop : {result['harness_tpot_ms_median']:.3f} ms/token (median)")
    print(f"  overhead     : {overhead * 100:+.2f} %  (target < {TARGET * 100:.0f} %): "
          f"{'PASS' if result['pass'] else 'FAIL'}; ratio of minimums {overhead_min * 100:+.2f} %")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
