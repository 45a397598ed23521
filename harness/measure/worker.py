"""The worker: measures exactly one case in a fresh process and writes one Record (JSON).

Protocol (DESIGN.md): CPU ISA probe before any clock -> build -> eager first call ->
compiled first call (cold compile, the parent gave us an empty Inductor cache) -> accuracy
-> interleaved warm-up and timed rounds -> memory: the peak read in the timed rounds where
it resets (a GPU allocator's counter around each sample, the CPU's RSS high-water mark
around all of them where Linux resets it), else a pass of its own. Every failure becomes a
status with the phase, type, message and traceback; the parent turns crashes and
timeouts (which leave no record) into statuses of their own.

Run as `python -m harness.measure.worker SPEC.json OUT.json`.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from compiler import CompilerConfig
from harness.measure import quiet
from harness.measure.contention import CONTENTION_KEY, ContentionMeter
from harness.measure.probe import PROBE_KEY, ProbeSchedule, make_probe
from harness.measure.spec import CASE_TASK, OWNED_PAGES_ENV, WorkerSpec, task_function
from harness.measure.timing import (
    Clock,
    EventTimer,
    GcPauses,
    HostTimer,
    StopPolicy,
    calibrate_inner,
    descendants_cpu_s,
    measure_interleaved,
    minor_faults,
    process_cpu_s,
    warmup_rounds,
)
from harness.model.jsonfile import json_safe
from harness.model.payloads import ErrorInfo, Memory, Timing
from harness.model.schema import Case, Record, error_info, write_json_atomic

# phases whose exceptions mean "the compiler failed" rather than "the model failed"
COMPILE_PHASES = ("compile",)


class CaseSkipped(Exception):
    """Raised for a case that cannot run here (device absent, size unsupported)."""


@dataclass
class CaseState:
    """One case on its way through the phases: what each phase produced for the next.

    A phase is a function `phase(state) -> None` that reads what earlier phases left here
    and adds its own results (to the fields below or to `state.record`). To add a phase,
    write such a function and give it a row in PHASES; a new field here carries its data."""

    spec: WorkerSpec
    clock: Clock
    record: Record
    phase: str = "setup"
    phase_started: int = 0
    compiler: CompilerConfig | None = None
    policy: StopPolicy | None = None
    device: Any = None
    workload: Any = None
    scenario_fn: Any = None
    built: Any = None
    prepared: Any = None
    out_eager: Any = None
    out_compiled: Any = None
    fp64_ref: Any = None  # the dynamo accuracy rule's float64 reference (harness/model/accuracy.py)
    eager_first_s: float | None = None
    compiled_first_s: float | None = None
    variants: dict[str, Callable[[], Any]] = field(default_factory=dict)
    observer: Any = None
    first_snapshot: dict[str, Any] | None = None
    warm_snapshot: dict[str, Any] | None = None
    inner: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    cpu_samples: dict[str, list[float]] = field(default_factory=dict)  # process CPU seconds, aligned with samples
    round_peaks: RoundPeaks | RoundsWindowPeak | None = None  # peak memory read in the timed rounds, where it can be
    break_costs: dict[str, Any] | None = None

    @property
    def case(self) -> Case:
        return self.record.case

    @property
    def has_compiled(self) -> bool:
        return self.prepared is not None and self.prepared.compiled is not None

    @property
    def compile_only(self) -> bool:
        """The runner's second process for --warm-compile: the compile is all it measures."""
        return self.spec.compile_only

    def enter(self, name: str) -> None:
        """Close the current phase's wall time and open `name`: where a slow case spent
        its time, measured not guessed (metrics.phase_s)."""
        now = self.clock()
        phase_s = self.record.metrics["phase_s"]
        phase_s[self.phase] = round(phase_s.get(self.phase, 0.0) + (now - self.phase_started) / 1e9, 6)
        self.phase_started = now
        self.phase = name


def probe_cpu_isa(cache_dir: str | None) -> dict[str, Any]:
    """Settle Inductor's CPU vector ISA before any clock starts.

    Inductor's probe builds and dlopens C++ test programs (8-15 s cold, 2-5 s even with its
    build cache). It is a property of (machine, torch), so the first worker stores the
    answer in `cache_dir/isa.json`; later workers tell Inductor to trust the CPU flags
    (`cpp.vec_isa_ok`) and check that it picks the same ISA, else they probe in full.
    Returns {'isa', 'seconds', 'cached'} for the record: reported, never compile time."""
    import torch
    import torch._inductor.config as inductor_config
    import torch._inductor.cpu_vec_isa as vec

    from harness.measure.devices import cpu_model_name

    start = time.perf_counter()
    key = {"torch": torch.__version__, "cpu": cpu_model_name(), "python": os.path.realpath(sys.executable)}  # python vs python3 links: one entry
    cache_file = Path(cache_dir) / "isa.json" if cache_dir else None
    cached = None
    if cache_file and cache_file.exists():
        try:
            data = json.loads(cache_file.read_text())
            cached = data["isa"] if data.get("key") == key else None
        except (ValueError, KeyError, OSError):
            cached = None
    if cached is not None:
        inductor_config.cpp.vec_isa_ok = True
        if str(vec.pick_vec_isa()) == cached:
            return {"isa": cached, "seconds": time.perf_counter() - start, "cached": True}
        inductor_config.cpp.vec_isa_ok = None  # flags and probe disagree: trust the probe
        vec.valid_vec_isa_list.cache_clear()
        vec.pick_vec_isa.cache_clear()
    case_cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if cache_dir:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir  # probe builds land in the shared dir
    try:
        isa = str(vec.pick_vec_isa())
    finally:
        if case_cache is not None:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = case_cache
    # the value workers that trust the cached answer run with: `cpp.vec_isa_ok` is part of
    # the FX-graph cache key on torch 2.11, so a worker that probed (None) and one that
    # trusted the cache (True) never shared a compiled graph (the JIT-warm row missed)
    inductor_config.cpp.vec_isa_ok = True
    if cache_file:
        try:
            write_json_atomic(cache_file, {"key": key, "isa": isa})
        except OSError:
            pass
    return {"isa": isa, "seconds": time.perf_counter() - start, "cached": False}


def clone_outputs(obj: Any) -> Any:
    """Detach and clone tensors so later calls (CUDA graphs reuse buffers) cannot change
    the output kept for the accuracy check."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(clone_outputs(o) for o in obj)
    if isinstance(obj, list):
        return [clone_outputs(o) for o in obj]
    if isinstance(obj, dict):
        return {k: clone_outputs(v) for k, v in obj.items()}
    if hasattr(obj, "to_tuple"):
        return clone_outputs(obj.to_tuple())
    return obj


# the caching allocators (CUDA, ROCm, XPU) round every block up to a multiple of this
ALLOCATOR_BLOCK_BYTES = 512


def held_output_bytes(obj: Any, device_type: str) -> int:
    """The allocator bytes `obj`'s tensors on a `device_type` device hold (each storage once,
    rounded up as the caching allocator rounds a block): what a kept output adds to every
    later peak read."""
    import torch

    storages: dict[int, int] = {}
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            if item.device.type == device_type and item.layout == torch.strided:
                storage = item.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    block = ALLOCATOR_BLOCK_BYTES
    return sum(-(-n // block) * block for n in storages.values())


def timed_first_call(fn: Callable[[], Any], sync: Callable[[], None], clock: Clock) -> tuple[Any, float]:
    sync()
    start = clock()
    out = fn()
    sync()
    return out, (clock() - start) / 1e9


def memory_pass(device: Any, fn: Callable[[], Any], calls: int = 3) -> Memory:
    """Peak memory of `calls` calls, in a pass of its own (never inside the timed loop)."""
    gc.collect()
    baseline = device.reset_peak_memory()
    for _ in range(calls):
        fn()
    device.synchronize()
    peak = device.peak_memory()
    return Memory(peak_memory_bytes=peak, peak_memory_delta_bytes=(peak - baseline) if peak is not None else None,
                  memory_kind=device.memory_kind, memory_source="pass")


# memory kinds whose peak is read from the timed rounds instead of in a pass of its own,
# where the device's reset works (`peak_reset_refusal` is None): an allocator counter that
# resets exactly, and the process's RSS high-water mark, which Linux resets (clear_refs) to
# the RSS of the moment. Not MPS's sampled lower bound.
ROUND_PEAK_KINDS = ("device_allocator", "process_rss")
# ... of which these are read per variant, around its last warm-up call (RoundPeaks; around
# every timed sample until 2026-12-01, which slowed the samples +8-30% on an H200,
# benchmarks/probe_between_rounds.py). The RSS mark is read
# once around all the rounds instead (RoundsWindowPeak): a reset and a read between two CPU
# samples, outside the timer, still slowed the next sample (tiny MLPs on a 2-core CPU: +6% to
# +64%, benchmarks/cpu_memfold.py), and a process's RSS has no per-variant share to split
# anyway: the pass's eager and compiled peaks agreed within 0.1 MiB in every smoke case
PER_SAMPLE_PEAK_KINDS = ("device_allocator",)
MEMORY_ROUNDS_KEY = "memory_rounds"  # record.metrics: how the rounds' peaks were read, or why not
# The read warm-up call must be a steady-state call, as the 3-call pass after the rounds
# measured: CUDA-graph trees run a new graph's first call without a graph, record on its
# second and replay from the third, and a recording call's peak (its intermediates allocated
# in the graph's pool) is not a replay's. The compile phase makes the first call, so with 2
# warm-up calls the read one is the first replay. With fewer the memory phase takes the pass
# after the rounds (the tiny and CI policies: warmup 1, cheap calls), as before the fold,
# rather than a third way of reading the peak; and a graph compiled in the read call's round
# or the one before (a train step's second call recompiles) voids the read the same way.
MIN_FOLD_WARMUP = 2


def memory_fold_refusal(device: Any, warmup: int = MIN_FOLD_WARMUP) -> str | None:
    """Why the memory phase cannot take its figures from the measure phase's calls on
    `device` with `warmup` warm-up calls (None: it can). Checks the reset on the spot: call
    it once, before the rounds."""
    if device.memory_kind in PER_SAMPLE_PEAK_KINDS:
        # an allocator counter: reset_peak_memory_stats resets it exactly
        return None if warmup >= MIN_FOLD_WARMUP else (
            f"warmup {warmup}: the peak is read on the last of at least {MIN_FOLD_WARMUP} warm-up calls "
            "(a steady-state call: CUDA graphs record on a graph's second call), so a pass after the rounds")
    if device.memory_kind in ROUND_PEAK_KINDS:
        return device.peak_reset_refusal()
    return f"{device.memory_kind}: no peak counter that resets"


class RoundPeaks:
    """Peak memory per variant from calls the measure phase makes anyway: the worker wraps
    each variant's last warm-up call (steady state: after the first call and the other
    warm-up calls) in `before` (peak reset) and `after` (sync, peak read), none of it timed,
    so nothing runs between two timed samples. Keeps per variant the highest peak read and
    its rise over the bytes in use at that reset: what memory_pass reports, from one call
    instead of 3 more. Until 2026-12-01 it wrapped every timed sample (measure_interleaved's
    before/after hooks still can): ~230 us of host work each on an H200, which slowed the
    samples of a deep MLP +8-30% (benchmarks/probe_between_rounds.py).

    Nothing is subtracted from the peak: the GPU probe's buffers are freed while it is read
    (MachineProbe.release). An allocator delta once measured around the probe's start and
    subtracted took in whatever else the process allocated then (CUDA-graph cases on an H200:
    100 MiB "resident" for 68 MiB of buffers, likely the cuBLAS workspace the probe's GEMM
    re-made after a capture freed it; those cases' peaks read 32 MiB low). The record keeps
    `probe_resident_bytes` at 0 so files of either age read alike."""

    resident_bytes = 0  # bytes subtracted from the peak: none (see above)

    def __init__(self, device: Any, clock: Clock = time.perf_counter_ns, gc_s: float = 0.0):
        self.device = device
        self.clock = clock
        self.gc_s = gc_s  # the garbage collection before the rounds (memory_pass's gc.collect, once)
        self.spent_s: dict[str, float] = {}  # per variant: seconds in its resets and reads (never timed)
        self.reads: dict[str, int] = {}
        self._best: dict[str, tuple[int, int]] = {}  # variant -> (peak, rise over its baseline)
        self._baseline = 0

    def before(self, name: str) -> None:
        start = self.clock()
        self._baseline = self.device.reset_peak_memory()
        self._spend(name, start)

    def after(self, name: str) -> None:
        start = self.clock()
        peak = self.device.peak_memory()
        self._spend(name, start)
        if peak is None:
            return
        self.reads[name] = self.reads.get(name, 0) + 1
        best = self._best.get(name)
        if best is None or peak > best[0]:
            self._best[name] = (peak, peak - self._baseline)

    def _spend(self, name: str, start: int) -> None:
        self.spent_s[name] = self.spent_s.get(name, 0.0) + (self.clock() - start) / 1e9

    def to_dict(self) -> dict[str, Any]:
        """What the record keeps of the reading: reads and cost per variant."""
        return {"scope": "last_warmup", "probe_resident_bytes": self.resident_bytes, "reads": dict(self.reads),
                "spent_s": dict(self.spent_s), "gc_s": round(self.gc_s, 6)}

    def memory(self, name: str) -> Memory | None:
        """The variant's figures, or None when no sample's peak was read (take a pass)."""
        if name not in self._best:
            return None
        peak, delta = self._best[name]
        return Memory(peak_memory_bytes=peak, peak_memory_delta_bytes=delta,
                      memory_kind=self.device.memory_kind, memory_source="rounds")


class RoundsWindowPeak:
    """Peak memory of the whole timed loop: the peak reset once right before the first
    timed sample (after the warm-up, the calibration and the machine probe's warm-up) and
    read once right after the last, so nothing runs between the samples that did not run
    before. Every variant gets the window's figures: the highest RSS of the process over
    all its timed calls and the rise over the RSS at the reset, what memory_pass reports
    over 3 calls. The machine probe's kernels run inside the window, between rounds: on the
    CPU a few hundred KiB of numpy buffers, held from its warm-up on (no rise).

    No gc.collect() before the window, unlike the pass: the CPU rounds ran without one
    before the fold too, and one right before them made a tiny compiled MLP's median 0.6-2.5%
    slower (benchmarks/cpu_memfold.py, 3 of 3 processes) while it returned no RSS (0.0 MiB:
    freed objects stay in the allocator's pages); it cost 0.3-0.8 s a case. What cyclic
    garbage holds when the rounds start is therefore counted, as the timed calls ran with it."""

    def __init__(self, device: Any, clock: Clock = time.perf_counter_ns):
        self.device = device
        self.clock = clock
        self.resident_bytes = 0
        self.spent_s: dict[str, float] = {}  # per variant: its share of the reset's and read's seconds
        self.reads: dict[str, int] = {}
        self._baseline: int | None = None
        self._peak: int | None = None
        self._spent = 0.0

    def start(self) -> None:
        start = self.clock()
        self._baseline = self.device.reset_peak_memory()
        self._spent += (self.clock() - start) / 1e9

    def stop(self, names: list[str]) -> None:
        start = self.clock()
        self._peak = self.device.peak_memory()
        self._spent += (self.clock() - start) / 1e9
        if self._peak is not None:
            self.reads = {name: 1 for name in names}
        self.spent_s = {name: self._spent / len(names) for name in names}

    def to_dict(self) -> dict[str, Any]:
        return {"scope": "all_rounds", "probe_resident_bytes": 0, "reads": dict(self.reads),
                "spent_s": dict(self.spent_s)}

    def memory(self, name: str) -> Memory | None:
        """The window's figures, or None when its peak could not be read (take a pass)."""
        if self._peak is None or self._baseline is None or name not in self.reads:
            return None
        return Memory(peak_memory_bytes=self._peak, peak_memory_delta_bytes=self._peak - self._baseline,
                      memory_kind=self.device.memory_kind, memory_source="rounds")


def classify_exception(exc: BaseException, phase: str) -> str:
    name = type(exc).__name__
    if isinstance(exc, MemoryError) or "OutOfMemory" in name or "out of memory" in str(exc).lower()[:2000]:
        return "oom"
    if _is_skip(exc):
        return "skipped"
    module = type(exc).__module__ or ""
    if phase in COMPILE_PHASES or module.startswith(("torch._dynamo", "torch._inductor")):
        return "fail_compile"
    return "fail_run"


def exception_info(exc: BaseException, phase: str) -> ErrorInfo:
    """The error block for an exception raised in `phase`; a skip is a reason, not a traceback."""
    if _is_skip(exc):
        return error_info("Skipped", str(exc), phase=phase)
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-20000:]
    return error_info(type(exc).__name__, str(exc)[:4000], phase=phase, traceback=trace)


def _variant_block(samples: list[float], first_call_s: float, inner: int, memory: Memory,
                   cpu_samples: list[float] | None = None) -> Timing:
    from harness.model.stats import summarize

    block = Timing.measured(samples, first_call_s, inner, summarize(samples), memory)
    if cpu_samples is not None and len(cpu_samples) == len(samples):
        # process CPU seconds per sample: compare spots descheduled ones (a key only when measured)
        block = block.with_fields(cpu_samples_s=cpu_samples)
    return block


def setup_imports(compiler: CompilerConfig) -> tuple[str, ...]:
    """The torch modules a case's setup imports (beyond torch itself): what a CPU case's fork
    server may import ahead of it without adding to its peak RSS (harness/run/forkserver.py)."""
    if not compiler.is_eager and compiler.backend == "inductor":
        return ("torch._dynamo", "torch._inductor.compile_fx")
    return ("torch._dynamo",)


def setup(state: CaseState) -> None:
    """Resolve the compiler, policy, device, workload and scenario; skip what cannot run here."""
    from harness.measure.devices import parse_device
    from harness.model.scenarios import get_scenario
    from harness.model.workloads import get_workload

    spec, case = state.spec, state.case
    if spec.compiler is None:
        raise ValueError("a case spec without a compiler config")
    state.compiler = compiler = spec.compiler
    state.policy = StopPolicy(**spec.policy)
    state.device = device = parse_device(case.device)
    avail = device.availability()
    if not avail.available:
        raise CaseSkipped(avail.reason)
    from harness.measure.capabilities import missing_reason

    # a config that cannot run here, or one that needs a feature this torch lacks
    unsupported = compiler.unsupported_reason(device.type) or missing_reason(*compiler.required_features())
    if unsupported:
        raise CaseSkipped(unsupported)
    # heavy imports belong to setup, not to the build time of the model
    import importlib

    for module in setup_imports(compiler):
        importlib.import_module(module)
    from harness.model.workloads import import_workloads

    import_workloads({"workload_modules": spec.workload_modules, "workload_files": spec.workload_files})
    state.workload = wl = get_workload(case.workload)
    state.scenario_fn = get_scenario(case.scenario)
    if case.size not in wl.sizes:
        raise CaseSkipped(f"workload {wl.name} has no size {case.size!r} (sizes: {', '.join(wl.sizes)})")
    if wl.devices and device.type not in wl.devices:
        raise CaseSkipped(f"workload {wl.name} runs on {', '.join(wl.devices)} only")


def isa_probe(state: CaseState) -> None:
    """Inductor's CPU ISA probe, before any clock that counts (see probe_cpu_isa)."""
    if state.device.type == "cpu" and state.compiler.backend == "inductor":
        probe = probe_cpu_isa(state.spec.isa_cache_dir)
        state.record.metrics["isa_probe_s"] = probe["seconds"]
        state.record.metrics["cpu_vec_isa"] = probe["isa"]
        state.record.metrics["isa_probe_cached"] = probe["cached"]


def build(state: CaseState) -> None:
    """Build the model and inputs and let the scenario prepare the eager/compiled calls."""
    import torch

    from harness.model.workloads import WorkloadContext

    case = state.case
    torch.manual_seed(int(state.spec.seed))
    ctx = WorkloadContext(
        device=state.device.torch_name,
        dtype=getattr(torch, case.dtype),
        batch_size=case.batch_size,
        size=case.size,
        options=dict(case.options),
    )
    start = state.clock()
    state.built = state.workload.build(ctx)
    state.prepared = state.scenario_fn(state.built, state.workload, state.compiler, ctx)
    state.device.synchronize()
    state.record.metrics["build_s"] = (state.clock() - start) / 1e9
    state.record.notes.extend(state.prepared.notes)
    state.variants = {"eager": state.prepared.eager}


# record.metrics: the allocator's peak over the eager first call (before any compile), on
# allocator devices: the figure a stateful scenario's eager case is derived from where the
# compiled variant's state is built only after that call (harness/run/twins.py: that peak plus
# `held_output_bytes`, the kept first-call output every later read holds), and, in an eager
# case's own process, the evidence that the sum equals that case's later reads
EAGER_FIRST_CALL_MEMORY_KEY = "eager_first_call_memory"


def eager_first_call(state: CaseState) -> None:
    """The eager reference: its first call's time and the output accuracy compares against.
    On an allocator device the peak is reset before it and read after it, outside the timer
    (`compiled_state_deferred`: the scenario builds the compiled variant's own state only
    afterwards, which it then does here, untimed, in this phase)."""
    prepared, device = state.prepared, state.device
    read = device.memory_kind in PER_SAMPLE_PEAK_KINDS
    baseline = device.reset_peak_memory() if read else None
    out, state.eager_first_s = timed_first_call(prepared.eager, device.synchronize, state.clock)
    peak = device.peak_memory() if read else None
    deferred = prepared.build_compiled_state is not None
    state.out_eager = _accuracy_output(prepared, "eager", out)
    if peak is not None and baseline is not None:
        # the output kept for the accuracy check is alive at every later read of this process
        # and was not at this one: later peaks are that much higher (H200, decode: exactly the
        # difference to the eager case's rounds), their rises over the bytes in use are not
        state.record.metrics[EAGER_FIRST_CALL_MEMORY_KEY] = {
            "peak_bytes": peak, "delta_bytes": peak - baseline, "compiled_state_deferred": deferred,
            "held_output_bytes": held_output_bytes(state.out_eager, device.type)}
    if deferred and state.has_compiled:
        prepared.build_compiled_state()
        device.synchronize()


def compile_first_call(state: CaseState) -> None:
    """The compiled first call in the cold cache the parent made: that is the compile time."""
    from harness.measure.compile_metrics import CompileMemoryProbe, CompileObserver

    prepared = state.prepared
    state.observer = CompileObserver().start()
    compile_memory = CompileMemoryProbe(state.device).start()  # host peak RSS of the compile, next to the device's
    cpu_before, faults_before, pool_before = process_cpu_s(), minor_faults(), descendants_cpu_s()
    gc_pauses = GcPauses().start()
    quiet.mark("compile_start")  # --compile-overlap: the window the runner checks other workers against
    try:
        out, state.compiled_first_s = timed_first_call(prepared.compiled, state.device.synchronize, state.clock)
    finally:  # a failed compile's record keeps its pauses too, and the callback goes
        state.record.metrics["compile_gc"] = gc_pauses.stop()
        quiet.mark("compile_end")
    # page faults the compile took in this process: a forked case that still shared its server's
    # pages copy-on-write took ~30k more than a spawned one (harness/run/forkserver.py own_inherited_pages)
    state.record.metrics["compile_minor_faults"] = minor_faults() - faults_before
    # CPU seconds: the compile's work, which waiting for a busy core does not inflate (docs/GATING.md).
    # Complete on CPU only: a GPU case's Triton compiles run in Inductor's compile-worker pool,
    # which is never waited for, so compare gates GPU compile time on wall seconds instead
    state.record.metrics["compile_cpu_s"] = compile_cpu = process_cpu_s() - cpu_before
    # with the live descendants' share (Inductor's compile-worker pool): complete on a GPU too;
    # recorded beside compile_cpu_s, not yet what compare judges (docs/RESULTS.md)
    pool_after = descendants_cpu_s()
    if pool_before is not None and pool_after is not None:
        state.record.metrics["compile_cpu_with_workers_s"] = compile_cpu + pool_after - pool_before
    state.record.metrics.update(compile_memory.stop())
    state.out_compiled = _accuracy_output(prepared, "compiled", out)
    state.first_snapshot = state.observer.snapshot()
    state.record.metrics["compile_time_s"] = state.compiled_first_s
    state.record.metrics["compile_breakdown_s"] = state.first_snapshot["compile_breakdown_s"]


# ---- accuracy rule hook (harness/model/accuracy.py: strict, or dynamo as HUD judges) ----
def _dynamo_rule(state: CaseState) -> Any:
    from harness.model.accuracy import DYNAMO_RULE, accuracy_rule_for

    rule = accuracy_rule_for(state.case.workload, state.case.suite)
    return rule if rule.name == DYNAMO_RULE and state.prepared.compare is None else None


def fp64_reference(state: CaseState) -> None:
    """The dynamo rule's float64 reference, before the eager first call as HUD's runner
    makes it (the copy is freed before any timed call); skipped when it would not fit."""
    import torch

    from harness.model.accuracy import fp64_reference as make_reference
    from harness.model.workloads import WorkloadContext

    case = state.case
    ctx = WorkloadContext(device=state.device.torch_name, dtype=getattr(torch, case.dtype),
                          batch_size=case.batch_size, size=case.size, options=dict(case.options))
    state.fp64_ref = make_reference(state.built, state.workload, state.scenario_fn, ctx, case.scenario)


def accuracy(state: CaseState) -> None:
    """Compiled vs eager first-call outputs (the scenario may bring its own comparison)."""
    from harness.model.accuracy import compare_dynamo, compare_outputs

    rule = _dynamo_rule(state)
    if rule is not None:
        from harness.model.accuracy import Fp64Reference

        ref = state.fp64_ref or Fp64Reference(note="the float64 reference phase did not run")
        state.record.metrics["accuracy"] = compare_dynamo(
            state.out_eager, state.out_compiled, state.case.dtype, rule, fp64_ref=ref.outputs,
            training="train" in state.case.scenario, device_type=state.device.type, fp64_note=ref.note)
        state.record.metrics["accuracy"]["fp64_bytes_needed"] = ref.bytes_needed
        state.record.metrics["accuracy"]["fp64_bytes_free"] = ref.bytes_free
        state.fp64_ref = None
    else:
        comparer = state.prepared.compare or compare_outputs
        state.record.metrics["accuracy"] = comparer(state.out_eager, state.out_compiled, state.case.dtype)
    # the compiled output's copy is freed here: kept, every later peak of this process (eager
    # and compiled reads alike) would hold one output more than an eager case's own process,
    # whose only kept output is its first call's (a derived eager peak was 785 MiB high for a
    # GPT-Neo bs32 forward's logits); the eager first call's output stays, in both processes
    state.out_compiled = None
    state.variants["compiled"] = state.prepared.compiled
# ---- end accuracy rule hook ----


def wait_for_quiet(state: CaseState) -> None:
    """--compile-overlap: wait until no other worker of the run is building, compiling or
    measuring, and keep the host to this case until its exit (harness/measure/quiet.py)."""
    state.record.metrics["quiet_wait_s"] = round(quiet.take_exclusive(), 6)


def measure(state: CaseState) -> None:
    """Warm-up, then interleaved timed rounds of every variant (raw samples kept), with the
    machine-speed probe sampled before the warm-up and after the rounds (ProbeSchedule,
    harness/measure/probe.py) and the threads' run-queue wait read around them
    (harness/measure/contention.py). Nothing runs between two timed samples: an allocator
    device's peak is read around each variant's last warm-up call (RoundPeaks; from 2
    warm-up calls, with the GPU probe's buffers freed meanwhile: see _warm_up), the CPU's
    RSS mark around all the rounds (RoundsWindowPeak)."""
    device, policy = state.device, state.policy
    timer: Callable[[Callable[[], Any], int], float]
    if device.has_events:
        timer = EventTimer(device.event_pair, device.synchronize)
    else:
        timer = HostTimer(device.synchronize, state.clock)
    threads = case_threads(device)
    refusal = memory_fold_refusal(device, policy.warmup)
    per_variant = refusal is None and device.memory_kind in PER_SAMPLE_PEAK_KINDS
    # the probe first: its samples between rounds slowed the samples after them, so its
    # first edge comes before the warm-up, whose untimed calls stand between it and the rounds
    probe = _start_probe(state.spec, device, timer, state.clock, threads)
    # no probe buffer alive while the peak is read, so nothing is subtracted from it: the old
    # allocator delta around the probe's start also took in what else was allocated then
    # (CUDA-graph cases on an H200: 32 MiB more, likely the cuBLAS workspace that CUDA-graph
    # trees free around a capture and the probe's GEMM re-made; their peaks read 32 MiB low)
    parked = per_variant and isinstance(probe, ProbeSchedule) and probe.probe.release()
    peaks, window = _round_memory(state, refusal, per_variant)
    state.round_peaks = peaks or window
    void = _warm_up(state, peaks)
    if void is not None:
        state.round_peaks = None
        state.record.metrics[MEMORY_ROUNDS_KEY] = {"refused": void}
    state.warm_snapshot = state.observer.snapshot() if state.observer else None
    state.inner = {name: calibrate_inner(timer, fn, policy.target_sample_s) for name, fn in state.variants.items()}
    state.cpu_samples = {}
    # contention (harness/measure/contention.py): schedstat read before and after the rounds only:
    # a read between rounds, though outside the timer, slowed the next samples of tiny CPU cases
    # (mlp-classic forward inductor tiny speedup 0.324x -> 0.273x, 3 processes a side, 2-core box)
    meter = ContentionMeter(threads).start()
    if window is not None:
        window.start()
    state.samples = measure_interleaved(state.variants, timer, replace(policy, warmup=0), state.clock, state.inner,
                                        cpu_samples=state.cpu_samples)
    if window is not None:
        window.stop(list(state.variants))
    state.record.metrics[CONTENTION_KEY] = meter.stop()
    if state.round_peaks is not None:
        state.record.metrics[MEMORY_ROUNDS_KEY] = state.round_peaks.to_dict()
    if isinstance(probe, ProbeSchedule):
        if parked:
            _restore_probe(probe)
        probe.after_rounds(sum(sum(v) * state.inner[name] for name, v in state.samples.items()))
        state.record.metrics[PROBE_KEY] = probe.probe.to_dict(probe.timed_s)
        probe.probe.close()
    elif probe:
        state.record.metrics[PROBE_KEY] = {"error": probe}


def _round_memory(state: CaseState, refusal: str | None,
                  per_variant: bool) -> tuple[RoundPeaks | None, RoundsWindowPeak | None]:
    """How the measure phase reads the peak: around each variant's last warm-up call (an
    allocator, `per_variant`), around all the timed rounds (the CPU's RSS mark), or not at
    all (`refusal`, recorded: the memory phase takes a pass)."""
    if refusal is not None:
        state.record.metrics[MEMORY_ROUNDS_KEY] = {"refused": refusal}
        return None, None
    if per_variant:
        return RoundPeaks(state.device, clock=state.clock), None
    return None, RoundsWindowPeak(state.device, clock=state.clock)


WARMUP_KEY = "warmup"  # record.metrics: the warm-up rounds made and each call's seconds


def _warm_up(state: CaseState, peaks: RoundPeaks | None) -> str | None:
    """The policy's untimed warm-up rounds of every variant: `warmup` of them, or fewer where
    the first round alone takes a sizeable share of `warmup_budget_s` (timing.warmup_rounds),
    each call's seconds, device synchronised, kept in the record (WARMUP_KEY) so a reader can
    see the calls settle. With `peaks` (an allocator device), the last round is read: the
    `gc.collect()` memory_pass made, then each variant's call between a peak reset and a read
    (a reset and read around every timed sample, ~230 us of host work, slowed the samples of a
    deep MLP on an H200 +8-30%, benchmarks/probe_between_rounds.py); such a run keeps at least
    MIN_FOLD_WARMUP rounds. Returns why the read is void (a frame compiled in that round or the
    one before: the read call may be a graph's first run or its CUDA-graph recording, see
    MIN_FOLD_WARMUP), else None."""
    policy = state.policy
    rounds = policy.warmup
    calls_s: dict[str, list[float]] = {name: [] for name in state.variants}
    compiled_before: list[int] = []
    i = 0
    while i < rounds:
        read = peaks is not None and i == rounds - 1
        if read:
            start = state.clock()
            gc.collect()
            peaks.gc_s = (state.clock() - start) / 1e9
        if peaks is not None:
            compiled_before.append(_compiled_frames())
        for name, fn in state.variants.items():
            if read:
                peaks.before(name)
            start = state.clock()
            fn()
            state.device.synchronize()
            calls_s[name].append((state.clock() - start) / 1e9)
            if read:
                peaks.after(name)
        if i == 0:  # the rounds the budget allows, known before the one that is read
            first = sum(seconds[0] for seconds in calls_s.values())
            rounds = warmup_rounds(policy, first, _warmup_floor(peaks is not None, compiled_before))
        i += 1
    state.record.metrics[WARMUP_KEY] = {"rounds": rounds, "of": policy.warmup, "budget_s": policy.warmup_budget_s,
                                        "calls_s": {name: [round(v, 6) for v in vs] for name, vs in calls_s.items()}}
    if peaks is None or rounds < MIN_FOLD_WARMUP:
        return None
    new = _compiled_frames() - compiled_before[-2]
    return None if new == 0 else (
        f"{new} frame(s) compiled in the last {MIN_FOLD_WARMUP} warm-up rounds: the read call may not be a "
        "steady-state one (a CUDA graph's recording), so a pass after the rounds")


def _warmup_floor(folded: bool, compiled_before: list[int]) -> int:
    """The fewest warm-up rounds a budget may leave: the fold reads its peak on the last of 2
    rounds that compiled nothing, so a round 0 that compiled (a recompile on the second call)
    cannot be one of them; without the fold, 1."""
    if not folded:
        return 1
    return MIN_FOLD_WARMUP + (1 if _compiled_frames() > compiled_before[0] else 0)


def _compiled_frames() -> int:
    """Frames Dynamo has compiled in this process so far (recompiles included)."""
    import torch._dynamo.utils as dutils

    return int(dutils.counters["frames"]["total"])


def _restore_probe(schedule: ProbeSchedule) -> None:
    """The probe's kernels and buffers back for the samples after the rounds; a failure is
    the probe's (sampling stops), never the case's."""
    try:
        schedule.probe.restore()
    except Exception as exc:  # noqa: BLE001 - a probe failure is data, not a case failure
        schedule.probe.sample_error = f"{type(exc).__name__}: {exc}"[:500]


def case_threads(device: Any) -> int:
    """Threads the case's timed calls run on: torch's intra-op pool on CPU, the one host
    thread that launches the work on an accelerator."""
    import torch

    return max(int(torch.get_num_threads()), 1) if device.type == "cpu" else 1


def _start_probe(spec: WorkerSpec, device: Any, timer: Any, clock: Clock,
                 threads: int = 1) -> ProbeSchedule | str | None:
    """The machine-speed probe's schedule, kernels warmed up and the samples before the
    rounds taken, on the case's `threads` (a
    one-thread probe misses a neighbour that oversubscribes a multi-thread case); None when
    switched off (spec "probe": false); "Type: message" when it could not start: the case
    still runs, and compare has no probe for it."""
    if not spec.probe:
        return None
    try:
        probe = make_probe(device.type, device.torch_name, timer, clock, threads=threads)
        probe.warm_up()
    except Exception as exc:  # noqa: BLE001 - a probe failure is data, not a case failure
        return f"{type(exc).__name__}: {exc}"[:500]
    schedule = ProbeSchedule(probe)
    schedule.before_rounds()
    return schedule


def memory(state: CaseState) -> None:
    """Peak memory per variant: from the timed rounds where they read it (RoundPeaks), else
    in a pass of its own (MPS; a CPU whose RSS high-water mark does not reset); with the
    samples, the timing blocks."""
    mem = {name: _folded_memory(state, name) or memory_pass(state.device, fn) for name, fn in state.variants.items()}
    record = state.record
    record.eager = _variant_block(state.samples["eager"], state.eager_first_s, state.inner["eager"], mem["eager"],
                                  state.cpu_samples.get("eager"))
    if state.compiled_first_s is not None:
        record.compiled = _variant_block(state.samples["compiled"], state.compiled_first_s,
                                         state.inner["compiled"], mem["compiled"], state.cpu_samples.get("compiled"))


def _folded_memory(state: CaseState, name: str) -> Memory | None:
    return state.round_peaks.memory(name) if state.round_peaks is not None else None


def break_cost(state: CaseState) -> None:
    """Eager time and runs per graph break (harness/measure/break_cost.py): a few profiled
    calls after the timed rounds. A diagnostic: its failure is a note, never the case's status."""
    from harness.measure.break_cost import measure_break_costs

    try:
        state.break_costs = measure_break_costs(state.variants["compiled"], state.device.synchronize)
    except Exception as exc:  # noqa: BLE001 - failures are data
        state.break_costs = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        state.record.notes.append(f"graph-break cost pass failed: {type(exc).__name__}: {str(exc)[:200]}")


def _has_graph_breaks(state: CaseState) -> bool:
    return state.has_compiled and state.observer is not None and bool(state.observer.snapshot()["graph_breaks"])


def finish_warm_compile(state: CaseState) -> None:
    """The --warm-compile process's record: compile time, stages, cache layers, compile memory."""
    _fill_compile_metrics(state.record, state.first_snapshot, state.first_snapshot, state.first_snapshot)


def finish(state: CaseState) -> None:
    """Compile metrics, derived figures, and the verdicts a measured case can still get
    (accuracy failure, graph breaks under fullgraph=True)."""
    record, compiler = state.record, state.compiler
    if state.observer is not None:
        _fill_compile_metrics(record, state.observer.snapshot(), state.first_snapshot, state.warm_snapshot)
        _fill_compiler_effects(record, compiler, state.device.type, state.built.model)
        _fill_break_costs(record, state.break_costs)
    _fill_derived_metrics(record, state.prepared, state.policy)
    record.metrics.update(state.prepared.metrics)
    accuracy = record.metrics.accuracy
    if accuracy.status == "fail":
        record.status = "fail_accuracy"
        record.error = error_info("AccuracyError", accuracy.reason or "", phase="accuracy")
    if compiler.fullgraph and record.metrics.get("graph_breaks"):
        first = record.graph_break_reasons[0] if record.graph_break_reasons else {}
        record.status = "fail_compile"
        record.error = error_info("GraphBreak", f"fullgraph=True but {record.metrics['graph_breaks']} graph break(s): "
                                  f"{first.get('reason', '')} at {first.get('location', '?')}", phase="compile")


@dataclass(frozen=True)
class Phase:
    """One named step of run_case; `when` skips it (and its phase_s entry) for cases it does not concern."""

    name: str
    run: Callable[[CaseState], None]
    when: Callable[[CaseState], bool] | None = None


# The order of a case (DESIGN.md protocol). A phase's name is what a failure inside it
# reports as error.phase and what metrics.phase_s times; "compile" failures are the
# compiler's (COMPILE_PHASES). The last phase's time is not recorded (nothing closes it).
PHASES: tuple[Phase, ...] = (
    Phase("setup", setup),
    Phase("isa_probe", isa_probe),
    Phase("build", build),
    Phase("fp64_reference", fp64_reference,
          when=lambda s: s.has_compiled and not s.compile_only and _dynamo_rule(s) is not None),
    Phase("eager_first_call", eager_first_call),
    Phase("compile", compile_first_call, when=lambda s: s.has_compiled),
    Phase("accuracy", accuracy, when=lambda s: s.has_compiled and not s.compile_only),
    Phase("quiet", wait_for_quiet, when=lambda s: quiet.active() and not s.compile_only),
    Phase("measure", measure, when=lambda s: not s.compile_only),
    Phase("memory", memory, when=lambda s: not s.compile_only),
    Phase("break_cost", break_cost, when=lambda s: not s.compile_only and _has_graph_breaks(s)),
    Phase("done", finish, when=lambda s: not s.compile_only),
    Phase("done", finish_warm_compile, when=lambda s: s.compile_only and s.has_compiled),
)


def new_case_state(spec: WorkerSpec, clock: Clock = time.perf_counter_ns) -> CaseState:
    """The state a case starts its phases with: an ok record, the first phase's clock started."""
    return CaseState(spec=spec, clock=clock, record=Record(case=spec.case, status="ok", metrics={"phase_s": {}}),
                     phase_started=clock())


def walk_phases(state: CaseState, stop_before: str | None = None) -> None:
    """Run PHASES over `state` in order (each whose `when` holds), timing each, up to and not
    including the first one named `stop_before` (None: all). Exceptions propagate: run_case
    makes them the record's status; a benchmark that stops before `measure` times its own."""
    for phase in PHASES:
        if phase.name == stop_before:
            return
        if phase.when is not None and not phase.when(state):
            continue
        if phase.name != state.phase:
            state.enter(phase.name)
        phase.run(state)


def run_case(spec: WorkerSpec | dict[str, Any], clock: Clock = time.perf_counter_ns) -> Record:
    """Measure one case in this process. Never raises for a case failure: returns a Record.
    (A dict spec is read as WorkerSpec.from_dict: tests and older callers build dicts.)"""
    spec = WorkerSpec.coerce(spec)
    if spec.case is None:
        raise ValueError("a case spec without a case")
    state = new_case_state(spec, clock)
    record = state.record
    try:
        walk_phases(state)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes data
        if isinstance(exc, KeyboardInterrupt):
            raise
        record.status = classify_exception(exc, state.phase)
        record.error = exception_info(exc, state.phase)
    return record


def _accuracy_output(prepared: Any, variant: str, out: Any) -> Any:
    """What accuracy compares for a first-call output: cloned (later calls may reuse its
    buffers) and seen through the scenario's accuracy_view."""
    out = clone_outputs(out)
    if prepared.accuracy_view:
        out = clone_outputs(prepared.accuracy_view(variant, out))
    return out


def _fill_compile_metrics(record: Record, snap: dict[str, Any], first: dict[str, Any], warm: dict[str, Any]) -> None:
    m = record.metrics
    for key in ("graph_breaks", "unique_graph_breaks", "graphs", "recompiles", "frames_total", "frames_ok",
                "calls_captured", "cudagraph_skips", "compiled_frames"):
        m[key] = snap[key]
    # a compiled train step typically recompiles once on its 2nd call (optimizer state
    # appears): that is warm-up. Recompiles in the timed rounds are a steady-state problem.
    m["recompiles_during_warmup"] = warm["recompiles"] - first["recompiles"]
    m["recompiles_steady_state"] = snap["recompiles"] - warm["recompiles"]
    m["compile_time_total_s"] = snap["compile_breakdown_s"]["total"]
    m["frames_fell_back"] = max(snap["frames_total"] - snap["frames_ok"], 0)
    m["cache"] = snap["cache"]
    m["cache_layers"] = snap["cache_layers"]
    m["ops_per_graph"] = snap["ops_per_graph"]
    m["structured_logging_overhead_s"] = snap["structured_logging_overhead_s"]
    record.graph_break_reasons = snap["graph_break_reasons"]
    record.recompile_reasons = snap["recompile_reasons"]
    if snap["cudagraph_skips"]:
        record.notes.append(f"CUDA graphs were skipped {snap['cudagraph_skips']} time(s): the mode's cudagraph effect did not apply")


def _fill_break_costs(record: Record, costs: dict[str, Any] | None) -> None:
    from harness.measure.break_cost import merge_into_reasons

    if costs is None:
        return
    record.metrics["graph_break_cost"] = costs
    if "error" not in costs:
        record.metrics["outside_graphs_s_per_call"] = costs["outside_graphs_s_per_call"]
        record.graph_break_reasons = merge_into_reasons(record.graph_break_reasons, costs)


def _is_skip(exc: BaseException) -> bool:
    from compiler import NotApplicableError  # a config that cannot apply to this model

    return isinstance(exc, (CaseSkipped, NotApplicableError))


def _fill_compiler_effects(record: Record, compiler: CompilerConfig, device_type: str, model: Any) -> None:
    """Autotune counts and notes for modes that did less than their name says here."""
    import torch._dynamo.utils as dutils

    from compiler.effects import describe_effects

    metrics, notes = describe_effects(compiler, device_type, dutils.counters.get("inductor", {}), model)
    record.metrics.update(metrics)
    record.notes.extend(notes)


def _fill_derived_metrics(record: Record, prepared: Any, policy: StopPolicy) -> None:
    from harness.model.stats import ratio_of_medians_ci

    m = record.metrics
    eager, compiled = record.eager, record.compiled  # both measured by now (the memory phase)
    median = (compiled or eager).median
    m["latency_s"] = median
    m["throughput"] = (prepared.units_per_call / median) if median else None
    m["throughput_unit"] = f"{prepared.unit}/s"
    m["units_per_call"] = prepared.units_per_call
    m["policy"] = policy.to_dict()
    if compiled is not None:
        ci = ratio_of_medians_ci(eager.samples_s, compiled.samples_s)
        if ci:
            m["speedup"], m["speedup_ci_low"], m["speedup_ci_high"] = ci
        ep, cp = eager.peak_memory_bytes, compiled.peak_memory_bytes
        m["compression_ratio"] = (ep / cp) if ep and cp else None
        m["eager_throughput"] = prepared.units_per_call / eager.median


def main(argv: list[str] | None = None) -> int:
    """The worker's entry: SPEC.json (a WorkerSpec) in, OUT.json out: a Record for the
    `case` task, the task function's dict for any other (harness/measure/spec.py)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m harness.measure.worker SPEC.json OUT.json", file=sys.stderr)
        return 2
    spec = WorkerSpec.read(argv[0])
    if spec.task != CASE_TASK:
        write_json_atomic(argv[1], json_safe(task_function(spec.task)(spec.payload)))
        return 0
    record = run_case(spec)
    record.worker = {"pid": os.getpid(), "python": sys.executable}
    if quiet.active():  # --compile-overlap: the lock's moments, for the runner's overlap figures
        quiet.mark("record_at")
        record.worker["quiet"] = quiet.times()
    if os.environ.get(OWNED_PAGES_ENV):  # a forked case: the server's pages it copied before starting
        record.worker["owned_pages"] = json.loads(os.environ[OWNED_PAGES_ENV])
    write_json_atomic(argv[1], json_safe(record.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
