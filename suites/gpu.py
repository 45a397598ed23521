"""The standard GPU suite `gpu`: what `tox -e bench-gpu` runs on a box with CUDA torch.

Deep MLP (forward and train step), Llama-3.1-8B and Gemma-2B (prefill and decode) and the
SDXL UNet (one denoising step at 1024x1024), all at full size, in eager, default Inductor
and Inductor reduce-overhead (CUDA graphs). The workloads live in suites/mlp.py, llm.py and
diffusion.py; this module only names them. It is listed last in `WORKLOAD_MODULES` so the
suite is registered after them; `missing_workloads()` says which names are not registered
(planning the suite then stops with an unknown-workload error naming the first one).

Size: 21 cases. With the short measurement policy below and two workers at once (their
cold compiles side by side, each measurement alone: `compile_overlap=2`), `tox -e bench-gpu`
took 547 s on one H200 where the suite one case at a time took 696 s on the same host
(docs/BENCHMARKS.md, fifteenth session); `--shard i/N` splits it across calls or machines.
"""

from __future__ import annotations

from . import Suite, SuiteEntry, register_suite

COMPILERS = ("eager", "inductor", "inductor-reduce-overhead")

ENTRIES = (
    SuiteEntry(workloads=("mlp-deep",), scenarios=("forward", "train"), compilers=COMPILERS, devices=("cuda",),
               dtypes=("bfloat16",), sizes=("full",)),
    SuiteEntry(workloads=("llama-3.1-8b", "gemma-2b"), scenarios=("prefill", "decode"), compilers=COMPILERS,
               devices=("cuda",), dtypes=("bfloat16",), sizes=("full",)),
    SuiteEntry(workloads=("sdxl-unet",), scenarios=("unet_step",), compilers=COMPILERS, devices=("cuda",),
               dtypes=("float16",), sizes=("full",), options=(("resolution", 1024),)),
)

# GPU steps are milliseconds: 1 s of interleaved samples (>= 10 each) is plenty, and keeps
# the suite's time in compiles, where the information is. The warm-up budget drops the third
# warm-up round only where one round takes over half a second: the decode cases (64-token
# calls, 1.7-3.4 s a round on an H200), each call itself 64 steady-state steps
POLICY = (("min_time_s", 1.0), ("min_samples", 10), ("max_samples", 500), ("warmup", 3), ("max_time_s", 15.0),
          ("warmup_budget_s", 1.0))

GPU_SUITE = register_suite(
    Suite(
        "gpu",
        "the standard GPU suite: deep MLP, Llama-3.1-8B and Gemma-2B prefill/decode, SDXL UNet step; "
        "eager vs inductor vs reduce-overhead, full size on CUDA",
        entries=ENTRIES,
        policy=POLICY,
        timeout_s=600.0,
        # two workers at once: a model's inductor and reduce-overhead cases compile side by side
        # (16 cores), each measures alone (harness/run/overlap.py; docs/BENCHMARKS.md, fifteenth session)
        compile_overlap=2,
    )
)


def required_workloads() -> list[str]:
    return sorted({w for e in ENTRIES for w in e.workloads})


def missing_workloads() -> list[str]:
    """Workload names of the suite that no loaded module registered."""
    from harness.model.workloads import WORKLOADS

    return [w for w in required_workloads() if w not in WORKLOADS]
