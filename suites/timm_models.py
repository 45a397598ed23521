"""The `timm` suite: PyTorch's TIMM dashboard models, `timm.create_model(name, pretrained=False)`.

Two lists from the history of PyTorch's `benchmarks/dynamo/timm_models_list.txt` (docs/SUITES.md
gives the commits): the 18 models of the torch 2.11 branch cut (the list as trimmed in October
2025) and the 61 it ran before that trim; 65 distinct names. Each model is one workload
`timm-<name>` whose description says which list(s) it is on. Batch sizes are the list's (the
2.11 one where a model is on both) over the runner's `BATCH_SIZE_DIVISORS`; `full` is the
model's default input size (timm's `resolve_data_config`, test size for inference as the runner
asks), `tiny` a small image (64x64 unless the model needs more, TINY_IMAGE) at batch 2 in the
`timm-tiny` suite. Inputs are the runner's: random integers in [0, 256) normalised to zero mean
and unit variance. Train steps reduce the logits to their mean (the runner's
`reduce_to_scalar_loss`). Dropout and drop-path are off.

timm is the optional extra `vision` (`pip install compilebench[vision]`); without it, or when it
cannot be imported (a torchvision built for another torch), every case ends `skipped` with the
reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compiler import NotApplicableError
from harness import Built, WorkloadContext, workload
from harness.model.accuracy import DYNAMO_RULE, AccuracyRule, declare_accuracy

from . import Suite, SuiteEntry, register_suite

LIST_2_11 = "2.11"  # timm_models_list.txt at the torch 2.11 branch cut (18 models)
LIST_PRE_TRIM = "pre-2025-10"  # the 61-model list it ran from 2024 until the October 2025 trim
UNIT = "images"
TINY_BATCH = 2
# virtual-memory cap of a tiny CPU case (RLIMIT_AS): a tiny model needs under 2 GB; a runaway case ends oom
TINY_MEMORY_GB = 8.0
TINY_SIDE = 64

# name -> batch size, in the files' order
TIMM_2_11: dict[str, int] = {
    "adv_inception_v3": 128, "beit_base_patch16_224": 128, "convnextv2_nano.fcmae_ft_in22k_in1k": 128,
    "deit_base_distilled_patch16_224": 128, "deit_tiny_patch16_224.fb_in1k": 128, "dm_nfnet_f0": 128,
    "ghostnet_100": 512, "inception_v3": 128, "mobilenetv2_100": 128, "mobilenetv3_large_100": 512,
    "mobilevit_s": 128, "nfnet_l0": 128, "repvgg_a2": 128, "swin_base_patch4_window7_224": 128,
    "tf_efficientnet_b0": 128, "visformer_small": 128, "vit_base_patch14_dinov2.lvd142m": 128,
    "vit_base_patch16_siglip_256": 128,
}
TIMM_PRE_TRIM: dict[str, int] = {
    "adv_inception_v3": 128, "beit_base_patch16_224": 128, "botnet26t_256": 128, "cait_m36_384": 8,
    "coat_lite_mini": 128, "convit_base": 128, "convmixer_768_32": 64, "convnext_base": 128, "crossvit_9_240": 128,
    "cspdarknet53": 128, "deit_base_distilled_patch16_224": 128, "dla102": 128, "dm_nfnet_f0": 128, "dpn107": 64,
    "eca_botnext26ts_256": 128, "eca_halonext26ts": 128, "ese_vovnet19b_dw": 128, "fbnetc_100": 128,
    "fbnetv3_b": 128, "gernet_l": 128, "ghostnet_100": 128, "gluon_inception_v3": 128, "gmixer_24_224": 128,
    "gmlp_s16_224": 128, "hrnet_w18": 128, "inception_v3": 128, "jx_nest_base": 128, "lcnet_050": 128,
    "levit_128": 128, "mixer_b16_224": 128, "mixnet_l": 128, "mnasnet_100": 128, "mobilenetv2_100": 128,
    "mobilenetv3_large_100": 128, "mobilevit_s": 128, "nfnet_l0": 128, "pit_b_224": 128, "pnasnet5large": 32,
    "poolformer_m36": 128, "regnety_002": 128, "repvgg_a2": 128, "res2net101_26w_4s": 128,
    "res2net50_14w_8s": 128, "res2next50": 128, "resmlp_12_224": 128, "resnest101e": 128, "rexnet_100": 128,
    "sebotnet33ts_256": 128, "selecsls42b": 128, "spnasnet_100": 128, "swin_base_patch4_window7_224": 128,
    "swsl_resnext101_32x16d": 64, "tf_efficientnet_b0": 128, "tf_mixnet_l": 128, "tinynet_a": 128,
    "tnt_s_patch16_224": 128, "twins_pcpvt_base": 128, "visformer_small": 128, "vit_base_patch16_224": 128,
    "volo_d1_224": 128, "xcit_large_24_p8_224": 23,
}
# the runner's BATCH_SIZE_DIVISORS (timm_models.py at the 2.11 cut)
BATCH_SIZE_DIVISORS = {"beit_base_patch16_224": 2, "deit_base_distilled_patch16_224": 2, "gluon_xception65": 2,
                       "mobilevit_s": 2, "swin_base_patch4_window7_224": 2}
# tiny image side where 64 is too small for the architecture (fixed windows, strides, pooling)
TINY_IMAGE: dict[str, int] = {"adv_inception_v3": 96, "gluon_inception_v3": 96, "inception_v3": 96, "crossvit_9_240": 120,
                              "eca_halonext26ts": 256}  # halo blocks need its full 256 input


class TimmUnavailable(NotApplicableError):
    """timm is missing or cannot be imported, or has no such model: the case is skipped."""


@dataclass(frozen=True)
class TimmModel:
    name: str
    lists: tuple[str, ...]
    list_batch: int

    @property
    def workload(self) -> str:
        return "timm-" + self.name

    @property
    def batch(self) -> int:
        return max(self.list_batch // BATCH_SIZE_DIVISORS.get(self.name, 1), 1)


def all_models() -> tuple[TimmModel, ...]:
    """The union of both lists, sorted by name; the 2.11 batch where a model is on both."""
    names = sorted(set(TIMM_2_11) | set(TIMM_PRE_TRIM))
    out = []
    for name in names:
        lists = tuple(tag for tag, table in ((LIST_2_11, TIMM_2_11), (LIST_PRE_TRIM, TIMM_PRE_TRIM)) if name in table)
        out.append(TimmModel(name, lists, TIMM_2_11.get(name) or TIMM_PRE_TRIM[name]))
    return tuple(out)


TIMM_MODELS = all_models()


def import_timm() -> Any:
    """timm, or a skip naming why it is not usable here."""
    try:
        import timm
    except ModuleNotFoundError:
        raise TimmUnavailable("timm is not installed; install the vision extra: pip install 'compilebench[vision]'") from None
    except Exception as exc:  # e.g. a torchvision built for another torch fails at import
        raise TimmUnavailable(f"timm cannot be imported here ({type(exc).__name__}: {str(exc)[:200]}); "
                              "install a torchvision matching this torch") from None
    return timm


def create(timm: Any, name: str, img_size: int | None) -> Any:
    """create_model as the runner calls it, without pretrained weights; at tiny size a model
    that takes `img_size` is built for the small image."""
    kwargs: dict[str, Any] = {"pretrained": False, "in_chans": 3, "scriptable": False, "drop_rate": 0.0}
    if img_size is not None:
        try:
            return timm.create_model(name, img_size=img_size, **kwargs)
        except TypeError:  # the architecture has no img_size argument: any size it pools over works
            pass
    try:
        return timm.create_model(name, **kwargs)
    except RuntimeError as exc:  # "Unknown model"
        raise TimmUnavailable(f"timm {timm.__version__} cannot create {name!r}: {exc}") from None


def input_size(timm: Any, model: Any, size: str, name: str, training: bool = False) -> tuple[int, int, int]:
    """(channels, height, width): the model's default (test size for inference) at full size."""
    if size == "tiny":
        side = TINY_IMAGE.get(name, TINY_SIDE)
        return (3, side, side)
    from timm.data import resolve_data_config

    return tuple(resolve_data_config({}, model=model, use_test_size=not training)["input_size"])  # type: ignore[return-value]


def runner_images(batch: int, shape: tuple[int, int, int], device: str, dtype: Any) -> Any:
    """The runner's input: integers in [0, 256) as float, normalised to mean 0 and std 1."""
    import torch

    generator = torch.Generator().manual_seed(1337)
    images = torch.randint(256, (batch, *shape), generator=generator).to(torch.float32)
    images = (images - images.mean()) / images.std()
    return images.to(device=device, dtype=dtype)


def mean_logits_loss(output: Any) -> Any:
    """The runner's reduce_to_scalar_loss on the first output (train mode may return a tuple)."""
    import torch

    if isinstance(output, (tuple, list)):
        output = output[0]
    # at least float32 (half-precision logits); float64 kept for the accuracy rule's reference run
    return (output if output.dtype == torch.float64 else output.float()).mean()


def make_factory(entry: TimmModel) -> Callable[[WorkloadContext], Built]:
    def factory(ctx: WorkloadContext) -> Built:
        timm = import_timm()
        tiny_side = TINY_IMAGE.get(entry.name, TINY_SIDE) if ctx.size == "tiny" else None
        model = create(timm, entry.name, tiny_side)
        model = model.to(device=ctx.device, dtype=ctx.dtype).eval()
        shape = input_size(timm, model, ctx.size, entry.name)
        images = runner_images(ctx.batch_size, shape, ctx.device, ctx.dtype)
        extras = {"timm_name": entry.name, "lists": list(entry.lists), "input_size": list(shape),
                  "timm_version": timm.__version__, "param_count": int(sum(p.numel() for p in model.parameters()))}
        return Built(model=model, args=(images,), extras=extras)

    factory.__name__ = "build_timm_" + "".join(c if c.isalnum() else "_" for c in entry.name)
    return factory


def describe(entry: TimmModel) -> str:
    lists = " and ".join(f"timm_models_list.txt @ {tag}" for tag in entry.lists)
    return f"TIMM dashboard {entry.name} ({lists}; batch {entry.batch}), timm.create_model(pretrained=False)"


for _entry in TIMM_MODELS:
    workload(_entry.workload, unit=UNIT, batch_size=_entry.batch, scenarios=("forward", "train"),
             loss=mean_logits_loss, description=describe(_entry))(make_factory(_entry))
    # judged as HUD's timm runner judges it (float64 reference, RMSE test, its tolerances),
    # in every suite that runs it (docs/SUITES.md "Accuracy as HUD judges it")
    declare_accuracy(_entry.workload, AccuracyRule(DYNAMO_RULE, runner="timm_models", model=_entry.name))


def workload_names(list_tag: str | None = None) -> tuple[str, ...]:
    return tuple(m.workload for m in TIMM_MODELS if list_tag is None or list_tag in m.lists)


TIMM_POLICY = (("min_time_s", 1.0), ("min_samples", 5), ("max_samples", 200), ("warmup", 2), ("max_time_s", 10.0))
TIMM_TINY_POLICY = (("min_time_s", 0.2), ("min_samples", 5), ("max_samples", 100), ("warmup", 1),
                    ("max_time_s", 3.0))


def _full_entry(names: tuple[str, ...]) -> SuiteEntry:
    return SuiteEntry(workloads=names, compilers=("eager", "inductor"), devices=("cuda",), sizes=("full",))


register_suite(Suite(
    "timm",
    "PyTorch's TIMM dashboard models: the 2.11 list (18) and the 61 run before October 2025, 65 in all, "
    "full size on CUDA in float32 at the lists' batch sizes, forward and train step, eager vs inductor",
    entries=(_full_entry(workload_names()),), policy=TIMM_POLICY, timeout_s=900.0,
))
register_suite(Suite(
    "timm-2.11",
    "the 18 models of timm_models_list.txt at the torch 2.11 cut, as the `timm` suite runs them",
    entries=(_full_entry(workload_names(LIST_2_11)),), policy=TIMM_POLICY, timeout_s=900.0,
))
register_suite(Suite(
    "timm-tiny",
    "the 65 timm models on CPU at a small image (64x64 unless a model needs more) and batch 2, "
    "forward and train step, eager vs inductor",
    entries=(SuiteEntry(workloads=workload_names(), compilers=("eager", "inductor"), devices=("cpu",),
                        sizes=("tiny",), batch_sizes=(TINY_BATCH,)),),
    policy=TIMM_TINY_POLICY, max_memory_gb=TINY_MEMORY_GB,
    timeout_s=900.0,  # timm models keep their full width: mobilenetv2_100 train compile ran past 300 s on a loaded 2-core CPU
))
