"""The `dynamo` accuracy rule (HUD's): float64 reference, RMSE test, per-runner tolerances.

Synthetic tensors pin what the rule decides; a tiny hf model and a tiny timm-like conv net
run through the worker show the record's fields.
"""

from __future__ import annotations

import pytest
import torch

from harness.model import accuracy as acc
from harness.model.accuracy import AccuracyRule, compare_dynamo, compare_outputs, judge_dynamo_output

HF_RULE = AccuracyRule("dynamo", runner="huggingface", model="BertForMaskedLM")
TIMM_RULE = AccuracyRule("dynamo", runner="timm_models", model="convnext_base")


def noisy(base: torch.Tensor, scale: float, seed: int) -> torch.Tensor:
    """`base` (float64) in float32 plus seeded noise of `scale`: an implementation's output."""
    g = torch.Generator().manual_seed(seed)
    return (base + scale * torch.randn(base.shape, generator=g, dtype=torch.float64)).float()


def fp64_case(numel: int = 4096, eager_noise: float = 1e-2, compiled_noise: float = 1.5e-2):
    """A float64 truth, an eager output with its own float32 error and a compiled output with
    another: errors well above the allclose tolerance, as a long reduction gives."""
    truth = torch.randn(numel, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 10
    return truth, noisy(truth, eager_noise, 1), noisy(truth, compiled_noise, 2)


# ---- the rule on synthetic tensors ---------------------------------------------------------

def test_a_result_within_the_strict_tolerance_passes_by_allclose_and_keeps_the_strict_figures():
    truth, eager, _ = fp64_case()
    compiled = eager + 5e-5  # inside rtol=1e-3/atol=1e-4
    strict = compare_outputs(eager, compiled, "float32")
    hud = compare_dynamo(eager, compiled, "float32", HF_RULE, fp64_ref=truth)
    assert strict["status"] == "pass" and hud["status"] == "pass"
    assert hud["decided_by"] == "allclose" and hud["rule"] == "dynamo" and hud["fp64_used"] is True
    assert hud["tol"] == 1e-3
    assert hud["max_abs_err"] == pytest.approx(strict["max_abs_err"], rel=1e-3)
    assert "res_rmse" not in hud  # the RMSE test never ran
    assert hud["cosine"] == 1.0  # every output close: no cosine figure of noise


def test_a_near_zero_gradient_that_is_close_does_not_drag_the_cosine_figure():
    eager = [torch.randn(64), torch.full((64,), 1e-9)]
    compiled = [eager[0].clone(), torch.full((64,), -1e-9)]  # close at tol, opposite direction
    hud = compare_dynamo(eager, compiled, "float32", HF_RULE, fp64_ref=[t.double() for t in eager])
    assert hud["status"] == "pass" and hud["cosine"] == 1.0


def test_hud_allclose_is_never_stricter_than_the_strict_rule_in_float32():
    # strict is |a-b| <= 1e-4 + 1e-3|a|; HUD's first test |a-b| <= 1e-3 + 1e-3|b|: a strict pass is a HUD pass
    g = torch.Generator().manual_seed(3)
    for _ in range(50):
        eager = torch.randn(256, generator=g) * float(torch.rand(1, generator=g) * 100)
        compiled = eager * (1 + 9e-4 * (torch.rand(256, generator=g) - 0.5)) + 9e-5 * torch.randn(256, generator=g)
        if compare_outputs(eager, compiled, "float32")["status"] == "pass":
            assert compare_dynamo(eager, compiled, "float32", HF_RULE, fp64_ref=eager.double())["status"] == "pass"


def test_fails_strict_yet_passes_the_rmse_test():
    truth, eager, compiled = fp64_case()
    assert compare_outputs(eager, compiled, "float32")["status"] == "fail"
    hud = compare_dynamo(eager, compiled, "float32", HF_RULE, fp64_ref=truth)
    assert hud["status"] == "pass", hud
    assert hud["decided_by"] == "rmse" and hud["rmse_multiplier"] == 2.0
    assert hud["res_rmse"] == pytest.approx(1.5e-2, rel=0.1) and hud["ref_rmse"] == pytest.approx(1e-2, rel=0.1)


def test_compiled_error_past_twice_eagers_fails_the_rmse_test_with_the_figures():
    truth, eager, compiled = fp64_case(compiled_noise=3e-2)
    hud = compare_dynamo(eager, compiled, "float32", HF_RULE, fp64_ref=truth)
    assert hud["status"] == "fail" and hud["decided_by"] == "rmse"
    assert "RMSE vs fp64" in hud["reason"] and hud["res_rmse"] > 2 * hud["ref_rmse"]


def test_the_multiplier_is_three_under_1000_elements_and_eight_or_ten_for_listed_models():
    half = dict(half=False)
    assert acc.rmse_multiplier(4096, (4096,), 1e-3, larger_for_small=False, **half) == 2.0
    assert acc.rmse_multiplier(999, (999,), 1e-3, larger_for_small=False, **half) == 3.0
    assert acc.rmse_multiplier(4096, (2, 2048, 1, 1), 1e-3, larger_for_small=False, **half) == 3.0
    assert acc.rmse_multiplier(4096, (4096,), 2e-2, larger_for_small=False, **half) == 3.0  # a raised tolerance
    assert acc.rmse_multiplier(4096, (4096,), 1e-3, half=True, larger_for_small=False) == 3.0
    assert acc.rmse_multiplier(10, (10,), 1e-3, larger_for_small=True, **half) == 10.0
    assert acc.rmse_multiplier(500, (500,), 1e-3, larger_for_small=True, **half) == 8.0
    # 2.5x eager's error on 800 elements: a pass (multiplier 3), the same ratio on 4096 a fail
    for numel, status in ((800, "pass"), (4096, "fail")):
        truth, eager, compiled = fp64_case(numel=numel, compiled_noise=2.5e-2)
        assert compare_dynamo(eager, compiled, "float32", TIMM_RULE, fp64_ref=truth)["status"] == status


def test_nan_in_the_compiled_output_fails_in_float32():
    truth, eager, compiled = fp64_case()
    compiled[7] = float("nan")
    hud = compare_dynamo(eager, compiled, "float32", HF_RULE, fp64_ref=truth)
    assert hud["status"] == "fail" and hud["decided_by"] == "rmse"


def test_nan_only_in_eager_passes_when_compiled_matches_the_fp64_reference():
    truth, eager, _ = fp64_case()
    compiled = truth.float()
    eager[3] = float("nan")
    hud = compare_dynamo(eager, compiled, "float32", HF_RULE, fp64_ref=truth)
    assert hud["status"] == "pass" and hud["decided_by"] == "nan_corner"


def test_nan_on_both_sides_passes_only_outside_float32():
    truth, eager, compiled = fp64_case()
    eager[3] = compiled[3] = float("nan")
    v32 = judge_dynamo_output(eager, compiled, truth, 1e-3, cosine=False, equal_nan=False, larger_for_small=False)
    v16 = judge_dynamo_output(eager, compiled, truth, 1e-3, cosine=False, equal_nan=True, larger_for_small=False)
    assert not v32.passed and v16.passed


def test_without_a_float64_reference_cosine_decides_and_the_record_says_why():
    # adv_inception_v3 on the H200: max_abs_err 1e9 with cosine 1.0 (huge logits): strict fails, HUD passes
    eager = torch.randn(2, 1000, generator=torch.Generator().manual_seed(0)) * 1e12
    compiled = eager.clone()
    compiled[0, :3] += 1e10  # three elements off by 1% of the scale: elementwise fails, the direction holds
    assert compare_outputs(eager, compiled, "float32")["status"] == "fail"
    hud = compare_dynamo(eager, compiled, "float32", TIMM_RULE, fp64_note="float64 run failed: boom")
    assert hud["status"] == "pass" and hud["decided_by"] == "cosine" and hud["test"] == "allclose+cosine"
    assert hud["fp64_used"] is False and hud["fp64_fallback"] == "float64 run failed: boom"
    unrelated = torch.randn(2, 1000, generator=torch.Generator().manual_seed(1)) * 1e12
    bad = compare_dynamo(eager, unrelated, "float32", TIMM_RULE)
    assert bad["status"] == "fail" and bad["decided_by"] == "cosine" and "cosine similarity" in bad["reason"]


def test_tolerances_follow_the_runners_tables():
    hf, timm = acc.HUD_RUNNERS["huggingface"], acc.HUD_RUNNERS["timm_models"]
    assert hf.tolerance("GPTNeoForCausalLM", False, "cuda") == 1e-3
    assert hf.tolerance("GPT2ForSequenceClassification", False, "cuda") == 4e-3
    assert hf.tolerance("GPT2ForSequenceClassification", False, "cpu") == 5e-3
    assert hf.tolerance("MT5ForConditionalGeneration", True, "cuda") == 2e-2
    assert hf.tolerance("AlbertForMaskedLM", True, "cuda") == 1e-2
    assert timm.tolerance("convnext_base", False, "cuda") == 1e-3
    assert timm.tolerance("beit_base_patch16_224", True, "cuda") == 0.16
    assert timm.tolerance("vit_base_patch16_siglip_256", True, "cuda") == 0.08
    assert timm.tolerance("inception_v3", True, "cuda") == 0.04
    assert timm.tolerance("convnext_base", True, "cuda") == 1e-2


def test_a_question_answering_output_is_judged_on_its_loss():
    from transformers.modeling_outputs import QuestionAnsweringModelOutput

    def qa(loss: float, logits: torch.Tensor) -> QuestionAnsweringModelOutput:
        return QuestionAnsweringModelOutput(loss=torch.tensor(loss), start_logits=logits, end_logits=logits)

    rule = AccuracyRule("dynamo", runner="huggingface", model="GPTJForQuestionAnswering")
    hud = compare_dynamo(qa(1.0, torch.zeros(4)), qa(1.0, torch.ones(4)), "float32", rule)
    assert hud["status"] == "pass"


def test_an_unknown_rule_or_runner_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="use one of strict, dynamo"):
        AccuracyRule("loose")
    with pytest.raises(ValueError, match="huggingface, timm_models"):
        AccuracyRule("dynamo", runner="torchbench")


# ---- the float64 reference ----------------------------------------------------------------

def tiny_built():
    from harness.model.workloads import Built, Workload, WorkloadContext

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.Linear(32, 4))
    built = Built(model=model, args=(torch.randn(8, 16),))
    wl = Workload(name="t", factory=lambda ctx: built)
    return built, wl, WorkloadContext(device="cpu", dtype=torch.float32, batch_size=8)


def test_the_fp64_reference_is_the_models_float64_run_and_leaves_the_model_alone():
    from harness.model.scenarios import get_scenario

    built, wl, ctx = tiny_built()
    before = [p.detach().clone() for p in built.model.parameters()]
    ref = acc.fp64_reference(built, wl, get_scenario("forward"), ctx, "forward")
    assert ref.used and ref.note == "" and ref.outputs[0].dtype == torch.float64
    assert ref.bytes_needed == 2 * acc.float_param_bytes(built.model) and ref.bytes_free > 0
    exact = built.model.double().eval()(built.args[0].double())
    assert torch.equal(ref.outputs[0], exact.detach())
    assert all(torch.equal(a.double(), b) for a, b in zip(before, built.model.parameters(), strict=True))


def test_the_train_reference_is_the_loss_and_gradients_of_one_float64_step():
    from harness.model.scenarios import get_scenario

    built, wl, ctx = tiny_built()
    ref = acc.fp64_reference(built, wl, get_scenario("train"), ctx, "train")
    params = list(built.model.parameters())
    assert ref.used and len(ref.outputs) == 1 + len(params)  # loss, then one gradient per parameter
    assert all(t.dtype == torch.float64 for t in ref.outputs)
    assert ref.bytes_needed == 10 * acc.float_param_bytes(built.model)
    assert all(p.grad is None for p in params)  # the copy was stepped, not the model


def test_a_copy_that_would_not_fit_is_never_made():
    from harness.model.scenarios import get_scenario

    built, wl, ctx = tiny_built()
    calls = []
    ref = acc.fp64_reference(built, wl, lambda *a: calls.append(a) or get_scenario("forward")(*a), ctx, "forward",
                             free_bytes=acc.float_param_bytes(built.model))
    assert not ref.used and not calls
    assert ref.note.startswith("float64 copy skipped: needs ~") and "GiB free on cpu" in ref.note


def test_a_float64_run_that_fails_becomes_the_note():
    from harness.model.workloads import Built, Workload, WorkloadContext

    class Fp32Only(torch.nn.Module):
        def forward(self, x):
            if x.dtype == torch.float64:
                raise RuntimeError("expected scalar type Float but found Double")
            return x * 2

    built = Built(model=Fp32Only(), args=(torch.randn(3),))
    from harness.model.scenarios import get_scenario

    ref = acc.fp64_reference(built, Workload("f", lambda c: built), get_scenario("forward"),
                             WorkloadContext(device="cpu", dtype=torch.float32, batch_size=1), "forward")
    assert not ref.used and ref.note == "float64 run failed: RuntimeError: expected scalar type Float but found Double"


def test_the_cpu_free_memory_respects_the_address_space_cap():
    import resource

    free = acc.free_memory_bytes("cpu")
    assert free is not None and free > 0
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        assert free <= soft


RLIMIT_PROBE = """
import resource, torch
from harness.model import accuracy as acc
from harness.model.scenarios import get_scenario
from harness.model.workloads import Built, Workload, WorkloadContext
model = torch.nn.Linear(4096, 8192)  # 128 MiB float32: the float64 copy needs 256 MiB
built = Built(model=model, args=(torch.randn(4, 4096),))
wl = Workload("big", lambda c: built)
ctx = WorkloadContext(device="cpu", dtype=torch.float32, batch_size=4)
vm = acc.proc_bytes("/proc/self/status", "VmSize")
resource.setrlimit(resource.RLIMIT_AS, (vm + (200 << 20), resource.RLIM_INFINITY))  # 200 MiB of room
measured = acc.fp64_reference(built, wl, get_scenario("forward"), ctx, "forward")
print("MEASURED", measured.used, measured.note)
forced = acc.fp64_reference(built, wl, get_scenario("forward"), ctx, "forward", free_bytes=None)
print("FORCED", forced.used, forced.note)
print("EAGER", tuple(model(built.args[0]).shape))
"""


def test_under_a_real_memory_cap_the_copy_is_skipped_and_a_forced_one_fails_into_the_note():
    import os
    import subprocess
    import sys

    if acc.proc_bytes("/proc/self/status", "VmSize") is None:
        pytest.skip("needs /proc (Linux)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", RLIMIT_PROBE], capture_output=True, text=True, timeout=120,
                         env=env, check=True).stdout
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    assert lines["MEASURED"].startswith("False float64 copy skipped: needs ~0.25 GiB (forward), 0.20 GiB free")
    # without the estimate the copy is attempted, and the allocator's failure is caught, not an OOM kill
    assert lines["FORCED"].startswith("False float64 run failed: RuntimeError:") and "allocate" in lines["FORCED"]
    assert lines["EAGER"] == "(4, 8192)"  # the float32 model still runs in the room left


def test_hf_and_timm_workloads_declare_the_dynamo_rule_and_others_stay_strict():
    import suites.hf  # noqa: F401
    import suites.mlp  # noqa: F401
    import suites.timm_models  # noqa: F401

    assert acc.accuracy_rule_for("hf-GPTNeoForCausalLM") == AccuracyRule("dynamo", "huggingface", "GPTNeoForCausalLM")
    assert acc.accuracy_rule_for("hf-gpt-oss-20b").model == "openai/gpt-oss-20b"
    assert acc.accuracy_rule_for("timm-adv_inception_v3") == AccuracyRule("dynamo", "timm_models", "adv_inception_v3")
    assert acc.accuracy_rule_for("mlp-classic").name == "strict"


# ---- through the worker, on CPU ------------------------------------------------------------

FAST_POLICY = {"min_time_s": 0.0, "min_samples": 1, "max_samples": 2, "warmup": 0, "max_time_s": 1.0}
TIMMLIKE = """
import torch
from harness import workload
from harness.model.accuracy import AccuracyRule, declare_accuracy


@workload("timmlike-convnet", scenarios=("forward", "train"))
def build(ctx):
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10)).to(ctx.device, ctx.dtype)
    return model.eval(), (torch.randn(ctx.batch_size, 3, 16, 16, device=ctx.device, dtype=ctx.dtype),)


declare_accuracy("timmlike-convnet", AccuracyRule("dynamo", runner="timm_models", model="timmlike-convnet"))
"""


def worker_record(workload: str, scenario: str = "forward", compiler: str = "aot_eager", suite: str = "test", **spec):
    from compiler import get_compiler
    from harness.measure.worker import run_case

    case = {"workload": workload, "scenario": scenario, "compiler": compiler, "device": "cpu", "dtype": "float32",
            "batch_size": 2, "size": "tiny", "suite": suite, "options": []}
    return run_case({"case": case, "compiler": get_compiler(compiler).to_dict(), "policy": FAST_POLICY,
                     "seed": 0, **spec})


def assert_dynamo_record(record, runner: str, model: str) -> dict:
    assert record.status == "ok", (record.status, record.error)
    a = record.metrics["accuracy"]
    assert a["status"] == "pass" and a["rule"] == "dynamo" and (a["hud_runner"], a["hud_model"]) == (runner, model)
    assert a["fp64_used"] is True and a["test"] == "allclose+rmse" and a["decided_by"] in ("allclose", "rmse")
    assert {"max_abs_err", "max_rel_err", "cosine", "tol", "fp64_bytes_needed", "fp64_bytes_free"} <= set(a)
    assert a["fp64_bytes_needed"] > 0 and record.metrics["phase_s"]["fp64_reference"] > 0
    return a


def test_a_tiny_hf_model_through_the_worker_records_the_dynamo_verdict():
    record = worker_record("hf-BertForMaskedLM", workload_modules=["suites.hf"])
    a = assert_dynamo_record(record, "huggingface", "BertForMaskedLM")
    assert a["tol"] == 1e-3


def test_a_tiny_timm_like_model_through_the_worker_forward_and_train(tmp_path):
    path = tmp_path / "timmlike.py"
    path.write_text(TIMMLIKE)
    fwd = worker_record("timmlike-convnet", workload_files=[str(path)])
    assert assert_dynamo_record(fwd, "timm_models", "timmlike-convnet")["tol"] == 1e-3
    train = worker_record("timmlike-convnet", scenario="train", workload_files=[str(path)])
    assert assert_dynamo_record(train, "timm_models", "timmlike-convnet")["tol"] == 1e-2


def test_a_tiny_timm_model_through_the_worker():
    import suites.timm_models as tm

    try:
        tm.import_timm()
    except tm.TimmUnavailable as exc:  # /work/venv: timm without torchvision; /work/venv-vision has both
        pytest.skip(f"needs timm (the vision extra): {exc}")
    record = worker_record("timm-lcnet_050", workload_modules=["suites.timm_models"])
    assert_dynamo_record(record, "timm_models", "lcnet_050")


def test_a_model_whose_copy_does_not_fit_falls_back_to_cosine_without_running_it(monkeypatch, tmp_path):
    path = tmp_path / "timmlike.py"
    path.write_text(TIMMLIKE)
    # a fake free-memory figure (as a device would report it): the copy needs more than it
    monkeypatch.setattr(acc, "free_memory_bytes", lambda device: 1024)
    record = worker_record("timmlike-convnet", workload_files=[str(path)])
    assert record.status == "ok", record.error
    a = record.metrics["accuracy"]
    assert a["fp64_used"] is False and a["test"] == "allclose+cosine" and a["status"] == "pass"
    assert a["fp64_fallback"].startswith("float64 copy skipped") and a["fp64_bytes_free"] == 1024


def test_a_strict_workload_gets_no_fp64_phase():
    record = worker_record("mlp-classic", workload_modules=["suites.mlp"])
    assert record.status == "ok" and "rule" not in record.metrics["accuracy"]
    assert "fp64_reference" not in record.metrics["phase_s"]


def test_a_suite_can_judge_its_cases_strictly_whatever_its_workloads_declare(monkeypatch, tmp_path):
    import suites
    from suites import Suite, SuiteEntry, register_suite

    monkeypatch.setattr(acc, "SUITE_ACCURACY", {})
    monkeypatch.setattr(suites, "SUITES", dict(suites.SUITES))
    register_suite(Suite("strict-subset", "test", entries=(SuiteEntry(workloads=("timmlike-convnet",)),),
                         accuracy="strict"))
    assert acc.accuracy_rule_for("hf-BertForMaskedLM", "strict-subset").name == "strict"
    assert acc.accuracy_rule_for("hf-BertForMaskedLM", "hf-tiny").name == "dynamo"
    path = tmp_path / "timmlike.py"
    path.write_text(TIMMLIKE)
    record = worker_record("timmlike-convnet", suite="strict-subset", workload_files=[str(path)])
    assert record.status == "ok" and "rule" not in record.metrics["accuracy"]
    assert "fp64_reference" not in record.metrics["phase_s"]
    with pytest.raises(ValueError, match="accuracy='dynamo' is not a suite-level choice; use 'strict'"):
        register_suite(Suite("dynamo-suite", "test", accuracy="dynamo"))
