"""Standalone AOTInductor check, no compilebench code: export -> aoti_compile_and_package ->
aoti_load_package -> call -> compare with eager, each step printed before it starts, so a
native crash (SIGSEGV) names the step it happened in (faulthandler prints the Python stack).

    python benchmarks/gpu/aoti_repro.py --model mlp --device cuda
    python benchmarks/gpu/aoti_repro.py --model gpt2 --device cuda --dtype bfloat16
    python benchmarks/gpu/aoti_repro.py --all --device cuda     # each variant in its own process
    python benchmarks/gpu/aoti_repro.py --split --device cuda   # package in one process, load in a fresh one

GPT-2 is transformers' GPT2LMHeadModel(GPT2Config()) with random weights (124 M params),
called with use_cache=False and returning the logits, batch 1 x 128 tokens.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import subprocess
import sys
import tempfile
import time

VARIANTS = [  # (model, dtype, AOTI_RUNTIME_CHECK_INPUTS): the cold-start table's two models, as it builds them
    ("mlp", "float32", "1"), ("gpt2", "bfloat16", "1"),
]


def step(name: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] step: {name}", flush=True)


def build(model_name: str, device: str, dtype_name: str):
    import torch

    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    if model_name == "mlp":
        layers = [torch.nn.Linear(64, 256)]
        for _ in range(7):
            layers += [torch.nn.LayerNorm(256), torch.nn.GELU(), torch.nn.Linear(256, 256)]
        model = torch.nn.Sequential(*layers).to(device, dtype).eval()
        return model, (torch.randn(64, 64, device=device, dtype=dtype),)
    from transformers import GPT2Config, GPT2LMHeadModel

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = GPT2LMHeadModel(GPT2Config())

        def forward(self, input_ids):
            return self.lm(input_ids=input_ids, use_cache=False).logits

    model = Logits().to(device, dtype).eval()
    return model, (torch.randint(3, 50257, (1, 128), device=device),)


def run_one(model_name: str, device: str, dtype_name: str, package_to: str | None = None,
            load_from: str | None = None) -> int:
    """Build, export, package, load, call. `package_to` stops after packaging (the package is
    kept at that path); `load_from` skips building the package and loads that one instead: the
    two halves in separate processes tell a crash of loading-where-you-compiled from one of
    loading at all."""
    faulthandler.enable()
    import torch

    print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "model": model_name, "dtype": dtype_name,
                      "device": device, "AOTI_RUNTIME_CHECK_INPUTS": os.environ.get("AOTI_RUNTIME_CHECK_INPUTS")}),
          flush=True)
    step("build model")
    model, args = build(model_name, device, dtype_name)
    with torch.no_grad():
        step("eager call")
        ref = model(*args)
        step("torch.export.export")
        path = load_from or package_to or os.path.join(tempfile.mkdtemp(prefix="aoti-repro-"), "model.pt2")
        if not load_from:
            exported = torch.export.export(model, args)
            step("torch._inductor.aoti_compile_and_package")
            t = time.perf_counter()
            torch._inductor.aoti_compile_and_package(exported, package_path=path)
            print(f"  packaged {os.path.getsize(path)} bytes in {time.perf_counter() - t:.1f} s", flush=True)
        if package_to:
            step("done (package only)")
            return 0
        step("torch._inductor.aoti_load_package")
        runner = torch._inductor.aoti_load_package(path)
        step("first call")
        out = runner(*args)
        torch.cuda.synchronize() if device.startswith("cuda") else None
        step("compare")
        err = (out.float() - ref.float()).norm() / ref.float().norm()
        print(f"  relative error vs eager: {err.item():.2e}", flush=True)
    step("done")
    return 0


def run_all(device: str) -> int:
    """Every variant in its own process, all at once (a crash in one cannot hide the others)."""
    procs = []
    for model_name, dtype_name, check in VARIANTS:
        env = {**os.environ, "AOTI_RUNTIME_CHECK_INPUTS": check, "PYTHONFAULTHANDLER": "1",
               "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="aoti-repro-cache-")}
        cmd = [sys.executable, __file__, "--model", model_name, "--dtype", dtype_name, "--device", device]
        procs.append(((model_name, dtype_name, check), time.perf_counter(),
                      subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    results = []
    for (model_name, dtype_name, check), started, proc in procs:
        stdout, stderr = proc.communicate()
        last_step = [ln for ln in stdout.splitlines() if "step:" in ln][-1:] or ["(none)"]
        results.append({"model": model_name, "dtype": dtype_name, "check_inputs": check, "exit": proc.returncode,
                        "last_step": last_step[0], "seconds": round(time.perf_counter() - started, 1)})
        print(f"== {model_name} {dtype_name} AOTI_RUNTIME_CHECK_INPUTS={check}: exit {proc.returncode}", flush=True)
        print(stdout[-3000:], stderr[-6000:], sep="\n", flush=True)
    print("SUMMARY " + json.dumps(results), flush=True)
    return 0


def run_split(model_name: str, device: str, dtype_name: str) -> int:
    """Package in one process, then load and call in a fresh one (how the cold-start table's
    aoti row now works)."""
    path = os.path.join(tempfile.mkdtemp(prefix="aoti-split-"), "model.pt2")
    base = [sys.executable, __file__, "--model", model_name, "--dtype", dtype_name, "--device", device]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    for half in (["--package-to", path], ["--load-from", path]):
        rc = subprocess.call(base + half, env=env)
        print(f"== split {model_name} {half[0]}: exit {rc}", flush=True)
        if rc != 0:
            return rc
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("mlp", "gpt2"), default="mlp")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cuda")
    p.add_argument("--all", action="store_true", help="every variant, each in a fresh process")
    p.add_argument("--split", action="store_true", help="package in one process, load and call in a fresh one")
    p.add_argument("--package-to", help="package to this path and stop")
    p.add_argument("--load-from", help="load this package instead of building one")
    args = p.parse_args()
    if args.all:
        return run_all(args.device)
    if args.split:
        return run_split(args.model, args.device, args.dtype)
    return run_one(args.model, args.device, args.dtype, args.package_to, args.load_from)


if __name__ == "__main__":
    sys.exit(main())
