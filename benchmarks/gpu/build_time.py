"""Where a GPU suite case's model build time goes, and whether building on the device builds
the same model as building on the CPU: Llama-3.1-8B and Gemma-2B (bfloat16), the SDXL UNet
(float16), at full size, each way in a fresh process (as a worker builds it).

    python3 benchmarks/gpu/build_time.py --out $OUT/build_time.json    # on the H200, < 150 s
    python3 benchmarks/gpu/build_time.py --dry-run                      # CPU, tiny models

Ways (a model gets the ones that apply; --ways picks):
- `device`: what the suite builds today (suites.llm.build_model / suites.diffusion.build_model
  on the device: the library's own init, run there, in the case dtype);
- `device-fp32-cast` (sdxl-unet): the diffusion build before it took a dtype: float32 on the
  device, then cast to float16;
- `cpu-copy`: random init on the CPU, then `.to(device)` (the "old way" issue 25 assumed).
  CPU RNG is serial: Llama-3.1-8B's 8 B draws take minutes, so it is opt-in for the LLMs;
- `cpu-reference` (LLMs): built on the CPU with weight init skipped (transformers'
  no_init_weights): the layout and the buffers computed in __init__, in seconds.

Per process: seconds for importing torch, creating the CUDA context, importing the model's
library modules, and the build itself (synchronised); parameter count; CUDA memory after the
build (allocated, peak since the process started, reserved) and host peak RSS. Per model:
every way's state_dict keys, shapes and dtypes, and its buffers' values (rotary inv_freq,
Gemma's embed_scale), against the CPU way; each parameter's std against the first way with
initialised weights (the same init draws the same distribution). A difference exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.model.construction import compare_summaries, spread_ratio_range, tensor_summary  # noqa: E402


@dataclass(frozen=True)
class Target:
    name: str
    library: str  # "llm" (suites.llm) or "diffusion" (suites.diffusion)
    dtype: str
    ways: tuple[str, ...]  # the default ways, reference first


TARGETS: tuple[Target, ...] = (
    Target("llama-3.1-8b", "llm", "bfloat16", ("cpu-reference", "device")),
    Target("gemma-2b", "llm", "bfloat16", ("cpu-reference", "device")),
    Target("sdxl-unet", "diffusion", "float16", ("cpu-copy", "device-fp32-cast", "device")),
)
WAYS = {"llm": ("cpu-reference", "cpu-copy", "device"), "diffusion": ("cpu-copy", "device-fp32-cast", "device")}
CPU_WAYS = ("cpu-reference", "cpu-copy")  # the references: their buffers are computed on the CPU
BUDGET_S = 140.0
NO_CUDA = ("no CUDA device: this script measures model builds on a GPU (run it on the GPU box), "
           "or pass --dry-run for the CPU check of its plumbing with tiny models")


def target(name: str) -> Target:
    return next(t for t in TARGETS if t.name == name)


# ---- one build (the child) ------------------------------------------------------------

def llm_build(name: str, way: str, size: str, device: str, dtype: Any, timings: dict[str, float]) -> Any:
    from suites import llm

    start = time.perf_counter()
    family = next(f for f in llm.FAMILIES if f.name == name)
    config = llm.build_config(llm.load_config_dict(llm.config_path(family, size)))
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]  # imports the model's module (lazy in transformers)
    timings["import_s"] = time.perf_counter() - start
    start = time.perf_counter()
    if way == "device":
        model = llm.build_model(config, device, dtype)
    elif way == "cpu-reference":
        from transformers.initialization import no_init_weights

        with no_init_weights():
            model = llm.build_model(config, "cpu", dtype)
        model.tie_weights()  # post_init ties inside the init_weights that no_init_weights skips
    else:  # cpu-copy
        model = llm.build_model(config, "cpu", dtype)
        timings["cpu_init_s"] = time.perf_counter() - start
        model = model.to(device)
    sync(device)
    timings["build_s"] = time.perf_counter() - start
    return model


def diffusion_build(name: str, way: str, size: str, device: str, dtype: Any, timings: dict[str, float]) -> Any:
    import torch

    from harness.model.workloads import WorkloadContext
    from suites import diffusion

    start = time.perf_counter()
    diffusion.model_class(diffusion.MODEL_CONFIGS[name][size])  # imports diffusers' model module
    timings["import_s"] = time.perf_counter() - start
    start = time.perf_counter()
    if way == "device":
        ctx = WorkloadContext(device=device, dtype=dtype, batch_size=1, size=size, options={})
        model = diffusion.build_model(name, ctx, diffusion.parse_options({}, diffusion.DEFAULT_RESOLUTION[name][size]))
    elif way == "device-fp32-cast":
        model = torch.nn.Module.to(diffusion.build_from_config(name, size, device), dtype=dtype)
    else:  # cpu-copy
        model = torch.nn.Module.to(diffusion.build_from_config(name, size, "cpu"), dtype=dtype)
        timings["cpu_init_s"] = time.perf_counter() - start
        model = model.to(device)
    sync(device)
    timings["build_s"] = time.perf_counter() - start
    return model


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure_one(name: str, way: str, size: str, device: str) -> dict[str, Any]:
    """Build `name` the `way` way in this process; timings, memory and the tensor summary."""
    timings: dict[str, float] = {}
    start = time.perf_counter()
    import torch

    timings["import_torch_s"] = time.perf_counter() - start
    on_cuda = device.startswith("cuda") and way != "cpu-reference"
    if on_cuda:
        start = time.perf_counter()
        torch.zeros(1, device=device)  # the CUDA context: a worker's build pays it too
        sync(device)
        timings["cuda_init_s"] = time.perf_counter() - start
    torch.manual_seed(0)
    spec = target(name)
    build = llm_build if spec.library == "llm" else diffusion_build
    model = build(name, way, size, device, getattr(torch, spec.dtype), timings)
    memory = None
    if on_cuda:
        allocated, peak = int(torch.cuda.memory_allocated()), int(torch.cuda.max_memory_allocated())
        # transient: what the build held beyond the finished model (a float32 copy, a second copy)
        memory = {"allocated_bytes": allocated, "peak_allocated_bytes": peak, "transient_bytes": peak - allocated,
                  "reserved_bytes": int(torch.cuda.memory_reserved())}
    import resource

    summary = tensor_summary(model, spread=way != "cpu-reference")
    return {"model": name, "way": way, "size": size, "device": device, "dtype": spec.dtype, "status": "ok",
            "timings_s": {k: round(v, 4) for k, v in timings.items()}, "cuda_memory": memory,
            "host_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "param_count": summary["param_count"], "summary": summary}


# ---- the parent -------------------------------------------------------------------------

def run_child(name: str, way: str, size: str, device: str, timeout: float) -> dict[str, Any]:
    """One build in a fresh interpreter (its imports and CUDA context counted, as a worker's)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "child.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, way, "--size", size,
               "--device", device, "--child-out", str(out)]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout, 1.0), cwd=ROOT,
                                  env={**os.environ, "HF_HUB_OFFLINE": "1"})
        except subprocess.TimeoutExpired:
            return {"model": name, "way": way, "status": "timeout", "error": f"over {timeout:.0f} s (budget)",
                    "process_wall_s": round(time.perf_counter() - start, 2)}
        wall = round(time.perf_counter() - start, 2)
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"model": name, "way": way, "status": "error", "error": " | ".join(tail), "process_wall_s": wall}
        result = json.loads(out.read_text())
    result["process_wall_s"] = wall
    return result


def compare_model(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each way against the model's CPU way (layout, buffer values) and against the first way
    with drawn weights (parameter spread)."""
    ok = [r for r in results if r["status"] == "ok"]
    reference = next((r for r in ok if r["way"] in CPU_WAYS), ok[0] if ok else None)
    drawn = next((r for r in ok if r["summary"]["spread"]), None)
    checks: dict[str, Any] = {}
    for r in ok:
        if r is reference:
            continue
        problems = compare_summaries(reference["summary"], r["summary"])
        entry: dict[str, Any] = {"against": reference["way"], "problems": problems}
        if drawn is not None and drawn is not r and r["summary"]["spread"]:
            entry["spread_problems"] = [p for p in compare_summaries(drawn["summary"], r["summary"]) if "std" in p]
            entry["std_ratio_range"] = spread_ratio_range(drawn["summary"], r["summary"])
            entry["spread_against"] = drawn["way"]
        checks[r["way"]] = entry
    return checks


def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f}"


def print_table(results: list[dict[str, Any]], checks: dict[str, Any]) -> None:
    cols = ("process", "torch", "cuda", "import", "build", "cpu_init")
    print(f"{'model':14} {'way':17} {'status':7} " + " ".join(f"{c + '_s':>10}" for c in cols)
          + f" {'params':>14} {'alloc_GiB':>9} {'peak_GiB':>9} {'trans_GiB':>9} {'resv_GiB':>9}")
    for r in results:
        t = r.get("timings_s", {})
        vals = [r.get("process_wall_s"), t.get("import_torch_s"), t.get("cuda_init_s"), t.get("import_s"),
                t.get("build_s"), t.get("cpu_init_s")]
        mem = r.get("cuda_memory") or {}
        print(f"{r['model']:14} {r['way']:17} {r['status']:7} "
              + " ".join(f"{v:>10.2f}" if isinstance(v, (int, float)) else f"{'-':>10}" for v in vals)
              + f" {r.get('param_count', 0):>14,} {gib(mem.get('allocated_bytes')):>9}"
              f" {gib(mem.get('peak_allocated_bytes')):>9} {gib(mem.get('transient_bytes')):>9}"
              f" {gib(mem.get('reserved_bytes')):>9}")
        if r["status"] != "ok":
            print(f"    {r.get('error')}")
    for model, per_way in checks.items():
        for way, c in per_way.items():
            problems = c["problems"] + c.get("spread_problems", [])
            ratio = c.get("std_ratio_range")
            spread = f"; std ratio vs {c['spread_against']} {ratio[0]:.4f}..{ratio[1]:.4f}" if ratio else ""
            verdict = "same layout and buffers" if not c["problems"] else "; ".join(problems[:4])
            print(f"check {model} {way} vs {c['against']}: {verdict}{spread}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=[t.name for t in TARGETS], choices=[t.name for t in TARGETS])
    p.add_argument("--ways", nargs="+", choices=sorted({w for ws in WAYS.values() for w in ws}),
                   help="ways to build (default: each model's own list; cpu-copy of an LLM is minutes)")
    p.add_argument("--size", default="full", choices=("full", "tiny"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny models: the script's own check")
    p.add_argument("--in-process", action="store_true", help="build in this process (tests; not fair timing)")
    p.add_argument("--budget-s", type=float, default=BUDGET_S, help="stop starting builds after this long")
    p.add_argument("--out", help="write the results here (JSON)")
    p.add_argument("--child", nargs=2, metavar=("MODEL", "WAY"), help=argparse.SUPPRESS)
    p.add_argument("--child-out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def plan(args: argparse.Namespace) -> list[tuple[str, str]]:
    pairs = []
    for name in args.models:
        spec = target(name)
        ways = [w for w in (args.ways or spec.ways) if w in WAYS[spec.library]]
        pairs += [(name, w) for w in ways]
    return pairs


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        result = measure_one(args.child[0], args.child[1], args.size, args.device)
        Path(args.child_out).write_text(json.dumps(result))
        return 0
    if args.dry_run:
        args.device, args.size = "cpu", "tiny"
    elif args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(NO_CUDA, file=sys.stderr)
            return 2
    started = time.perf_counter()
    results = []
    for name, way in plan(args):
        left = args.budget_s - (time.perf_counter() - started)
        if left <= 0:
            results.append({"model": name, "way": way, "status": "skipped", "error": "budget spent"})
            continue
        if args.in_process:
            results.append(measure_one(name, way, args.size, args.device))
        else:
            results.append(run_child(name, way, args.size, args.device, left))
        print(f"{name} {way}: {results[-1]['status']} ({time.perf_counter() - started:.0f} s)", flush=True)
    checks = {name: compare_model([r for r in results if r["model"] == name]) for name in args.models}
    print_table(results, checks)
    failed = [r for r in results if r["status"] != "ok"]
    mismatched = [f"{m} {w}" for m, per in checks.items() for w, c in per.items()
                  if c["problems"] or c.get("spread_problems")]
    if args.out:
        import torch

        for r in results:  # the per-tensor layout was compared above; the buffers stay, they are few
            if "summary" in r:
                r["buffers"] = r.pop("summary")["buffers"]
        Path(args.out).write_text(json.dumps({
            "size": args.size, "device": args.device, "torch": torch.__version__,
            "wall_s": round(time.perf_counter() - started, 2), "results": results, "checks": checks,
            "failed": [f"{r['model']} {r['way']}" for r in failed], "mismatched": mismatched}, indent=1))
    print(f"wall {time.perf_counter() - started:.1f} s; {len(failed)} build(s) not ok; "
          f"{len(mismatched)} mismatch(es){': ' + ', '.join(mismatched) if mismatched else ''}")
    return 1 if failed or mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
