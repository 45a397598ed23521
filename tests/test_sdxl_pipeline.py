"""The SDXL text-to-image pipeline workload (suites/sdxl_pipeline.py), its ladder suite and
table, and the recipe compiler configs, on CPU at tiny size: seconds each, except the two
`slow` tests on one eager and one fullgraph-traced pipeline call (~50 s of setup on a loaded
2-core box)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from compiler import CompilerConfig, get_compiler  # noqa: E402
from harness.model.scenarios import get_scenario  # noqa: E402
from harness.model.workloads import WorkloadContext, get_workload  # noqa: E402
from suites import get_suite  # noqa: E402
from suites import sdxl_pipeline as sp  # noqa: E402
from suites.diffusion import DiffusionOptionError  # noqa: E402


def tiny_ctx(**options: object) -> WorkloadContext:
    return WorkloadContext(device="cpu", dtype=torch.float32, batch_size=1, size="tiny",
                           options={"steps": 2, **options})


@pytest.mark.parametrize(("filename", "params"), [
    ("sdxl_text_encoder.json", 123_060_480),  # CLIP ViT-L/14 text tower
    ("sdxl_text_encoder_2.json", 694_659_840),  # OpenCLIP ViT-bigG/14 text tower + projection
])
def test_full_text_encoders_have_the_published_sizes(filename: str, params: int) -> None:
    model = sp.build_text_encoder(filename, "meta", torch.float16)
    assert sum(p.numel() for p in model.parameters()) == params


def test_prompt_ids_look_like_a_tokenized_prompt() -> None:
    torch.manual_seed(3)
    ids = sp.prompt_ids(2, "cpu")
    assert ids.shape == (2, 77)
    assert (ids[:, 0] == sp.BOS_ID).all()
    # CLIP pools at argmax(ids): the first EOS, right after the words
    assert (ids.argmax(-1) == 1 + sp.PROMPT_WORDS).all()
    torch.manual_seed(3)
    assert torch.equal(ids, sp.prompt_ids(2, "cpu"))


def test_options_are_validated_with_the_fix() -> None:
    assert sp.parse_pipeline_options({}, "full").diffusion.resolution == 1024
    with pytest.raises(DiffusionOptionError, match="attention"):
        sp.parse_pipeline_options({"attention": "flash"}, "tiny")
    with pytest.raises(DiffusionOptionError, match="fused"):
        sp.parse_pipeline_options({"attention": "vanilla", "fused_qkv": "true"}, "tiny")
    with pytest.raises(DiffusionOptionError, match="guidance"):
        sp.parse_pipeline_options({"cfg": "false"}, "tiny")


def test_phase_summary_reads_the_marks() -> None:
    # start, encoded, 3 steps, decoded
    runs = [[0.0, 0.1, 0.5, 0.7, 0.9, 1.2]] * 3
    summary = sp.phase_summary(runs, steps=3)
    assert summary["text_encode_s"] == pytest.approx(0.1)
    assert summary["denoise_s"] == pytest.approx(0.8)
    assert summary["denoise_step_s"] == pytest.approx(0.2)
    assert summary["vae_decode_s"] == pytest.approx(0.3)
    assert sp.phase_summary([[0.0, 1.0]], steps=3) == {}
    assert sp.cumulative([0.1, 0.4, 0.2]) == pytest.approx([0.0, 0.1, 0.5, 0.7])


@pytest.fixture(scope="module")
def tiny_run() -> dict:
    """One eager and one Dynamo-traced (fullgraph, eager kernels) pipeline, 2 steps, 64 px,
    one call each. The scenario's clocks are built with no warm-up calls: the phase marks
    come from that one call, where the scenario would drop the first WARMUP_CALLS (compile,
    CUDA-graph recording) and need 6 pipeline calls here. Those 4 extra calls cost ~45 of
    ~135 s on a loaded 2-core box and checked nothing the single call does not."""
    torch.manual_seed(0)
    ctx = tiny_ctx()
    wl = get_workload("sdxl-pipeline")
    built = wl.build(ctx)
    compiler = CompilerConfig("dynamo-fullgraph", backend="eager", fullgraph=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sp, "WARMUP_CALLS", 0)  # read when the scenario makes its clocks
        prepared = get_scenario("text2image")(built, wl, compiler, ctx)
    outs = {"eager": prepared.eager(), "compiled": prepared.compiled()}
    return {"built": built, "prepared": prepared, "outs": outs}


@pytest.mark.slow
def test_tiny_pipeline_makes_an_image_and_phases(tiny_run: dict) -> None:
    image = tiny_run["outs"]["eager"]["image"]
    assert image.shape == (1, 3, 64, 64)
    assert torch.isfinite(image).all()
    metrics = dict(tiny_run["prepared"].metrics)
    assert metrics["attention"] == "sdpa" and metrics["denoise_steps"] == 2
    assert metrics["compile_cache"] in ("cold", "warm")
    for prefix in ("", "eager_"):
        assert metrics[f"{prefix}vae_decode_s"] > 0 and metrics[f"{prefix}text_encode_s"] > 0


@pytest.mark.slow
def test_compiled_unet_and_decode_trace_without_graph_breaks(tiny_run: dict) -> None:
    # fullgraph=True: a graph break in the UNet or vae.decode would have raised
    outcome = tiny_run["prepared"].compare(tiny_run["outs"]["eager"], tiny_run["outs"]["compiled"], "float32")
    assert outcome["status"] == "pass", outcome
    assert outcome["image_cosine"] > 0.999


def test_vanilla_attention_swaps_the_processors() -> None:
    torch.manual_seed(0)
    pipe = get_workload("sdxl-pipeline").build(tiny_ctx(attention="vanilla")).extras["pipeline"]
    names = {type(p).__name__ for p in pipe.unet.attn_processors.values()}
    assert names == {"AttnProcessor"}


def test_ladder_suite_has_the_six_rungs_in_order() -> None:
    suite = get_suite("sdxl-ladder")
    got = [(e.compilers[0], e.dtypes[0]) for e in suite.entries]
    assert got == [("eager", "float32"), ("eager", "bfloat16"), ("eager", "bfloat16"), ("inductor", "bfloat16"),
                   ("sdxl-max-autotune", "bfloat16"), ("sdxl-max-autotune-cudagraphs", "bfloat16")]
    for entry in suite.entries:
        get_compiler(entry.compilers[0])


def test_recipe_configs_carry_their_flags() -> None:
    sdxl = get_compiler("sdxl-max-autotune-cudagraphs").compile_kwargs()["options"]
    assert sdxl["max_autotune"] and sdxl["triton.cudagraphs"] and sdxl["conv_1x1_as_mm"]
    assert sdxl["max_autotune_conv_backends"] == "ATEN" and sdxl["coordinate_descent_tuning"] is False
    gpt = get_compiler("gpt-fast-max-autotune")
    assert gpt.fullgraph and gpt.compile_kwargs()["options"]["coordinate_descent_tuning"] is True
    assert get_compiler("gpt-fast").mode == "reduce-overhead"
    assert "cudagraphs" not in json.dumps(get_compiler("sdxl-max-autotune").compile_kwargs()["options"])


def test_shared_cache_env_replaces_the_fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from harness.run.runner import SHARED_CACHE_ENV, worker_env

    monkeypatch.delenv(SHARED_CACHE_ENV, raising=False)
    assert worker_env(tmp_path / "fresh")["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "fresh")
    monkeypatch.setenv(SHARED_CACHE_ENV, str(tmp_path / "shared"))
    assert worker_env(tmp_path / "fresh")["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "shared")
    monkeypatch.delenv(SHARED_CACHE_ENV)
    assert sp.compile_cache_state() == {"compile_cache": "cold"}
    monkeypatch.setenv(SHARED_CACHE_ENV, str(tmp_path))
    assert sp.compile_cache_state()["compile_cache"] == "cold"
    (tmp_path / "fxgraph" / "ab").mkdir(parents=True)
    state = sp.compile_cache_state()
    assert state["compile_cache"] == "warm" and state["compile_cache_entries_at_start"]["fxgraph"] == 1
