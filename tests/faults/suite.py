"""The fault corpus as suites: `--suite faults` (every fault that ends on its own) and
`--suite faults-hang` (the hang, which needs a short --timeout). Load every file of this
folder with --workload-file; see tests/test_faults.py and benchmarks/reliability_table.py.

This file also holds the control case: a healthy workload that must stay `ok` after all
the faults around it."""

from __future__ import annotations

from harness import workload
from suites import SUITES, Suite, SuiteEntry, register_suite

FAST_POLICY = (("min_time_s", 0.05), ("min_samples", 3), ("max_samples", 50), ("warmup", 1), ("max_time_s", 2.0))

# (workload, compiler, device, expected status on a CPU-only machine)
EXPECTED: list[tuple[str, str, str, str]] = [
    ("fault-control-ok", "eager", "cpu", "ok"),
    ("fault-raise-build", "eager", "cpu", "fail_run"),
    ("fault-raise-compile", "fault-raising-backend", "cpu", "fail_compile"),
    ("fault-raise-timed-loop", "eager", "cpu", "fail_run"),
    ("fault-segfault", "eager", "cpu", "crashed"),
    ("fault-exit-no-record", "eager", "cpu", "crashed"),
    ("fault-nan-output", "fault-dynamo-eager", "cpu", "fail_accuracy"),
    ("fault-host-oom", "eager", "cpu", "oom"),  # needs --max-memory-gb, else it skips itself
    ("fault-cuda-oom", "eager", "cuda", "skipped"),  # `oom` on a CUDA machine
    ("fault-flood-output", "eager", "cpu", "ok"),
    ("fault-leave-children", "eager", "cpu", "ok"),
    ("fault-control-ok-2", "eager", "cpu", "ok"),
]


def _entries() -> tuple[SuiteEntry, ...]:
    return tuple(SuiteEntry(workloads=(w,), scenarios=("forward",), compilers=(c,), devices=(d,))
                 for w, c, d, _ in EXPECTED)


if "faults" not in SUITES:
    register_suite(Suite("faults", "the fault corpus: every fault must end as its own status, the run goes on",
                         entries=_entries(), policy=FAST_POLICY, timeout_s=180.0))
    register_suite(Suite("faults-hang", "a case that hangs (with a child): needs --timeout, then the tree is killed",
                         entries=(SuiteEntry(workloads=("fault-hang",), scenarios=("forward",), compilers=("eager",)),),
                         policy=FAST_POLICY, timeout_s=10.0))


def _tiny(ctx):
    import torch

    model = torch.nn.Linear(4, 2).to(ctx.device, ctx.dtype)
    return model, (torch.randn(ctx.batch_size, 4, device=ctx.device, dtype=ctx.dtype),)


@workload("fault-control-ok", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def control(ctx):
    """healthy control case before the faults"""
    return _tiny(ctx)


@workload("fault-control-ok-2", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def control_after(ctx):
    """healthy control case after the faults: the run went on"""
    return _tiny(ctx)
