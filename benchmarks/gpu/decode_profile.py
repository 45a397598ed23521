"""Where a compiled decode step's time goes: a torch profiler trace of the harness's decode
loop (the `decode` scenario's step and loop, static KV cache), summarised by kernel family.

    python3 benchmarks/gpu/decode_profile.py --workload llama-3.1-8b --compiler gpt-fast-max-autotune \
        --tokens 32 --json $OUT/profile.json

It answers "why is decode below the bandwidth roofline": the bytes one token must read
(weights + KV cache) over the GPU time of the kernels that read them, kernel family by
kernel family (GEMM/GEMV, attention, fused Triton, copies), against the wall time per token.
The gap between kernel time and wall time is launch/host overhead that CUDA graphs remove.
Run it with the same TORCHINDUCTOR_CACHE_DIR as the harness case to reuse its compile.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

FAMILIES = (  # first match wins; cuBLAS on Hopper names its kernels nvjet_*
    ("gemm", re.compile(r"gemm|gemv|nvjet|cutlass|xmma|cublas|splitk|triton_tem|_mm_|^mm_|addmm", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|efficient_attention", re.I)),
    ("fused triton", re.compile(r"^triton_", re.I)),
    ("copy/memset", re.compile(r"memcpy|memset|copy", re.I)),
)


def family(kernel_name: str) -> str:
    for name, pattern in FAMILIES:
        if pattern.search(kernel_name):
            return name
    return "other"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="llama-3.1-8b")
    p.add_argument("--compiler", default="gpt-fast-max-autotune")
    p.add_argument("--size", default="full")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--device", default="cuda")
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--tokens", type=int, default=32, help="decode steps profiled")
    p.add_argument("--top", type=int, default=12, help="kernels listed by GPU time")
    p.add_argument("--json", help="write the summary here")
    return p.parse_args(argv)


def build_loop(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """(decode loop, model, KV-cache bytes) built exactly as the `decode` scenario builds them."""
    import torch

    from compiler import get_compiler
    from suites import llm

    family_ = next(f for f in llm.FAMILIES if f.name == args.workload)
    torch.manual_seed(0)
    config = llm.build_config(llm.load_config_dict(llm.config_path(family_, args.size)))
    model = llm.build_model(config, args.device, getattr(torch, args.dtype))
    prompt = torch.randint(3, int(config.vocab_size), (1, args.prompt_len), device=args.device)
    cache, first, step = llm.static_decode_step(model, prompt, args.prompt_len + args.tokens)
    compiled = get_compiler(args.compiler).compile(step)
    clock = llm.TokenClock(args.device, skip_calls=0)
    loop = llm.DecodeLoop(compiled, cache, first, args.prompt_len, args.tokens, clock, mark_cudagraph_step=True)
    return loop, model, llm.kv_cache_bytes(cache)


def summarise(events: Any, tokens: int, top: int) -> dict[str, Any]:
    """GPU kernel time per token by family, and the top kernels."""
    by_family: dict[str, float] = {}
    by_kernel: dict[str, list[float]] = {}
    for event in events:
        if getattr(event, "device_type", None) is None or "CUDA" not in str(event.device_type):
            continue
        us = float(getattr(event, "device_time_total", 0.0) or getattr(event, "cuda_time_total", 0.0))
        if us <= 0:
            continue
        fam = family(event.key)
        by_family[fam] = by_family.get(fam, 0.0) + us
        by_kernel.setdefault(event.key, [0.0, 0])
        by_kernel[event.key][0] += us
        by_kernel[event.key][1] += int(event.count)
    ranked = sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:top]
    return {
        "kernel_us_per_token": sum(by_family.values()) / tokens,
        "family_us_per_token": {k: v / tokens for k, v in sorted(by_family.items(), key=lambda kv: -kv[1])},
        "top_kernels": [{"name": k[:120], "family": family(k), "us_per_token": v[0] / tokens,
                         "calls_per_token": v[1] / tokens} for k, v in ranked],
    }


def main(argv: list[str] | None = None) -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from suites import llm

    args = parse_args(argv)
    started = time.perf_counter()
    loop, model, kv_bytes = build_loop(args)
    print(f"built {args.workload} in {time.perf_counter() - started:.1f} s", flush=True)
    on_cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    for _ in range(3):  # compile (or cache load), CUDA-graph recording, one clean call
        loop()
    sync()
    print(f"compiled and warmed up at {time.perf_counter() - started:.1f} s", flush=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as prof:
        loop()
        sync()
    wall = [s for run in list(loop.clock.intervals())[-1:] for s in run]
    summary = summarise(prof.key_averages(), args.tokens, args.top)
    weight_bytes = llm.weight_bytes_per_token(model)
    token_bytes = weight_bytes + kv_bytes
    wall_us = 1e6 * sorted(wall)[len(wall) // 2] if wall else None
    bandwidth, source = llm.peak_bandwidth(args.device)
    summary.update({
        "workload": args.workload, "compiler": args.compiler, "dtype": args.dtype, "tokens": args.tokens,
        "gpu": torch.cuda.get_device_name(0) if on_cuda else "none", "torch": torch.__version__,
        "bytes_per_token": token_bytes, "weight_bytes_per_token": weight_bytes, "kv_cache_bytes": kv_bytes,
        "wall_us_per_token_median_profiled": wall_us,
        "peak_bandwidth_bytes_s": bandwidth, "peak_bandwidth_source": source,
    })
    if summary["kernel_us_per_token"]:
        summary["bandwidth_if_kernels_only"] = token_bytes / (summary["kernel_us_per_token"] * 1e-6)
    if wall_us:
        summary["host_gap_us_per_token"] = wall_us - summary["kernel_us_per_token"]
    print(f"{args.workload} {args.compiler}: wall {wall_us or float('nan'):.0f} us/token (profiled), "
          f"GPU kernels {summary['kernel_us_per_token']:.0f} us/token, {token_bytes / 1e9:.2f} GB/token")
    for fam, us in summary["family_us_per_token"].items():
        print(f"  {fam:14s} {us:8.0f} us/token")
    for k in summary["top_kernels"]:
        print(f"  {k['us_per_token']:8.1f} us  x{k['calls_per_token']:.0f}  [{k['family']}] {k['name']}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
