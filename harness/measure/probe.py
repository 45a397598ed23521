"""Machine-speed probe: fixed reference kernels timed next to the case, in every worker.

A latency change between two processes is either the code under test or the machine (a
neighbour on the other core, a frequency change, a busier memory bus). Eager is no control
for that when the change under test touches eager too (a torch or model change), so each
worker also times a small, fixed, versioned set of kernels that no change to the case can
touch. The CPU set calls no torch at all (numpy and the interpreter), so a torch change
cannot move it either; the GPU set has to use the device through torch, so compare trusts it
only between runs of one torch build (`probe_uses_torch`). compare (harness/analysis/compare.py) reads them: the probe moved -> machine drift,
normalised out; the probe steady and eager moved -> a real whole-model change.

The kernels run before the case's timed rounds and after them (`ProbeSchedule`), never
inside a round nor between two: a probe sample between rounds, though outside the timer,
slowed the samples after it (benchmarks/probe_between_rounds.py). Six samples a process,
a few milliseconds of wall time (benchmarks/probe_overhead.py measures it).

Changing a kernel changes what the numbers mean: bump its set's version. compare only
normalises with probes of the same version on both sides.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# cpu-1 (before 2026-11-30 19:00) timed torch ops; cpu-2 and gpu-1 (before 2026-12-01 19:10)
# are the same kernels as cpu-3 and gpu-2, sampled between the timed rounds instead of before
# and after them: a different reading (on an H200 the edge samples read 30-38% faster than the
# between-rounds ones, results/baselines/h200-2026-12-01d), so compare does not mix the two
CPU_PROBE_VERSION = "cpu-3"
GPU_PROBE_VERSION = "gpu-2"
NUMPY_ONLY_SETS = ("cpu-2", CPU_PROBE_VERSION)  # the CPU sets that call no torch (with their xN forms)
# one probe kernel call lasts about this long (tiny kernels time mostly the timer itself)
KERNEL_TARGET_S = 50e-6
PROBE_KEY = "machine_probe"  # where the worker stores it in record.metrics
MIN_SAMPLES = 5  # per kernel, before compare trusts a process's probe
EDGE_SAMPLES = 3  # probe samples before the timed rounds, and again after them: MIN_SAMPLES and one more
GANG_TIMEOUT_S = 60.0  # a multi-thread probe call that waits this long for its threads fails


@dataclass(frozen=True)
class ProbeKernel:
    name: str
    fn: Callable[[], Any]
    inner: int  # calls per sample, fixed by the kernel set's version (not calibrated: comparable)
    gang: ThreadGang | None = None  # the threads it runs on, when more than the caller's


def _numpy_kernels() -> tuple[Callable[[], Any], Callable[[], Any]]:
    """The GEMM and pointwise kernels of set cpu-3 (and cpu-2), each call with buffers of its own."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64), dtype=np.float32)
    b = rng.standard_normal((64, 64), dtype=np.float32)
    x = rng.standard_normal(16384, dtype=np.float32)
    out = np.empty_like(x)

    def gemm() -> Any:
        return np.matmul(a, b)

    def pointwise() -> Any:
        np.multiply(x, np.float32(1.0001), out=out)
        return np.add(out, np.float32(0.5), out=out)

    return gemm, pointwise


def _python_loop() -> int:
    total = 0
    for i in range(300):
        total += i * i
    return total


class ThreadGang:
    """`threads - 1` helper threads and the caller run one task each, together: every run
    starts and ends at a barrier, so it lasts until the slowest thread is done, as an
    OpenMP parallel region does. A neighbour that takes a core from any one thread
    therefore shows in the run's time, as it does in a multi-threaded case's."""

    def __init__(self, threads: int) -> None:
        import threading

        self.threads = threads
        # a timeout so that a helper that never arrives fails the probe, never hangs the case
        self._start = threading.Barrier(threads, timeout=GANG_TIMEOUT_S)
        self._end = threading.Barrier(threads, timeout=GANG_TIMEOUT_S)
        self._tasks: Sequence[Callable[[], Any]] = ()
        self._errors: list[BaseException] = []
        self._helpers = [threading.Thread(target=self._serve, args=(i,), daemon=True, name=f"probe-gang-{i}")
                         for i in range(1, threads)]
        for helper in self._helpers:
            helper.start()

    def _serve(self, index: int) -> None:
        import threading

        try:
            while True:
                self._start.wait()
                try:
                    self._tasks[index]()
                except Exception as exc:  # noqa: BLE001 - handed to the caller, which raises it
                    self._errors.append(exc)
                self._end.wait()
        except threading.BrokenBarrierError:  # close(), or the caller gave up waiting
            return

    def run(self, tasks: Sequence[Callable[[], Any]]) -> None:
        """tasks[0] on the calling thread, tasks[i] on helper i; returns when all are done."""
        self._tasks = tasks
        self._start.wait()
        tasks[0]()
        self._end.wait()
        if self._errors:
            raise self._errors.pop()

    def close(self) -> None:
        """End the helpers (they leave their barrier wait) and wait for them."""
        self._start.abort()
        self._end.abort()
        for helper in self._helpers:
            helper.join(timeout=5)


def _gang_kernel(gang: ThreadGang, make: Callable[[], Callable[[], Any]], reps: int) -> Callable[[], None]:
    """One call: every thread of the gang runs its own copy of the kernel `reps` times."""
    copies = [make() for _ in range(gang.threads)]

    def task(fn: Callable[[], Any]) -> Callable[[], None]:
        def loop() -> None:
            for _ in range(reps):
                fn()
        return loop

    tasks = [task(fn) for fn in copies]
    return lambda: gang.run(tasks)


def cpu_probe_version(threads: int = 1) -> str:
    """cpu-3 on one thread; `cpu-3xN` for the set run on N threads (compare normalises only
    between equal versions, so cases of different thread counts never mix)."""
    return CPU_PROBE_VERSION if threads <= 1 else f"{CPU_PROBE_VERSION}x{threads}"


def cpu_kernels(threads: int = 1) -> list[ProbeKernel]:
    """CPU set cpu-3 (cpu-2: the same, sampled between rounds): a 64x64 fp32 GEMM and a
    16k-element pointwise chain in numpy, and a Python loop. They touch the FPU/caches, memory, and the interpreter: what a CPU case
    spends time on. None of them calls torch: the probe must stay still when the torch under
    test changes (a slower dispatcher or `mul` is exactly what `ab --env`, `versions`,
    `bisect` and a torch PR gate look for; a torch probe would move with it and compare would
    divide the regression out as machine drift). cpu-1 timed torch.mm / torch.mul.

    `threads` > 1 (the case's thread count, set `cpu-3xN`): the three kernels above, plus
    `gemm_xN` and `pointwise_xN`, the same GEMM and pointwise chain on N threads at once
    (`ThreadGang`; numpy releases the GIL inside both), 8 (GEMM) or 16 (pointwise) kernel
    calls per thread a call, ending at a barrier as an OpenMP region does. They see what an
    N-thread case sees: a single-threaded probe moved -20% next to a hog on both cores while
    a 2-thread case moved +2,460%. The one-thread kernels stay in the set because compare's
    factor is the median over kernels and the gang kernels are noisier between quiet
    processes (score spread 8.3% vs 2.2% here over 6 processes, docs/GATING.md
    "Contention"): with 3 of 5 kernels on one thread, normalisation keeps cpu-2's noise,
    and the gang kernels' medians show oversubscription in the record."""
    gemm, pointwise = _numpy_kernels()
    single = [ProbeKernel("gemm", gemm, 4), ProbeKernel("pointwise", pointwise, 8),
              ProbeKernel("python", _python_loop, 4)]
    if threads <= 1:
        return single
    gang = ThreadGang(threads)
    return single + [
        ProbeKernel(f"gemm_x{threads}", _gang_kernel(gang, lambda: _numpy_kernels()[0], 8), 1, gang),
        ProbeKernel(f"pointwise_x{threads}", _gang_kernel(gang, lambda: _numpy_kernels()[1], 16), 1, gang),
    ]


def gpu_kernels(device: str) -> list[ProbeKernel]:
    """GPU set gpu-2 (gpu-1 sampled between rounds): a 1024^2 fp16 GEMM and a 32 MiB device-to-device copy: the compute and
    memory sides of a GPU, each small enough to leave the case's timing alone. They must use
    the device, so they run on the torch (and CUDA/ROCm) under test: `probe_uses_torch` says
    so, and compare does not normalise by them when the two sides' torch builds differ."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(1024, 1024, generator=gen).to(device=device, dtype=torch.float16)
    b = torch.randn(1024, 1024, generator=gen).to(device=device, dtype=torch.float16)
    src = torch.randn(8 * 1024 * 1024, generator=gen).to(device)
    dst = torch.empty_like(src)

    def gemm() -> Any:
        return torch.mm(a, b)

    def copy() -> Any:
        return dst.copy_(src)

    return [ProbeKernel("gemm", gemm, 4), ProbeKernel("copy", copy, 4)]


def probe_uses_torch(version: Any) -> bool:
    """Whether a probe set's kernels call torch (cpu-1, gpu-1, gpu-2; unknown versions:
    assume so). Such a probe measures the torch build as well as the machine, so it tells
    machine drift apart only between runs of the same torch build. cpu-2, cpu-3 and their
    multi-thread forms (cpu-3xN) call numpy only."""
    sets = "|".join(re.escape(v) for v in NUMPY_ONLY_SETS)
    return not (isinstance(version, str) and re.fullmatch(rf"(?:{sets})(x\d+)?", version))


@dataclass
class MachineProbe:
    """Times the kernel set; one `sample()` times each kernel once (inner calls each)."""

    kernels: Sequence[ProbeKernel]
    timer: Callable[[Callable[[], Any], int], float]  # (fn, inner) -> seconds per call
    version: str
    clock: Callable[[], int] = time.perf_counter_ns  # injectable: tests count the cost without sleeping
    samples: dict[str, list[float]] = field(default_factory=dict)
    spent_s: float = 0.0  # wall seconds spent probing, timer overhead included
    threads: int = 1  # threads the kernels run on (the case's)
    sample_error: str | None = None  # why sampling stopped early ("Type: message"), if it did
    # builds the kernels afresh (new buffers): what lets `release` free a GPU set's device
    # buffers while the case's peak is read and `restore` bring them back (None: cannot)
    remake: Callable[[], Sequence[ProbeKernel]] | None = None

    def sample(self) -> None:
        start = self.clock()
        for k in self.kernels:
            self.samples.setdefault(k.name, []).append(self.timer(k.fn, k.inner))
        self.spent_s += (self.clock() - start) / 1e9

    def warm_up(self, passes: int = 3) -> float:
        """Run every kernel once, then `passes` unrecorded samples exactly as `sample()` takes
        them (timer and sync included); return the cheapest pass's wall seconds (what one
        sample costs; the cheapest, so that one preempted pass cannot inflate it)."""
        for k in self.kernels:
            k.fn()
        cheapest = math.inf
        for _ in range(passes):
            start = self.clock()
            for k in self.kernels:
                self.timer(k.fn, k.inner)
            cheapest = min(cheapest, (self.clock() - start) / 1e9)
        return cheapest

    def release(self) -> bool:
        """Drop the kernels, and with them the buffers only their closures hold (the GPU
        set's 68 MiB of device memory), until `restore()`; False (nothing dropped) without
        `remake`. Then no probe buffer is alive while the case's peak is read, so nothing
        has to be subtracted from it: an allocator delta around the probe's start also
        counted what else the process allocated then (CUDA-graph cases on an H200: 32 MiB
        more, likely the cuBLAS workspace a capture frees and the probe's GEMM re-made)."""
        if self.remake is None:
            return False
        self.kernels = ()
        return True

    def restore(self) -> None:
        """The kernels again (`remake`: fresh buffers, the same values), each run once
        unrecorded as `warm_up` starts, so the samples after the rounds time no first touch."""
        if self.remake is None or self.kernels:
            return
        self.kernels = self.remake()
        for k in self.kernels:
            k.fn()

    def close(self) -> None:
        """Stop the kernels' helper threads (a multi-thread CPU set's); sampling ends."""
        for k in self.kernels:
            if k.gang is not None:
                k.gang.close()

    def to_dict(self, case_timed_s: float | None = None) -> dict[str, Any]:
        """What the record keeps: version, raw samples per kernel, the cost."""
        return {"version": self.version, "threads": self.threads,
                "samples_s": {k: list(v) for k, v in self.samples.items()},
                "n": min((len(v) for v in self.samples.values()), default=0), "spent_s": self.spent_s,
                "share_of_case": (self.spent_s / case_timed_s) if case_timed_s else None,
                **({"sample_error": self.sample_error} if self.sample_error else {})}


def make_probe(device_type: str, torch_device: str, timer: Callable[[Callable[[], Any], int], float],
               clock: Callable[[], int] = time.perf_counter_ns, threads: int = 1) -> MachineProbe:
    """The kernel set for this device type (GPU set for any accelerator, CPU set otherwise,
    on the case's `threads`)."""
    if device_type == "cpu":
        return MachineProbe(cpu_kernels(threads), timer, cpu_probe_version(threads), clock, threads=threads)
    return MachineProbe(gpu_kernels(torch_device), timer, GPU_PROBE_VERSION, clock,
                        remake=lambda: gpu_kernels(torch_device))


@dataclass
class ProbeSchedule:
    """When the probe samples: `edge_samples` times before the case's timed rounds and as
    many times after them, never between two rounds. A probe sample between rounds, though
    outside the timer, slowed the samples after it: on a 2-core CPU the sample right after
    one was 1.6-7.6x (eager) and 3.5-19x (compiled) the others' median for a tiny MLP, and
    the case's medians moved +0.5-1.6% / +1.1-3.1%, even its per-round budget check alone
    (benchmarks/probe_between_rounds.py, docs/GATING.md); at the edges: nothing measurable.
    The worker takes the first edge before the case's warm-up calls, so untimed calls
    separate it from the first timed sample too. Six samples in all, cheap (a few hundred
    microseconds each) and enough for compare (MIN_SAMPLES); what the record's samples
    describe is the machine right before and right after the case's rounds."""

    probe: MachineProbe
    edge_samples: int = EDGE_SAMPLES
    timed_s: float = 0.0  # the case's timed seconds, for the record's share_of_case

    def before_rounds(self) -> None:
        self._take()

    def after_rounds(self, timed_s: float) -> None:
        self.timed_s = timed_s
        self._take()

    def _take(self) -> None:
        for _ in range(self.edge_samples):
            if self.probe.sample_error:
                return
            try:
                self.probe.sample()
            except Exception as exc:  # noqa: BLE001 - a probe failure is data: sampling stops, the case goes on
                self.probe.sample_error = f"{type(exc).__name__}: {exc}"[:500]
                return


# ---------------------------------------------------------------- reading a record's probe

def probe_block(metrics: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A record's probe block, or None when it has none usable."""
    block = metrics.get(PROBE_KEY) if isinstance(metrics, Mapping) else None
    if not isinstance(block, Mapping) or not isinstance(block.get("samples_s"), Mapping):
        return None
    return block


def kernel_medians(block: Mapping[str, Any] | None, min_samples: int = MIN_SAMPLES) -> dict[str, float] | None:
    """Median seconds per kernel, or None when any kernel has fewer than `min_samples`
    finite samples: a median of two, one of them preempted, says nothing about the machine."""
    if block is None:
        return None
    out = {}
    for name, values in block["samples_s"].items():
        if not isinstance(values, (list, tuple)):  # a damaged block (null, a number): no usable probe
            return None
        finite = [float(v) for v in values
                  if isinstance(v, (int, float)) and not isinstance(v, bool) and _finite_positive(v)]
        if len(finite) < min_samples:
            return None
        out[str(name)] = statistics.median(finite)
    return out or None


def _finite_positive(value: float) -> bool:
    try:
        return math.isfinite(value) and value > 0
    except OverflowError:  # an int beyond a float's range
        return False


def probe_score(block: Mapping[str, Any] | None) -> float | None:
    """One number for the machine's speed in that process: the geometric mean over kernels
    of each kernel's median seconds (lower: faster machine). None without usable samples."""
    medians = kernel_medians(block)
    if medians is None:
        return None
    return math.exp(sum(math.log(v) for v in medians.values()) / len(medians))


def relative_slowness(blocks: Sequence[Mapping[str, Any]], n_base: int) -> list[float] | None:
    """Per process, how much slower its machine was than the base processes' average: for
    each kernel, its median over the base side's geometric mean of that kernel, then the
    median over kernels (one kernel hit by a neighbour cannot swing the factor alone).
    `blocks`: base processes first (n_base of them), then head. None if any is unusable."""
    medians = [kernel_medians(b) for b in blocks]
    if any(m is None for m in medians) or n_base < 1:
        return None
    names = set(medians[0])  # type: ignore[arg-type]
    if any(set(m) != names for m in medians):  # type: ignore[arg-type]
        return None
    ref = {k: math.exp(sum(math.log(m[k]) for m in medians[:n_base]) / n_base) for k in names}  # type: ignore[index]
    return [statistics.median(m[k] / ref[k] for k in names) for m in medians]  # type: ignore[index]
