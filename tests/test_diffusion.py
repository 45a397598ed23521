"""The diffusion suite: shipped configs, realistic inputs, scenarios, zero graph breaks.

Full-size models are only ever built on the meta device here (parameter counts, input
shapes); everything that runs uses the tiny SDXL-shaped UNet / VAE on CPU. Graph-break
checks use Dynamo with the `eager` backend (breaks are a Dynamo property; no Inductor
compile needed); one end-to-end test runs the tiny UNet through the real runner (the CLI)
with Inductor and fullgraph=True, in the background while the other tests run
(tests/background.py).
"""

from __future__ import annotations

import pytest
import torch

from compiler import CompilerConfig, get_compiler
from harness.measure.worker import run_case
from harness.model.scenarios import get_scenario
from harness.model.schema import Case, load_run
from harness.model.workloads import WorkloadContext, get_workload
from harness.run.runner import RunOptions, plan_cases
from suites import diffusion as dif
from suites import get_suite
from tests.background import BACKGROUND

# torch-version-sensitive: `pytest -m compat` / `tox -e compat` run these on the installed torch
pytestmark = pytest.mark.compat

SDXL_UNET_PARAMS = 2_567_463_684  # stabilityai/stable-diffusion-xl-base-1.0 unet
SD15_UNET_PARAMS = 859_520_964
SDXL_VAE_PARAMS = 83_653_863
FAST_POLICY = {"warmup": 1, "min_samples": 3, "min_time_s": 0.05, "max_time_s": 5.0}


def ctx(size: str = "tiny", device: str = "cpu", batch_size: int = 1, **options) -> WorkloadContext:
    return WorkloadContext(device=device, dtype=torch.float32, batch_size=batch_size, size=size, options=options)


# ----- shipped configs ------------------------------------------------------------------


@pytest.mark.parametrize(("workload", "size", "expected"), [
    ("sdxl-unet", "full", SDXL_UNET_PARAMS),
    ("sd15-unet", "full", SD15_UNET_PARAMS),
    ("sdxl-vae", "full", SDXL_VAE_PARAMS),
])
def test_full_configs_build_on_meta_with_published_parameter_counts(workload, size, expected):
    model = dif.build_from_config(workload, size, "meta")
    assert dif.parameter_count(model) == expected
    assert all(p.device.type == "meta" for p in model.parameters())


def test_sdxl_full_has_its_70_transformer_blocks_for_regional_compilation():
    model = dif.build_from_config("sdxl-unet", "full", "meta")
    blocks = dif.repeated_blocks(model)
    assert len(blocks) == 70  # down 2x2 + 2x10, mid 10, up 3x10 + 3x2
    assert {type(b).__name__ for b in blocks} == {"BasicTransformerBlock"}


def test_tiny_unet_is_sdxl_shaped():
    full = dif.load_config(dif.MODEL_CONFIGS["sdxl-unet"]["full"])
    tiny = dif.load_config(dif.MODEL_CONFIGS["sdxl-unet"]["tiny"])
    for key in ("down_block_types", "up_block_types"):  # the same block types, fewer levels
        assert set(tiny[key]) == set(full[key]), key
        assert tiny[key][0] == full[key][0] and tiny[key][-1] == full[key][-1], key
    for key in ("mid_block_type", "addition_embed_type", "use_linear_projection"):
        assert tiny[key] == full[key], key
    model = dif.build_from_config("sdxl-unet", "tiny", "meta")
    assert dif.parameter_count(model) < 5_000_000
    assert len(dif.repeated_blocks(model)) > 1
    # every transformer block cross-attends to the text embedding
    assert all(b.attn2 is not None for b in dif.repeated_blocks(model))


# ----- inputs and options ---------------------------------------------------------------


def test_sdxl_inputs_at_1024px_follow_the_pipeline():
    config = dif.load_config(dif.MODEL_CONFIGS["sdxl-unet"]["full"])
    opts = dif.parse_options({"resolution": 1024}, 1024)
    inputs = dif.make_unet_inputs(config, ctx("full", "meta"), opts)
    assert tuple(inputs.latents.shape) == (2, 4, 128, 128)  # CFG: 2 rows per image
    assert tuple(inputs.noise.shape) == (1, 4, 128, 128)
    assert tuple(inputs.text.shape) == (2, 77, 2048)
    assert tuple(inputs.added["text_embeds"].shape) == (2, 1280)
    assert tuple(inputs.added["time_ids"].shape) == (2, 6)
    assert inputs.timestep.dim() == 0


def test_sd15_inputs_and_cfg_off():
    config = dif.load_config(dif.MODEL_CONFIGS["sd15-unet"]["full"])
    inputs = dif.make_unet_inputs(config, ctx("full", "meta", batch_size=3), dif.parse_options({"cfg": "false"}, 512))
    assert tuple(inputs.latents.shape) == (3, 4, 64, 64)
    assert tuple(inputs.text.shape) == (3, 77, 768)
    assert inputs.added == {}


def test_sdxl_time_ids_carry_the_resolution():
    config = dif.load_config(dif.MODEL_CONFIGS["sdxl-unet"]["tiny"])
    inputs = dif.make_unet_inputs(config, ctx(), dif.parse_options({"resolution": 768}, 128))
    assert inputs.added["time_ids"][0].tolist() == [768.0, 768.0, 0.0, 0.0, 768.0, 768.0]
    assert tuple(inputs.latents.shape[-2:]) == (96, 96)


@pytest.mark.parametrize(("options", "message"), [
    ({"resolution": 1000}, "multiple of 64"),
    ({"resolution": "big"}, "positive integer"),
    ({"steps": 0}, "positive integer"),
    ({"channels_last": "maybe"}, "boolean"),
    ({"weights": "/no/such/folder"}, "not a folder"),
    ({"resolutoin": 512}, "unknown diffusion option"),
])
def test_bad_options_name_the_problem(options, message):
    with pytest.raises(dif.DiffusionOptionError, match=message):
        dif.parse_options(options, 1024)


def test_options_parse_strings_from_the_command_line():
    opts = dif.parse_options({"resolution": "512", "steps": "4", "channels_last": "true", "fused_qkv": "1"}, 1024)
    assert (opts.resolution, opts.steps, opts.channels_last, opts.fused_qkv, opts.cfg) == (512, 4, True, True, True)


def test_bad_option_becomes_a_fail_run_record():
    case = Case("sdxl-unet", "unet_step", "eager", "cpu", "float32", 1, "tiny", options=(("resolution", 500),))
    record = run_case({"case": case.to_dict(), "compiler": CompilerConfig("eager", backend=None).to_dict(),
                       "workload_modules": ["suites.diffusion"], "policy": FAST_POLICY})
    assert record.status == "fail_run"
    assert "multiple of 64" in record.error["message"]


# ----- scenarios, in process (Dynamo only) ---------------------------------------------


DYNAMO_FULLGRAPH = CompilerConfig("test-dynamo-fullgraph", backend="eager", fullgraph=True)


def prepare(workload: str, scenario: str, compiler: CompilerConfig, c: WorkloadContext):
    torch.manual_seed(0)
    wl = get_workload(workload)
    built = wl.build(c)
    return built, get_scenario(scenario)(built, wl, compiler, c)


def assert_close_and_no_breaks(prepared) -> None:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    eager = prepared.eager()
    compiled = prepared.compiled()
    assert not torch._dynamo.utils.counters["graph_break"], dict(torch._dynamo.utils.counters["graph_break"])
    eager_t = eager[0] if isinstance(eager, tuple) else eager
    compiled_t = compiled[0] if isinstance(compiled, tuple) else compiled
    assert torch.isfinite(eager_t).all()
    torch.testing.assert_close(compiled_t, eager_t, rtol=1e-4, atol=1e-4)


def test_unet_step_fullgraph_has_no_graph_break():
    built, prepared = prepare("sdxl-unet", "unet_step", DYNAMO_FULLGRAPH, ctx())
    assert_close_and_no_breaks(prepared)
    assert prepared.unit == "images"
    assert prepared.units_per_call == pytest.approx(1 / 30)  # images/s at 30 steps
    assert prepared.metrics["unet_batch"] == 2
    assert prepared.metrics["params"] == dif.parameter_count(built.model)


def test_fused_qkv_and_channels_last_keep_fullgraph_and_results():
    _, plain = prepare("sdxl-unet", "unet_step", DYNAMO_FULLGRAPH, ctx())
    reference = plain.eager()[0]
    built, prepared = prepare("sdxl-unet", "unet_step", DYNAMO_FULLGRAPH, ctx(fused_qkv=True, channels_last=True))
    assert built.model.conv_in.weight.is_contiguous(memory_format=torch.channels_last)
    processors = {type(p).__name__ for p in built.model.attn_processors.values()}
    assert processors == {"FusedAttnProcessor2_0"}
    assert_close_and_no_breaks(prepared)
    torch.testing.assert_close(prepared.eager()[0], reference, rtol=1e-4, atol=1e-4)


def test_denoise_runs_the_euler_loop_with_only_the_unet_compiled():
    built, prepared = prepare("sdxl-unet", "denoise", DYNAMO_FULLGRAPH, ctx(steps=3))
    calls = []
    unet = built.model
    handle = unet.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        assert_close_and_no_breaks(prepared)
    finally:
        handle.remove()
    assert len(calls) == 6  # 3 steps, eager and compiled: one UNet call per step
    assert prepared.units_per_call == 1.0
    out = prepared.eager()
    assert tuple(out.shape) == (1, 4, 16, 16)  # latents of one image, CFG rows folded back


def test_vae_decode_produces_an_image():
    _, prepared = prepare("sdxl-vae", "vae_decode", DYNAMO_FULLGRAPH, ctx(resolution=64))
    assert_close_and_no_breaks(prepared)
    assert tuple(prepared.eager().shape) == (1, 3, 64, 64)


def test_regional_compilation_compiles_the_transformer_blocks_and_eager_stays_eager():
    """Regional configs compile blocks of the very module the eager variant also calls."""
    regional = CompilerConfig("test-dynamo-regional", backend="eager", fullgraph=True, regional=True)
    built, prepared = prepare("sdxl-unet", "unet_step", regional, ctx())
    regions = built.model._compilebench_regions
    assert len(regions["blocks"]) == len(dif.repeated_blocks(built.model)) == prepared.metrics["repeated_blocks"] == 8
    assert regions["source"] == "_repeated_blocks"
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    eager = prepared.eager()[0]
    assert not torch._dynamo.utils.counters["stats"]["calls_captured"]  # force_eager held
    assert_close_and_no_breaks(prepared)
    assert torch._dynamo.utils.counters["stats"]["calls_captured"]  # the compiled variant did compile
    torch.testing.assert_close(prepared.compiled()[0], eager, rtol=1e-4, atol=1e-4)


def test_train_step_on_the_tiny_unet():
    """The generic train scenario takes the UNet's Built as is (compiled train steps are
    the compiler matrix's business; tracing AdamW here would cost minutes)."""
    c = ctx(cfg=False)
    built, prepared = prepare("sdxl-unet", "train", CompilerConfig("eager", backend=None), c)
    assert built.args[0].shape[0] == 1  # no CFG rows when training
    before = built.model.conv_in.weight.detach().clone()
    loss = prepared.eager()
    assert loss.dim() == 0 and torch.isfinite(loss)
    grads = prepared.accuracy_view("eager", loss)[1]
    assert len(grads) == len(list(built.model.parameters()))
    assert not torch.equal(before, built.model.conv_in.weight)  # the optimizer stepped


# ----- suites ---------------------------------------------------------------------------


def test_smoke_has_the_tiny_unet_on_cpu():
    entries = [e for e in get_suite("smoke").entries if "sdxl-unet" in e.workloads]
    assert len(entries) == 1
    assert entries[0].sizes == ("tiny",) and entries[0].devices == ("cpu",)


def test_diffusion_suite_plans_full_size_fp16_cuda_cases():
    cases, _ = plan_cases(RunOptions(suite="diffusion"))
    step = [c for c in cases if c.workload == "sdxl-unet" and c.scenario == "unet_step"]
    assert step and all(c.device == "cuda" and c.dtype == "float16" and c.size == "full" for c in step)
    assert all(dict(c.options)["resolution"] == 1024 for c in step)
    assert {c.scenario for c in cases} == {"unet_step", "denoise", "vae_decode", "train"}
    assert all(c.dtype == "bfloat16" for c in cases if c.scenario == "train")


# ----- end to end through the real runner (Inductor) -----------------------------------


@pytest.fixture(scope="module")
def tiny_unet_run():
    """`compilebench run` of the tiny UNet's unet_step with inductor-fullgraph (FAST_POLICY's
    warmup and sample counts): started when collection ends, its test last
    (tests/background.py), so the compile overlaps the other tests. The run's one record."""
    proc = BACKGROUND["tiny_unet_run"].wait()
    runs = list((BACKGROUND["tiny_unet_run"].out / "results" / "runs").glob("*.json"))
    assert proc.returncode in (0, 1) and len(runs) == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
    (record,) = load_run(runs[0]).records
    policy = {key: FAST_POLICY[key] for key in ("warmup", "min_samples", "min_time_s")}  # the CLI flags gave it
    assert {key: record.metrics["policy"][key] for key in policy} == policy, record.metrics["policy"]
    return record


def test_tiny_unet_through_the_runner_fullgraph_inductor(tiny_unet_run):
    """One real cold Inductor compile of the tiny UNet: ok record, zero graph breaks with
    fullgraph=True, accuracy within the fp32 tolerance."""
    record = tiny_unet_run
    assert record.case.compiler == "inductor-fullgraph" and get_compiler("inductor-fullgraph").fullgraph
    assert record.status == "ok", (record.error, record.logs.get("stderr", "")[-2000:])
    assert record.metrics["graph_breaks"] == 0
    assert record.metrics["accuracy"]["status"] == "pass"
    assert record.metrics["compile_time_s"] > 0
    assert record.metrics["throughput_unit"] == "images/s"
    assert record.metrics["params"] == dif.parameter_count(dif.build_from_config("sdxl-unet", "tiny", "meta"))
