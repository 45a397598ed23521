"""Models built directly on their device and in their dtype are the models the CPU path
builds: the same state_dict keys, shapes and dtypes, the same buffers (values included where
both have values), parameters drawn from the same distributions. A GPU is stood in for by
the meta device (layout) and by the CPU (values); benchmarks/gpu/build_time.py checks the
values on the GPU itself, and its CPU dry mode runs here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import suites.llm as llm
from compiler import CompilerConfig
from harness.measure.worker import run_case
from harness.model.construction import build_on, compare_summaries, tensor_summary
from harness.model.schema import Case
from harness.model.workloads import WorkloadContext
from suites import diffusion as dif

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu" / "build_time.py"
HALF = (torch.float16, torch.bfloat16)


def family(name: str) -> llm.Family:
    return next(f for f in llm.FAMILIES if f.name == name)


def tiny_llm(name: str, device: str, dtype=torch.float32):
    return llm.build_model(llm.build_config(llm.load_config_dict(llm.config_path(family(name), "tiny"))), device, dtype)


def diffusion_ctx(size: str, dtype, device: str = "cpu") -> WorkloadContext:
    return WorkloadContext(device=device, dtype=dtype, batch_size=1, size=size, options={})


def fp32_then_cast(workload: str, size: str, device: str, dtype):
    """The diffusion build before it took a dtype: float32, then Module.to(dtype)."""
    return torch.nn.Module.to(dif.build_from_config(workload, size, device), dtype=dtype)


# ---- build_on --------------------------------------------------------------------------

def test_build_on_allocates_on_the_device_in_the_dtype_and_restores_the_default():
    before = torch.get_default_dtype()
    with build_on("meta", torch.bfloat16):
        layer = torch.nn.Linear(4, 4)
        index = torch.arange(3)
    assert layer.weight.device.type == "meta" and layer.weight.dtype == torch.bfloat16
    assert index.dtype == torch.int64  # integer factories keep their own dtype
    assert torch.get_default_dtype() == before
    with pytest.raises(RuntimeError, match="boom"), build_on("meta", torch.float16):
        raise RuntimeError("boom")
    assert torch.get_default_dtype() == before
    with build_on("meta", torch.int64):  # not a floating dtype: the default is left alone
        assert torch.get_default_dtype() == before


# ---- diffusion: built in the case dtype == built in float32 and cast ---------------------

@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("workload", ["sdxl-unet", "sdxl-vae"])
def test_tiny_diffusion_build_in_dtype_matches_fp32_then_cast(workload, dtype):
    torch.manual_seed(0)
    before = tensor_summary(fp32_then_cast(workload, "tiny", "cpu", dtype))
    torch.manual_seed(0)
    ctx = diffusion_ctx("tiny", dtype)
    model = dif.build_model(workload, ctx, dif.parse_options({}, dif.DEFAULT_RESOLUTION[workload]["tiny"]))
    after = tensor_summary(model)
    assert compare_summaries(before, after, same_device=True) == []
    assert {p.dtype for p in model.parameters()} == {dtype}
    assert after["spread"], "the tiny models have parameters large enough to compare"


@pytest.mark.parametrize("workload", sorted(dif.MODEL_CONFIGS))
def test_full_diffusion_layout_in_dtype_matches_fp32_then_cast_on_meta(workload):
    before = tensor_summary(fp32_then_cast(workload, "full", "meta", torch.float16))
    after = tensor_summary(dif.build_from_config(workload, "full", "meta", torch.float16))
    assert compare_summaries(before, after, same_device=True) == []
    assert after["buffers"] == {}  # no __init__-computed buffer a default dtype could change


# ---- llm: the device-context build == the CPU build ------------------------------------

@pytest.mark.parametrize("name", [f.name for f in llm.FAMILIES])
def test_llm_device_build_has_the_cpu_builds_layout_and_buffers(name):
    cpu = tensor_summary(tiny_llm(name, "cpu", torch.bfloat16))
    on_device = tensor_summary(tiny_llm(name, "meta", torch.bfloat16))  # the GPU's stand-in
    assert compare_summaries(cpu, on_device) == []
    # the buffers every build must compute (non-persistent, not in the state_dict) are there
    assert set(cpu["buffers"]) == set(on_device["buffers"])
    assert all("values" in b for b in cpu["buffers"].values())


def test_the_comparison_catches_what_meta_plus_to_empty_gets_wrong():
    """Option (b) of issue 25: build on meta, to_empty(), no re-init. The rotary buffers come
    back uninitialised and so do the weights; the comparison must say so."""
    torch.manual_seed(0)
    real = tiny_llm("llama-3.1-8b", "cpu")
    empty = tiny_llm("llama-3.1-8b", "meta").to_empty(device="cpu")
    with torch.no_grad():  # make "uninitialised" deterministic: zeros, as fresh pages often are
        for tensor in [*empty.parameters(), *empty.buffers()]:
            tensor.zero_()
    problems = compare_summaries(tensor_summary(real), tensor_summary(empty))
    assert any("rotary_emb.inv_freq: values differ" in p for p in problems), problems
    assert any("not the same init" in p for p in problems), problems
    # and a wrong dtype or a missing buffer is named
    half = tensor_summary(tiny_llm("llama-3.1-8b", "cpu", torch.bfloat16))
    assert any("dtype float32 != bfloat16" in p for p in compare_summaries(tensor_summary(real), half))


def test_a_nan_spread_is_not_the_same_init():
    reference = {"param_count": 1, "state": {}, "buffers": {}, "spread": {"w": {"mean": 0.0, "std": 0.02}}}
    garbage = {**reference, "spread": {"w": {"mean": float("nan"), "std": float("nan")}}}
    assert compare_summaries(reference, garbage) == ["parameter w: std nan vs 0.02 (not the same init)"]


# ---- the real CPU path, end to end -----------------------------------------------------

def test_tiny_sdxl_unet_in_bfloat16_runs_through_the_worker_built_in_dtype():
    case = Case("sdxl-unet", "unet_step", "eager", "cpu", "bfloat16", 1, "tiny")
    record = run_case({"case": case.to_dict(), "compiler": CompilerConfig("eager", backend=None).to_dict(),
                       "workload_modules": ["suites.diffusion"],
                       "policy": {"warmup": 1, "min_samples": 2, "min_time_s": 0.0, "max_time_s": 5.0}})
    assert record.status == "ok", record.error
    assert record.metrics["params"] == dif.parameter_count(dif.build_from_config("sdxl-unet", "tiny", "meta"))
    assert record.metrics["build_s"] > 0


# ---- benchmarks/gpu/build_time.py ---------------------------------------------------------

def load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_time", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_time"] = module  # its dataclass looks its module up there
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["build_time"]
    return module


def test_build_time_dry_run_compares_every_way(tmp_path, capsys):
    out = tmp_path / "build.json"
    script = load_script()
    rc = script.main(["--dry-run", "--in-process", "--ways", "cpu-reference", "cpu-copy", "device",
                      "device-fp32-cast", "--out", str(out)])
    assert rc == 0, capsys.readouterr().out
    data = json.loads(out.read_text())
    assert (data["size"], data["device"], data["failed"], data["mismatched"]) == ("tiny", "cpu", [], [])
    ways = {(r["model"], r["way"]) for r in data["results"]}
    assert ways == {("llama-3.1-8b", w) for w in ("cpu-reference", "cpu-copy", "device")} | {
        ("gemma-2b", w) for w in ("cpu-reference", "cpu-copy", "device")} | {
        ("sdxl-unet", w) for w in ("cpu-copy", "device-fp32-cast", "device")}
    by = {(r["model"], r["way"]): r for r in data["results"]}
    assert by["llama-3.1-8b", "device"]["param_count"] == llm.count_parameters(tiny_llm("llama-3.1-8b", "meta"))
    assert by["gemma-2b", "device"]["buffers"]["model.rotary_emb.inv_freq"]["values"][0] == 1.0
    assert data["checks"]["gemma-2b"]["device"] == {"against": "cpu-reference", "problems": [],
                                                    "spread_problems": [], "std_ratio_range": [1.0, 1.0],
                                                    "spread_against": "cpu-copy"}
    assert data["checks"]["sdxl-unet"]["device"]["problems"] == []
    assert "check sdxl-unet device vs cpu-copy: same layout and buffers" in capsys.readouterr().out


def test_build_time_builds_in_a_fresh_process(tmp_path):
    out = tmp_path / "one.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--models", "gemma-2b", "--ways", "device", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (result,) = json.loads(out.read_text())["results"]
    assert result["status"] == "ok" and result["process_wall_s"] > result["timings_s"]["import_torch_s"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal cannot happen")
def test_build_time_without_cuda_exits_2_naming_the_dry_run():
    refused = subprocess.run([sys.executable, str(SCRIPT), "--models", "gemma-2b"], capture_output=True, text=True,
                             cwd=ROOT, timeout=120)
    assert refused.returncode == 2
    assert "no CUDA device" in refused.stderr and "--dry-run" in refused.stderr
