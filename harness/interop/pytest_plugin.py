"""Run compilebench cases as pytest-benchmark tests.

    pytest suites/test_bench_smoke.py --benchmark-json=bench.json [--benchmark-save-data]
    compilebench import-pytest-benchmark bench.json        # -> results/runs/<id>.json

`run_benchmark(benchmark, case)` builds the case in the test process, times its first
compiled call (cold compile into a fresh Inductor cache), checks accuracy against eager,
then hands the compiled call to pytest-benchmark's `benchmark` fixture wrapped so each timed
call ends with a device synchronize (pytest-benchmark's clocks are host clocks; without the
sync a GPU call would be timed at launch, not completion). Compile metrics (compile time,
graph breaks, recompiles, unique graphs, accuracy, eager median for a speedup) go into
`benchmark.extra_info`, with the case key, so an import rebuilds the case exactly.

Unlike `compilebench run`, cases share one process here (pytest's model): Dynamo is reset
and the Inductor cache pointed at a fresh folder per case, but allocator and RSS high-water
marks carry over, so peak memory is not reported from this path.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any

from harness.model.schema import Case

EAGER_REFERENCE_CALLS = 20


def suite_cases(suite: str, **narrow: Any) -> list[Case]:
    """The cases of a named suite (as `compilebench run --suite` plans them)."""
    from harness.run.runner import RunOptions, plan_cases

    cases, _ = plan_cases(RunOptions(suite=suite, **narrow))
    return cases


def _eager_median(fn: Any, sync: Any, calls: int = EAGER_REFERENCE_CALLS) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_benchmark(benchmark: Any, case: Case) -> dict[str, Any]:
    """Measure `case` with the pytest-benchmark fixture; returns the extra_info it recorded."""
    import pytest
    import torch
    import torch._dynamo

    from compiler import get_compiler
    from harness.measure.compile_metrics import CompileObserver
    from harness.measure.devices import parse_device
    from harness.measure.worker import clone_outputs, probe_cpu_isa
    from harness.model.accuracy import compare_outputs
    from harness.model.scenarios import get_scenario
    from harness.model.workloads import WorkloadContext, get_workload
    from harness.run.runner import default_cache_root, load_registries

    load_registries([])
    device = parse_device(case.device)
    avail = device.availability()
    if not avail.available:
        pytest.skip(avail.reason)
    compiler = get_compiler(case.compiler)
    torch._dynamo.reset()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="cb-pytest-inductor-")
    if device.type == "cpu" and compiler.backend == "inductor":
        probe_cpu_isa(str(default_cache_root() / "isa-probe"))
    torch.manual_seed(0)
    wl = get_workload(case.workload)
    ctx = WorkloadContext(device.torch_name, getattr(torch, case.dtype), case.batch_size, case.size, dict(case.options))
    prepared = get_scenario(case.scenario)(wl.build(ctx), wl, compiler, ctx)
    view = prepared.accuracy_view or (lambda _variant, out: out)
    reference = clone_outputs(view("eager", clone_outputs(prepared.eager())))
    info: dict[str, Any] = {"compilebench_case": case.to_dict(), "compilebench_variant": "compiled", "status": "ok"}
    target = prepared.eager
    if prepared.compiled is not None:
        observer = CompileObserver().start()
        device.synchronize()
        start = time.perf_counter()
        out = prepared.compiled()
        device.synchronize()
        info["compile_time_s"] = time.perf_counter() - start
        accuracy = (prepared.compare or compare_outputs)(reference, clone_outputs(view("compiled", clone_outputs(out))),
                                                         case.dtype)
        info["accuracy"] = accuracy.get("status")
        if info["accuracy"] == "fail":
            info["status"] = "fail_accuracy"
        snap = observer.snapshot()
        info.update({k: snap[k] for k in ("graph_breaks", "unique_graph_breaks", "recompiles", "graphs")})
        target = prepared.compiled
    eager_median = _eager_median(prepared.eager, device.synchronize)

    def timed_call() -> None:
        target()
        device.synchronize()  # the call is done when the device is, not when it returns

    benchmark.extra_info.update(info)
    benchmark(timed_call)
    compiled_median = getattr(getattr(benchmark, "stats", None), "stats", None)
    if compiled_median is not None and prepared.compiled is not None and compiled_median.median > 0:
        benchmark.extra_info["speedup"] = eager_median / compiled_median.median
    benchmark.extra_info["eager_median_s"] = eager_median
    return dict(benchmark.extra_info)


def pytest_benchmark_update_machine_info(config: Any, machine_info: dict[str, Any]) -> None:
    """Hook: store compilebench's environment (torch version, devices) in the JSON so an
    imported run can be checked for hardware and compiler mismatches like any other."""
    from harness.measure.environment import capture_environment

    machine_info["compilebench_environment"] = capture_environment(["cpu"])
