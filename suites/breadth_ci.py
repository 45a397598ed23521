"""`breadth-ci`: the CI subset of the breadth suites, checked against committed expected counts.

One workload per model family (harness/analysis/breadth.py `workload_family`; `compilebench
expected pick --file results/expected/breadth-ci-cpu.json` gives this list back, and a test
holds the two equal), tiny, CPU, float32, forward, Inductor only: what a compiler change
breaks first (status, accuracy against eager, graph breaks, recompiles, graphs) at the cost
CI can pay on every push. Inductor on every family of hf-tiny, transformers-zoo-tiny and
diffusers-tiny (about 200) costs 10-30 s a case on a 2-core box, about an hour; these 6
families are architectures that differ most for the compiler (encoder, encoder-decoder,
RoPE/GQA decoder, mixture of experts, transformer denoiser, conv VAE), each through a cheap
model of its family, and fit the 3 minutes CI allows (docs/SUITES.md "The CI subset": the
measured time, and what was left out). timm is not in it: the CI env has no torchvision.
"""

from __future__ import annotations

from . import Suite, SuiteEntry, register_suite
from .hf import TINY_BATCH, TINY_MEMORY_GB

HF_WORKLOADS = (
    "hf-BertForMaskedLM",  # encoder, masked LM (absolute positions, GELU)
    "hf-whisper-tiny",  # encoder-decoder (audio): conv front end, cross-attention
)
ZOO_WORKLOADS = (
    "zoo-llama-causal",  # decoder: RoPE, grouped-query attention, RMSNorm, SwiGLU
    "zoo-qwen2_moe-causal",  # mixture of experts with a shared expert: data-dependent routing
)
DIFFUSERS_WORKLOADS = (
    "diffusers-dit-xl2",  # transformer denoiser, adaptive layer norm, patchify
    "diffusers-sd-vae-decode",  # conv VAE decoder: GroupNorm, upsampling, mid-block attention
)
WORKLOADS = HF_WORKLOADS + ZOO_WORKLOADS + DIFFUSERS_WORKLOADS
# CI pins exact counts, not timings: as few timed calls as the worker takes (each case still
# checks accuracy against eager and measures memory)
CI_POLICY = (("min_time_s", 0.05), ("min_samples", 3), ("max_samples", 20), ("warmup", 1), ("max_time_s", 1.0))


def _entry(workloads: tuple[str, ...], batch_sizes: tuple[int, ...] | None = None) -> SuiteEntry:
    return SuiteEntry(workloads=workloads, scenarios=("forward",), compilers=("inductor",), devices=("cpu",),
                      dtypes=("float32",), sizes=("tiny",), batch_sizes=batch_sizes)


register_suite(Suite(
    "breadth-ci",
    "the CI subset of hf-tiny, transformers-zoo-tiny and diffusers-tiny: one model per family (6), tiny, CPU, "
    "forward, inductor; `expected check --complete` against results/expected/breadth-ci-cpu.json",
    entries=(_entry(HF_WORKLOADS, (TINY_BATCH,)), _entry(ZOO_WORKLOADS), _entry(DIFFUSERS_WORKLOADS)),
    policy=CI_POLICY,
    timeout_s=300.0,
    max_memory_gb=TINY_MEMORY_GB,
))
