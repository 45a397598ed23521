"""The `timm` suite: both TIMM dashboard lists, their batch sizes, and the skip without timm.

The list and registry tests run everywhere; the ones that build models need timm (the
`vision` extra) and skip with the reason where it is missing or cannot be imported.
"""

from __future__ import annotations

import sys

import pytest

from suites import get_suite
from suites import timm_models as tm

torch = pytest.importorskip("torch")


def usable_timm():
    try:
        return tm.import_timm()
    except tm.TimmUnavailable as exc:
        pytest.skip(f"needs timm (the vision extra): {exc}")


def by_name(name: str) -> tm.TimmModel:
    return next(m for m in tm.TIMM_MODELS if m.name == name)


def test_the_two_lists_and_their_union():
    assert len(tm.TIMM_2_11) == 18 and len(tm.TIMM_PRE_TRIM) == 61
    assert len(tm.TIMM_MODELS) == 65 and len({m.workload for m in tm.TIMM_MODELS}) == 65
    only_new = {m.name for m in tm.TIMM_MODELS if m.lists == (tm.LIST_2_11,)}
    assert only_new == {"convnextv2_nano.fcmae_ft_in22k_in1k", "deit_tiny_patch16_224.fb_in1k",
                        "vit_base_patch14_dinov2.lvd142m", "vit_base_patch16_siglip_256"}
    assert sum(len(m.lists) == 2 for m in tm.TIMM_MODELS) == 14


@pytest.mark.parametrize("name, batch", [
    ("ghostnet_100", 512),  # 512 on the 2.11 list (128 before the trim): the 2.11 batch wins
    ("beit_base_patch16_224", 64),  # 128 over the runner's divisor 2
    ("xcit_large_24_p8_224", 23),
    ("cait_m36_384", 8),
    ("resnest101e", 128),
])
def test_batch_sizes(name, batch):
    from harness.model.workloads import get_workload

    assert by_name(name).batch == batch
    assert get_workload(f"timm-{name}").batch_size == batch


def test_each_workload_names_its_lists():
    from harness.model.workloads import get_workload

    both = get_workload("timm-inception_v3").description
    assert "@ 2.11" in both and "@ pre-2025-10" in both
    assert "@ 2.11" not in get_workload("timm-dpn107").description


def test_suites():
    assert len(get_suite("timm").entries[0].workloads) == 65
    assert len(get_suite("timm-2.11").entries[0].workloads) == 18
    tiny = get_suite("timm-tiny").entries[0]
    assert tiny.devices == ("cpu",) and tiny.sizes == ("tiny",) and tiny.batch_sizes == (tm.TINY_BATCH,)


def test_runner_images_are_normalised_integers():
    images = tm.runner_images(2, (3, 8, 8), "cpu", torch.float32)
    assert images.shape == (2, 3, 8, 8)
    assert abs(float(images.mean())) < 1e-5 and float(images.std()) == pytest.approx(1.0, rel=1e-4)


def test_train_loss_reduces_the_first_output():
    logits = torch.arange(6.0).reshape(2, 3)
    assert float(tm.mean_logits_loss((logits, logits * 100))) == pytest.approx(2.5)


def test_without_timm_the_case_is_skipped_with_the_reason(monkeypatch):
    from harness import WorkloadContext
    from harness.measure.worker import classify_exception, exception_info
    from harness.model.workloads import get_workload

    monkeypatch.setitem(sys.modules, "timm", None)  # import timm -> ModuleNotFoundError
    ctx = WorkloadContext(device="cpu", dtype=torch.float32, batch_size=2, size="tiny")
    with pytest.raises(tm.TimmUnavailable, match="vision extra") as info:
        get_workload("timm-mobilenetv2_100").build(ctx)
    assert classify_exception(info.value, "build") == "skipped"
    assert "compilebench[vision]" in exception_info(info.value, "build").message


@pytest.mark.parametrize("name, side", [("mobilenetv2_100", 64), ("vit_base_patch16_224", 64),
                                        ("inception_v3", 96), ("deit_base_distilled_patch16_224", 64)])
def test_tiny_models_build_and_step(name, side):
    usable_timm()
    from harness import WorkloadContext
    from harness.model.workloads import get_workload

    wl = get_workload(f"timm-{name}")
    built = wl.build(WorkloadContext(device="cpu", dtype=torch.float32, batch_size=2, size="tiny"))
    (images,) = built.args
    assert tuple(images.shape) == (2, 3, side, side)
    with torch.no_grad():
        assert built.model(*built.args).shape == (2, 1000)
    built.model.train()
    wl.loss(built.model(*built.args)).backward()  # train mode may return (logits, distilled logits)


@pytest.mark.parametrize("name, millions, shape", [
    ("vit_base_patch16_224", 86.6, (3, 224, 224)),
    ("inception_v3", 23.8, (3, 299, 299)),
    ("vit_base_patch16_siglip_256", 92.9, (3, 256, 256)),
])
def test_full_size_parameter_counts_and_input_size_on_meta(name, millions, shape):
    timm = usable_timm()
    with torch.device("meta"):
        model = tm.create(timm, name, None)
    assert sum(p.numel() for p in model.parameters()) / 1e6 == pytest.approx(millions, abs=0.1)
    assert tm.input_size(timm, model, "full", name) == shape
