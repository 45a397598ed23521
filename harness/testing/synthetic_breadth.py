"""A generated (SYNTHETIC) run at the zoo suites' breadth: 1,000+ cases over several suites,
model families, compilers and every failure status, for the breadth views' tests and
benchmarks/breadth_scale.py. Nothing here is a measurement: the label says SYNTHETIC and
the environment carries `synthetic: true`, so every page prints its banner.

The mix is fixed by the seed: about 80% ok, the rest spread over fail_compile (two
exception types), fail_accuracy, fail_run, oom, timeout, crashed and skipped (two reasons),
so each view has every kind of row to show. Every process carries a machine-probe block;
`slow_hosts` of them ran on a host 1.7x slower (the report must flag those).
"""

from __future__ import annotations

import datetime as dt

import numpy as np

from harness.model.schema import Case, Record, Run
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_record
from harness.testing.synthetic_history import SYNTHETIC_LABEL

SUITES: dict[str, tuple[str, ...]] = {
    "hf": ("BertForMaskedLM", "AlbertForMaskedLM", "GPT2ForSequenceClassification", "MBartForCausalLM",
           "T5ForConditionalGeneration", "DistilBertForMaskedLM"),
    "timm": ("resnet50", "resnet18", "vit_base_patch16_224", "convnext_tiny", "mobilenetv3_large_100",
             "efficientnet_b0"),
    "transformers-zoo": ("llama", "mistral", "qwen2", "gemma", "phi", "opt", "bloom", "gpt_neox"),
    "diffusers": ("unet-sd15", "unet-sdxl", "dit-xl", "flux-block", "autoencoderkl"),
}
COMPILERS = ("inductor", "aot_eager")
FAILURES: tuple[tuple[str, str, str], ...] = (  # status, error type, message (skips: the reason)
    ("fail_compile", "BackendCompilerFailed", "backend='inductor' raised: LoweringException"),
    ("fail_compile", "Unsupported", "dynamic shape operator: aten.nonzero"),
    ("fail_accuracy", "AccuracyError", "max abs diff 0.3 above tolerance"),
    ("fail_run", "RuntimeError", "expected all tensors on one device"),
    ("oom", "OutOfMemoryError", "CUDA out of memory"),
    ("timeout", "Timeout", "case exceeded 600s"),
    ("crashed", "Crash", "worker died with SIGSEGV"),
    ("skipped", "Skipped", "needs a tokenizer file, which the harness cannot build offline"),
    ("skipped", "Skipped", "audio inputs are not built yet"),
)


def breadth_case(i: int, suite: str, models: tuple[str, ...], compiler: str) -> Case:
    model = models[i % len(models)]
    # variants of a model (sizes, heads) are separate workloads of one family, as a zoo has them
    return Case(f"{model}-v{i // len(models)}" if suite in ("transformers-zoo", "diffusers") else f"{model}_{i // len(models)}",
                "forward" if i % 4 else "train", compiler, "cpu", "float32", 1 + i % 8, "tiny", suite)


def breadth_run(cases: int = 1200, seed: int = 0, *, fail_share: float = 0.2, slow_hosts: int = 5,
                run_id: str | None = None, night: int = 0, failing: frozenset[str] = frozenset()) -> Run:
    """`cases` records spread evenly over SUITES x COMPILERS; `failing`: case ids forced to
    fail_compile (a dashboard night in which they started failing)."""
    rng = np.random.default_rng(seed)
    groups = [(s, m, c) for s, m in SUITES.items() for c in COMPILERS]
    records = []
    for i in range(cases):
        suite, models, compiler = groups[i % len(groups)]
        case = breadth_case(i // len(groups), suite, models, compiler)
        pick = (i * 7919 + seed) % 1000 / 1000  # stable per index: the same cases fail every night
        slow = i < slow_hosts
        if pick < fail_share or case.case_id in failing:
            status, kind, message = FAILURES[i % len(FAILURES)] if case.case_id not in failing else FAILURES[0]
            phase = "compile" if status == "fail_compile" else "build" if status == "skipped" else "run"
            records.append(Record.failure(case, status, kind, message, phase=phase, traceback="SYNTHETIC"))
            continue
        speed = 0.6 + (sum(map(ord, case.workload)) % 20) / 10
        records.append(synthetic_record(case, rng, compiled_median=1e-3 / speed, n=30, graph_breaks=i % 3,
                                        compile_time=1 + (i % 11), probe_median=1.7e-4 if slow else 1e-4,
                                        peak_memory=(64 + i % 32) << 20))
    when = dt.datetime(2026, 1, 1, 2, 0, tzinfo=dt.timezone.utc) + dt.timedelta(days=night)
    rid = run_id or f"{when:%Y%m%d-%H%M%S}-breadth-synth{night:04d}"
    env = dict(SYNTHETIC_ENV, synthetic=True)
    return Run(rid, when.isoformat(), SYNTHETIC_LABEL, env, {"suite": "breadth", "synthetic": True}, records)
