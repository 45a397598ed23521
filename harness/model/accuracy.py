"""Accuracy of compiled against eager outputs, with dtype-aware tolerances.

Outputs are flattened (tensors inside tuples, lists, dicts, dataclasses and transformers'
ModelOutput). fp32/fp64 use allclose-style tolerances; fp16/bf16 add a cosine-similarity
test because elementwise error in half precision grows with reduction length. NaN or Inf
that eager does not produce never passes, and NaN never passes at all.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

TOLERANCES = {
    # dtype name: (rtol, atol, min cosine similarity or None)
    "float64": (1e-7, 1e-7, None),
    "float32": (1e-3, 1e-4, None),
    "bfloat16": (5e-2, 5e-2, 0.99),
    "float16": (1e-2, 1e-2, 0.99),
}


def flatten_tensors(obj: Any) -> list:
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict) or hasattr(obj, "to_tuple"):
        items = obj.to_tuple() if hasattr(obj, "to_tuple") else tuple(obj.values())
        return [t for v in items for t in flatten_tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in flatten_tensors(v)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [t for f in dataclasses.fields(obj) for t in flatten_tensors(getattr(obj, f.name))]
    return []  # non-tensor leaves (ints, strings, cache objects) are not compared


def compare_outputs(reference: Any, result: Any, dtype_name: str) -> dict[str, Any]:
    """Return {'status': 'pass'|'fail', 'max_abs_err', 'max_rel_err', 'cosine', 'reason'}."""
    import torch

    ref = flatten_tensors(reference)
    res = flatten_tensors(result)
    if len(ref) != len(res):
        return {"status": "fail", "reason": f"output count differs: eager {len(ref)}, compiled {len(res)}"}
    if not ref:
        return {"status": "n/a", "reason": "no tensor outputs to compare"}
    rtol, atol, min_cos = TOLERANCES.get(dtype_name, TOLERANCES["float32"])
    worst_abs = 0.0
    worst_rel = 0.0
    worst_cos = 1.0
    for i, (a, b) in enumerate(zip(ref, res, strict=True)):
        if a.shape != b.shape:
            return {"status": "fail", "reason": f"output {i}: shape {tuple(b.shape)} != eager {tuple(a.shape)}"}
        if not (a.is_floating_point() or a.is_complex()):
            if not torch.equal(a, b.to(a.device)):
                return {"status": "fail", "reason": f"output {i}: integer/bool values differ"}
            continue
        # compare where the tensors live: copying a large model's gradients to the host
        # costs more than the comparison (seconds for an 8B-parameter step)
        a64 = a.detach().to(torch.float64)
        b64 = b.detach().to(a.device, torch.float64)
        if torch.isnan(b64).any() or torch.isnan(a64).any():
            return {"status": "fail", "reason": f"output {i}: NaN in {'compiled' if torch.isnan(b64).any() else 'eager'} output"}
        if (torch.isinf(b64) != torch.isinf(a64)).any():
            return {"status": "fail", "reason": f"output {i}: Inf where eager has none (or the reverse)"}
        finite = torch.isfinite(a64)
        diff = (a64 - b64).abs()[finite]
        if diff.numel():
            worst_abs = max(worst_abs, float(diff.max()))
            rel = diff / a64.abs()[finite].clamp_min(atol)
            worst_rel = max(worst_rel, float(rel.max()))
        close = torch.allclose(a64[finite], b64[finite], rtol=rtol, atol=atol)
        if min_cos is not None and a64.numel() > 1:
            cos = float(torch.nn.functional.cosine_similarity(a64.flatten(), b64.flatten(), dim=0))
            worst_cos = min(worst_cos, cos)
            if cos < min_cos:
                return _fail(i, f"cosine similarity {cos:.5f} < {min_cos}", worst_abs, worst_rel, worst_cos)
            continue  # half precision: cosine decides, elementwise error is reported only
        if not close:
            return _fail(i, f"not within rtol={rtol}, atol={atol}", worst_abs, worst_rel, worst_cos)
    return {"status": "pass", "max_abs_err": worst_abs, "max_rel_err": worst_rel, "cosine": worst_cos, "reason": ""}


def _fail(i: int, why: str, abs_err: float, rel_err: float, cos: float) -> dict[str, Any]:
    return {"status": "fail", "reason": f"output {i}: {why}", "max_abs_err": abs_err, "max_rel_err": rel_err, "cosine": cos}


# ---- the "dynamo" rule: accuracy as PyTorch's dashboard (HUD) judges it -------------------
#
# Facts (docs/SUITES.md "Accuracy as HUD judges it" names the files and commits they come
# from; the code here is ours): benchmarks/dynamo/common.py runs a float64 copy of the model
# on float64 inputs first; torch._dynamo.utils.same() then passes an output when
#   1. allclose(eager, compiled, rtol=tol, atol=tol) holds, or
#   2. (float64 reference present) RMSE(compiled, fp64) <= multiplier * RMSE(eager, fp64) + tol / 10,
#      the multiplier 2 (3 in half precision; 3 for tensors under 1000 elements, 4-D outputs
#      with 1x1 spatial dims, or tol >= 2e-2; 10 / 8 for <= 10 / <= 500 elements for the models
#      a runner lists for it); eager NaN where the fp64 reference and the compiled output have
#      none passes when the compiled output is within 4e-2 of the reference; or
#   3. (no float64 reference: the fp64 run failed) cosine similarity >= 0.99, the fallback
#      common.py switches to.
# equal_nan is False for float32 runs (NaN in the compiled output then never passes), True
# otherwise. Tolerances are per runner, mode (inference/training) and model.

DYNAMO_RULE = "dynamo"
STRICT_RULE = "strict"
RULES = (STRICT_RULE, DYNAMO_RULE)
HUD_COSINE_MIN = 0.99
HUD_NAN_CORNER_TOL = 4e-2  # same(): eager NaN, compiled and fp64 without: pass within this
HUD_SMALL_TENSOR = 1000  # numel below which noise may dominate RMSE: multiplier 3
# float64 working set of the reference per float32 parameter byte, by scenario: the copy
# itself (x2 bytes); a train step adds the scenario's second model copy, gradients and two
# AdamW moments (5 float64-sized tensors per parameter). Activations come on top: the check
# keeps FP64_HEADROOM of the free memory for them, and an OOM that still happens is caught.
FP64_STATE_FACTOR = {"forward": 2.0, "train": 10.0}
FP64_STATE_FACTOR_DEFAULT = 10.0  # an unknown scenario: assume train-step state
FP64_HEADROOM = 0.8  # use at most this share of the free memory for the copy


@dataclass(frozen=True)
class HudTolerances:
    """One HUD runner's tolerance table (get_tolerance_and_cosine_flag and its yaml)."""

    inference: float = 1e-3
    training: float = 1e-2
    inference_by_model: tuple[tuple[str, float], ...] = ()
    inference_cpu_by_model: tuple[tuple[str, float], ...] = ()
    training_by_model: tuple[tuple[str, float], ...] = ()
    larger_multiplier_models: frozenset[str] = frozenset()  # use_larger_multiplier_for_smaller_tensor
    cosine_models: frozenset[str] = frozenset()  # tolerance.cosine in the yaml (empty in both today)

    def tolerance(self, model: str, training: bool, device_type: str) -> float:
        if training:
            return dict(self.training_by_model).get(model, self.training)
        if device_type == "cpu" and model in dict(self.inference_cpu_by_model):
            return dict(self.inference_cpu_by_model)[model]
        return dict(self.inference_by_model).get(model, self.inference)


HUD_RUNNERS: dict[str, HudTolerances] = {
    # huggingface.py get_tolerance_and_cosine_flag + huggingface.yaml `tolerance:`
    "huggingface": HudTolerances(
        inference=1e-3, training=1e-2,
        inference_by_model=(("GPT2ForSequenceClassification", 4e-3),),
        inference_cpu_by_model=(("GPT2ForSequenceClassification", 5e-3),),
        training_by_model=(("MT5ForConditionalGeneration", 2e-2), ("BertForMaskedLM", 2e-2)),
        larger_multiplier_models=frozenset({"GPT2ForSequenceClassification", "BertForMaskedLM"}),
    ),
    # timm_models.py get_tolerance_and_cosine_flag + timm_models.yaml `tolerance:` (freezing off)
    "timm_models": HudTolerances(
        inference=1e-3, training=1e-2,
        training_by_model=(("beit_base_patch16_224", 16e-2),
                           ("deit_base_distilled_patch16_224", 8e-2), ("vit_base_patch16_siglip_256", 8e-2),
                           ("inception_v3", 4e-2), ("mobilenetv3_large_100", 4e-2)),
        larger_multiplier_models=frozenset({"inception_v3", "mobilenetv3_large_100",
                                            "vit_base_patch14_dinov2.lvd142m"}),
    ),
}


@dataclass(frozen=True)
class AccuracyRule:
    """How a workload's compiled output is judged: `strict` (TOLERANCES, elementwise against
    eager) or `dynamo` (HUD's rule with `runner`'s table for dashboard model `model`)."""

    name: str = STRICT_RULE
    runner: str = ""
    model: str = ""

    def __post_init__(self) -> None:
        if self.name not in RULES:
            raise ValueError(f"accuracy rule {self.name!r} is unknown; use one of {', '.join(RULES)}")
        if self.name == DYNAMO_RULE and self.runner not in HUD_RUNNERS:
            raise ValueError(f"accuracy rule dynamo needs a HUD runner, one of {', '.join(HUD_RUNNERS)}; "
                             f"got {self.runner!r}")


ACCURACY_RULES: dict[str, AccuracyRule] = {}  # workload name -> its rule; absent: strict
SUITE_ACCURACY: dict[str, str] = {}  # suite name -> "strict" where the suite overrides its workloads' rules
SUITE_CHOICES = (STRICT_RULE,)


def declare_accuracy(workload: str, rule: AccuracyRule) -> None:
    """A suite module declares how its workload is judged (suites/hf.py, suites/timm_models.py);
    every suite that runs the workload then judges it the same way."""
    ACCURACY_RULES[workload] = rule


def declare_suite_accuracy(suite: str, rule: str) -> None:
    """A suite's own choice (Suite(accuracy=...)): "strict" judges every case of the suite
    strictly, whatever its workloads declare. A suite cannot switch a workload to dynamo: the
    rule needs the model's HUD tolerance entry, which only the workload's declaration has."""
    if rule not in SUITE_CHOICES:
        raise ValueError(f"suite {suite!r}: accuracy={rule!r} is not a suite-level choice; use "
                         f"{', '.join(repr(c) for c in SUITE_CHOICES)} or leave it out (each workload's declared rule; "
                         "a workload opts into dynamo with declare_accuracy)")
    SUITE_ACCURACY[suite] = rule


def accuracy_rule_for(workload: str, suite: str = "") -> AccuracyRule:
    """The rule a case of `workload` planned by `suite` is judged by."""
    if SUITE_ACCURACY.get(suite) == STRICT_RULE:
        return AccuracyRule()
    return ACCURACY_RULES.get(workload, AccuracyRule())


def hud_outputs(obj: Any) -> list:
    """The tensors same() compares: a QuestionAnsweringModelOutput is judged on its loss alone
    (same() skips start/end logits as too noisy); otherwise every tensor, as flatten_tensors."""
    if type(obj).__name__ == "QuestionAnsweringModelOutput" and getattr(obj, "loss", None) is not None:
        return [obj.loss]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in hud_outputs(v)]
    return flatten_tensors(obj)


def rmse(ref: Any, res: Any) -> float:
    import torch

    return float(torch.sqrt(torch.mean(torch.square(ref - res))))


def rmse_multiplier(numel: int, ndim_shape: tuple[int, ...], tol: float, half: bool, larger_for_small: bool) -> float:
    """same()'s multiplier on eager's own RMSE against the fp64 reference."""
    if larger_for_small and numel <= 10:
        return 10.0
    if larger_for_small and numel <= 500:
        return 8.0
    one_by_one = len(ndim_shape) == 4 and ndim_shape[-1] == ndim_shape[-2] == 1
    if numel < HUD_SMALL_TENSOR or one_by_one or tol >= 2e-2:
        return 3.0
    return 3.0 if half else 2.0


@dataclass
class OutputVerdict:
    passed: bool
    decided_by: str  # allclose | rmse | nan_corner | cosine | allclose_only | shape | dtype | exact
    why: str = ""
    res_rmse: float | None = None
    ref_rmse: float | None = None
    multiplier: float | None = None
    cosine: float | None = None


def judge_dynamo_output(a: Any, b: Any, f: Any, tol: float, *, cosine: bool, equal_nan: bool,
                        larger_for_small: bool) -> OutputVerdict:
    """One output under HUD's rule: `a` eager, `b` compiled, `f` the float64 reference (None:
    no reference; cosine is then the test, as common.py falls back)."""
    import torch

    if a.shape != b.shape:
        return OutputVerdict(False, "shape", f"shape {tuple(b.shape)} != eager {tuple(a.shape)}")
    if not (a.is_floating_point() or a.is_complex()):
        same = torch.equal(a, b.to(a.device))
        return OutputVerdict(same, "exact", "" if same else "integer/bool values differ")
    b = b.to(a.device)
    if cosine:
        a32, b32 = a.detach().flatten().float(), b.detach().flatten().float()
        if torch.allclose(a32, b32, rtol=tol, atol=tol, equal_nan=True):
            return OutputVerdict(True, "allclose")
        cos = float(torch.nn.functional.cosine_similarity(a32, b32, dim=0, eps=1e-6))
        ok = cos >= HUD_COSINE_MIN
        return OutputVerdict(ok, "cosine", "" if ok else f"cosine similarity {cos:.5f} < {HUD_COSINE_MIN}", cosine=cos)
    a, b = a.detach(), b.detach()
    if torch.allclose(a, b, rtol=tol, atol=tol, equal_nan=equal_nan):
        return OutputVerdict(True, "allclose")
    if f is None:
        return OutputVerdict(False, "allclose_only", f"not within rtol=atol={tol:g} (no float64 reference)")
    f = f.detach().to(a.device, torch.float64)
    if (not f.isnan().any() and not b.isnan().any() and a.isnan().any()
            and torch.allclose(f.to(b.dtype), b, rtol=HUD_NAN_CORNER_TOL, atol=HUD_NAN_CORNER_TOL)):
        return OutputVerdict(True, "nan_corner")  # compiled is better than eager: counted a pass
    ref_err, res_err = rmse(f, a.to(torch.float64)), rmse(f, b.to(torch.float64))
    half = b.dtype in (torch.float16, torch.bfloat16)
    mult = rmse_multiplier(f.numel(), tuple(a.shape), tol, half, larger_for_small)
    ok = res_err <= mult * ref_err + tol / 10.0  # False when either side is NaN
    if not ok and equal_nan and math.isnan(ref_err) and math.isnan(res_err):
        ok = True
    why = "" if ok else (f"RMSE vs fp64 {res_err:.3g} > {mult:g} x eager's {ref_err:.3g} + tol/10 "
                         f"(tol={tol:g})")
    return OutputVerdict(ok, "rmse", why, res_rmse=res_err, ref_rmse=ref_err, multiplier=mult)


def compare_dynamo(reference: Any, result: Any, dtype_name: str, rule: AccuracyRule, *, fp64_ref: Any = None,
                   training: bool = False, device_type: str = "cpu", fp64_note: str = "") -> dict[str, Any]:
    """HUD's verdict on compiled (`result`) against eager (`reference`) with the float64
    reference `fp64_ref` (None: it could not be made; `fp64_note` says why). The record keeps
    the strict rule's figures (max_abs_err, max_rel_err, cosine) beside the deciding test."""
    table = HUD_RUNNERS[rule.runner]
    tol = table.tolerance(rule.model, training, device_type)
    ref, res = hud_outputs(reference), hud_outputs(result)
    fp64 = hud_outputs(fp64_ref) if fp64_ref is not None else None
    if fp64 is not None and len(fp64) != len(ref):
        fp64_note = f"float64 run gave {len(fp64)} outputs, eager {len(ref)}: not used"
        fp64 = None
    cosine = fp64 is None or rule.model in table.cosine_models
    out: dict[str, Any] = {
        "rule": DYNAMO_RULE, "hud_runner": rule.runner, "hud_model": rule.model, "tol": tol,
        "fp64_used": fp64 is not None, "test": "allclose+cosine" if cosine else "allclose+rmse",
    }
    if fp64 is None:
        out["fp64_fallback"] = fp64_note or "no float64 reference"
    if len(ref) != len(res):
        return {**out, "status": "fail", "decided_by": "count",
                "reason": f"output count differs: eager {len(ref)}, compiled {len(res)}"}
    if not ref:
        return {**out, "status": "n/a", "reason": "no tensor outputs to compare"}
    out.update(_error_figures(ref, res, tol))
    verdicts = []
    for i, (a, b) in enumerate(zip(ref, res, strict=True)):
        v = judge_dynamo_output(a, b, fp64[i] if fp64 is not None else None, tol, cosine=cosine,
                                equal_nan=dtype_name != "float32",
                                larger_for_small=rule.model in table.larger_multiplier_models)
        verdicts.append(v)
        if not v.passed:
            return {**out, **_rmse_figures(verdicts), "status": "fail", "decided_by": v.decided_by,
                    "reason": f"output {i}: {v.why}"}
    return {**out, **_rmse_figures(verdicts), "status": "pass", "decided_by": _loosest(verdicts), "reason": ""}


def _loosest(verdicts: list[OutputVerdict]) -> str:
    """The test a passing case needed: allclose when every output was close, else the first
    looser test some output passed by."""
    for name in ("nan_corner", "rmse", "cosine"):
        if any(v.decided_by == name for v in verdicts):
            return name
    return verdicts[-1].decided_by


def _rmse_figures(verdicts: list[OutputVerdict]) -> dict[str, Any]:
    """The RMSE test's figures for the output closest to failing it (largest share of its threshold)."""
    tested = [v for v in verdicts if v.decided_by == "rmse"]
    if not tested:
        return {}
    def share(v: OutputVerdict) -> float:
        limit = (v.multiplier or 0.0) * (v.ref_rmse or 0.0)
        return float("inf") if not limit or math.isnan(limit) else (v.res_rmse or 0.0) / limit
    worst = max(tested, key=share)
    return {"rmse_outputs": len(tested), "res_rmse": worst.res_rmse, "ref_rmse": worst.ref_rmse,
            "rmse_multiplier": worst.multiplier}


def _error_figures(ref: list, res: list, tol: float) -> dict[str, float]:
    """max_abs_err, max_rel_err (finite elements) and the worst cosine similarity over the
    floating outputs not within allclose at `tol` (1.0 when every output is)."""
    import torch

    worst_abs, worst_rel, worst_cos = 0.0, 0.0, 1.0
    for a, b in zip(ref, res, strict=True):
        if a.shape != b.shape or not a.is_floating_point():
            continue
        a64, b64 = a.detach().to(torch.float64), b.detach().to(a.device, torch.float64)
        finite = torch.isfinite(a64) & torch.isfinite(b64)
        diff = (a64 - b64).abs()[finite]
        if diff.numel():
            worst_abs = max(worst_abs, float(diff.max()))
            worst_rel = max(worst_rel, float((diff / a64.abs()[finite].clamp_min(tol)).max()))
        # cosine only where the output is not already close: on near-zero tensors (a gradient
        # that is ~0 everywhere) it is noise, as same() says by testing allclose first
        if a64.numel() > 1 and not torch.allclose(a64, b64, rtol=tol, atol=tol, equal_nan=True):
            cos = float(torch.nn.functional.cosine_similarity(torch.nan_to_num(a64.flatten()),
                                                              torch.nan_to_num(b64.flatten()), dim=0))
            worst_cos = min(worst_cos, cos)
    return {"max_abs_err": worst_abs, "max_rel_err": worst_rel, "cosine": worst_cos}


# ---- the float64 reference of the dynamo rule -----------------------------------------------


@dataclass
class Fp64Reference:
    """The float64 run's outputs (seen through the scenario's accuracy_view), or why there are
    none: HUD then judges by cosine similarity, and the record says so."""

    outputs: Any = None
    note: str = ""
    bytes_needed: int = 0
    bytes_free: int | None = None

    @property
    def used(self) -> bool:
        return self.outputs is not None


def float_param_bytes(model: Any) -> int:
    """Bytes of the model's floating parameters and buffers (what a float64 copy re-allocates)."""
    tensors = list(model.parameters()) + list(model.buffers()) if hasattr(model, "parameters") else []
    return sum(t.numel() * t.element_size() for t in tensors if t.is_floating_point())


def fp64_bytes_needed(model: Any, scenario: str) -> int:
    """Estimated float64 working set of the reference run, before activations."""
    return int(float_param_bytes(model) * FP64_STATE_FACTOR.get(scenario, FP64_STATE_FACTOR_DEFAULT))


def free_memory_bytes(device: str) -> int | None:
    """Memory a new allocation on `device` can still get: CUDA's free memory plus what the
    caching allocator holds unused; on CPU MemAvailable, capped by RLIMIT_AS (a tiny case's
    --max-memory-gb). None where it cannot be read (the run is tried, an OOM caught)."""
    import torch

    if device.startswith("cuda"):
        dev = torch.device(device)
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev))
    if device != "cpu":
        return None
    avail = proc_bytes("/proc/meminfo", "MemAvailable")
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        room = soft - (proc_bytes("/proc/self/status", "VmSize") or 0)
        avail = room if avail is None else min(avail, room)
    return avail


def proc_bytes(path: str, key: str) -> int | None:
    """A `key:  N kB` line of a /proc file, in bytes (None off Linux)."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def to_float64(obj: Any) -> Any:
    """`obj` with every floating tensor cast to float64 (tuples, lists and dicts rebuilt)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().to(torch.float64).requires_grad_(obj.requires_grad) if obj.is_floating_point() else obj
    if isinstance(obj, dict):
        return type(obj)({k: to_float64(v) for k, v in obj.items()}) if type(obj) is dict else \
            {k: to_float64(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_float64(v) for v in obj) if type(obj) in (list, tuple) else [to_float64(v) for v in obj]
    return obj


def fp64_model_copy(model: Any) -> Any:
    """A float64 deep copy made without a float32 copy first: the memo hands deepcopy float64
    versions of the parameters and floating buffers (tied weights stay tied), so the peak is
    the float64 copy alone."""
    import copy

    import torch

    memo: dict[int, Any] = {}
    for p in model.parameters():
        if p.is_floating_point() and id(p) not in memo:
            memo[id(p)] = torch.nn.Parameter(p.detach().to(torch.float64), requires_grad=p.requires_grad)
    for b in model.buffers():
        if b.is_floating_point() and id(b) not in memo:
            memo[id(b)] = b.detach().to(torch.float64)
    return copy.deepcopy(model, memo).to(torch.float64)


def float64_default_loss(output: Any) -> Any:
    """The train scenario's default loss (the model's own, else the first output's mean
    square) without its cast to float32, which would round the float64 reference's gradients."""
    from harness.model.scenarios import default_loss

    return default_loss(output, keep_dtype=True)


def fp64_reference(built: Any, workload: Any, scenario_fn: Any, ctx: Any, scenario: str,
                   free_bytes: int | None | str = "measure") -> Fp64Reference:
    """Run the scenario's eager call once on a float64 copy of the built model and inputs.
    Skipped, never attempted, when the estimate does not fit the free memory (`free_bytes`:
    the measured figure by default; tests pass one); any failure of the run (OOM included)
    becomes the note, with the copy freed."""
    import dataclasses as dc
    import gc

    import torch

    from compiler import get_compiler
    from harness.model.workloads import Built

    needed = fp64_bytes_needed(built.model, scenario)
    try:
        free = free_memory_bytes(ctx.device) if free_bytes == "measure" else free_bytes
    except (RuntimeError, OSError, ValueError):  # unreadable: try the run, an OOM is caught
        free = None
    ref = Fp64Reference(bytes_needed=needed, bytes_free=free if isinstance(free, int) else None)
    if isinstance(free, int) and needed > FP64_HEADROOM * free:
        ref.note = (f"float64 copy skipped: needs ~{needed / 2**30:.2f} GiB ({scenario}), "
                    f"{free / 2**30:.2f} GiB free on {ctx.device}")
        return ref
    model64 = prepared = out = None
    try:
        # the eager and compiled runs after this one see the RNG stream they would have seen
        devices = [torch.device(ctx.device).index or 0] if ctx.device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices, device_type="cuda" if devices else "cpu"):
            model64 = fp64_model_copy(built.model)
            built64 = Built(model=model64, args=to_float64(built.args), kwargs=to_float64(built.kwargs),
                            extras=built.extras, units_per_call=built.units_per_call)
            wl64 = workload if workload.loss is not None else dc.replace(workload, loss=float64_default_loss)
            prepared = scenario_fn(built64, wl64, get_compiler("eager"), dc.replace(ctx, dtype=torch.float64))
            out = prepared.eager()
            if prepared.accuracy_view:
                out = prepared.accuracy_view("eager", out)
            ref.outputs = [t.detach().clone() for t in hud_outputs(out)] if out is not None else None
    except Exception as exc:  # noqa: BLE001 - as HUD: a float64 run that fails falls back to cosine
        ref.outputs = None
        ref.note = f"float64 run failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    finally:
        del model64, prepared, out
        gc.collect()
        if ctx.device.startswith("cuda"):
            torch.cuda.empty_cache()
    return ref
