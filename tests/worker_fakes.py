"""A worker case state ready for `worker.measure` / `worker.memory`, shared by the memory-fold
tests (test_memfold: the GPU allocator fold and the CPU; test_cpu_memfold: the CPU rounds
window): a fake `inductor` case of `device` whose variants are `variants`, a fixed stop
policy and first-call times already set, as the worker has them when it reaches measure."""

from __future__ import annotations

from collections.abc import Callable

import harness.measure.worker as worker
from harness.measure.devices import Device
from harness.measure.spec import WorkerSpec
from harness.measure.timing import StopPolicy
from harness.model.schema import Case, Record


def case_state(device: Device, clock: Callable[[], float], variants: dict, *, probe: bool = True,
               samples: int = 6, warmup: int = 1) -> worker.CaseState:
    """`samples` timed rounds exactly (min = max), `warmup` warm-up rounds (an allocator
    device's peak is read on the last one from 2 on); `probe`: the machine probe on (sampled
    before and after the rounds) or off."""
    case = Case(workload="fake", scenario="forward", compiler="inductor", device=device.type, dtype="float32",
                batch_size=1, size="tiny")
    state = worker.CaseState(spec=WorkerSpec(case=case, probe=probe), clock=clock,
                             record=Record(case=case, status="ok", metrics={"phase_s": {}}))
    state.device = device
    state.policy = StopPolicy(warmup=warmup, min_samples=samples, min_time_s=0.0, max_samples=samples, max_time_s=1e9)
    state.variants = variants
    state.eager_first_s, state.compiled_first_s = 0.5, 2.0
    return state
