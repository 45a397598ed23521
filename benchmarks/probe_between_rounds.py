"""Does work run between timed rounds (the machine probe; on a GPU the peak-memory hooks) slow
the samples that follow it? Measured in one process, so a busy neighbour hits every condition alike.

    PYTHONPATH=$PWD python3 benchmarks/probe_between_rounds.py --blocks 40   # CPU: ~100 s on 2 busy cores
    PYTHONPATH=$PWD python3 benchmarks/probe_between_rounds.py --device cuda --blocks 12 --max-wall-s 100 --out $OUT/pbr.json
        # one H200: about 60-90 s (two compiles, then 12 block sets of 8 loops a case); --max-wall-s
        # cuts the block sets short (3 at least) so that the run stays under 120 s

Each case is built by the worker's own phases (harness/measure/worker.py PHASES: setup,
isa_probe, build, eager first call, compile, accuracy) in this process, planned as the
runner plans it; then, instead of the worker's measure phase, `--blocks` block sets of
timed loops run, one loop per condition in each set (the order rotates from set to set).
Every loop is what the worker's measure phase runs (measure_interleaved over eager and
compiled, the worker's timer and calibration, the policy of the case's suite: a loop is
one worker's measurement), with only the work around the rounds changed:

  off          nothing between rounds
  noop         an after_round hook that does nothing (what calling a hook at all does)
  probe        the machine probe's schedule between rounds, as the worker ran it before
               this benchmark (BetweenRounds, a copy; the schedule starts afresh per loop)
  edges        the worker's schedule since: ProbeSchedule's samples (EDGE_SAMPLES) right
               before the first round and after the last, nothing between rounds (the
               worker also puts the case's warm-up calls between the first edge and the
               rounds; here the edge comes right before them, the harder test)
  peaks        (allocator devices) the peak reset before and read after every sample
               (RoundPeaks around every sample: the worker's GPU memory fold until it
               moved to the last warm-up call on 2026-12-01, after this benchmark's H200 run)
  probe+peaks  (allocator devices) both: the worker's GPU way with the probe between rounds
  edges+peaks  (allocator devices) both, probe at the edges
  nestedpeaks  (CUDA) as peaks, the counters read through memory_stats_as_nested_dict
               (NestedDictPeaks: the same counters, less host work between samples)

Per variant and condition the table gives the median over loops of the loop's median
latency, and the change against `off`: the median over block sets of the paired ratio
(loop median / the same set's `off` loop median) with a 95% bootstrap CI (scipy), and a
Mann-Whitney p-value on the loop medians. A CI that excludes 1.00 is a perturbation.
`next/rest` (probe conditions): within the loops, the median of the samples of the round
right after a gap in which the probe sampled over the median of the other samples (the
direct view: the sample after the probe); `gaps` how many such gaps there were per loop;
`hook us` (peak conditions) the host microseconds the reset and read cost per sample, and
`peak MiB` the highest peak they read (peaks and nestedpeaks read the same counters).
The load average before and after is printed (the box's load, which the pairing absorbs).
Without CUDA, `--device cuda` exits 2 with one line saying so; a case that fails is reported
(one line, `error` in the JSON) and the others still run (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# workload/scenario/compiler/size; CPU: the smoke suite's tiny MLPs (where the drift was seen);
# CUDA: the tiny deep MLP (launch-bound: a hook's cost is largest next to it) and the gpu
# suite's full-size one in bfloat16
CPU_CASES = ("mlp-classic/forward/inductor/tiny", "mlp-deep/forward/inductor/tiny")
CUDA_CASES = ("mlp-deep/forward/inductor/tiny", "mlp-deep/forward/inductor/full")
# the between-rounds schedule's constants as they were (harness/measure/probe.py DEFAULT_BUDGET,
# MAX_SAMPLES_PER_GAP): a share of the timed seconds, samples per gap at most
OLD_BUDGET, OLD_SAMPLES_PER_GAP = 0.005, 5
CPU_POLICY_SUITE, CUDA_POLICY_SUITE = "smoke", "gpu"
MIN_BLOCKS = 3  # block sets a CI needs at the least
CUDA_MIN_TIME_S = 0.25  # a shorter loop than the gpu suite's 1 s: more loops in the device budget


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--case", action="append", dest="cases", metavar="WORKLOAD/SCENARIO/COMPILER/SIZE",
                   help=f"repeatable; default on cpu: {', '.join(CPU_CASES)}; on cuda: {', '.join(CUDA_CASES)}")
    p.add_argument("--blocks", type=int, default=None, help="block sets per case (default: 40 on cpu, 12 on cuda)")
    p.add_argument("--min-time-s", type=float, default=None,
                   help=f"timed seconds per loop (default: the suite's on cpu, {CUDA_MIN_TIME_S} on cuda)")
    p.add_argument("--max-wall-s", type=float, default=None,
                   help="stop each case's block sets (after 3 at least) once the run is past its share of this")
    p.add_argument("--dtype", help="default: float32 on cpu, bfloat16 on cuda (the gpu suite's)")
    p.add_argument("--out", help="write the JSON (loop medians, ratios, load) here")
    args = p.parse_args(argv)
    args.blocks = args.blocks if args.blocks is not None else (40 if args.device == "cpu" else 12)
    if args.blocks < MIN_BLOCKS:
        p.error("--blocks must be at least 3 (a CI needs several block sets)")
    return args


def cuda_missing_reason() -> str | None:
    import torch

    if torch.cuda.is_available():
        return None
    return f"CUDA is not available here (torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'})"


# ---- building a case as the worker does ------------------------------------------------------

def plan(case_text: str, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The WorkerSpec the runner would make for this case, and the loop's stop policy."""
    from harness.measure.timing import StopPolicy
    from harness.run.runner import PlanError, RunOptions, make_spec, plan_cases
    from suites import get_suite

    parts = case_text.split("/")
    if len(parts) != 4:
        raise PlanError(f"--case {case_text!r} is not WORKLOAD/SCENARIO/COMPILER/SIZE, e.g. mlp-deep/forward/inductor/tiny")
    workload, scenario, compiler, size = parts
    dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    opts = RunOptions(workloads=[workload], scenarios=[scenario], compilers=[compiler], devices=[args.device],
                      sizes=[size], dtypes=[dtype], preload=False)
    cases, _ = plan_cases(opts)
    suite = get_suite(CUDA_POLICY_SUITE if args.device == "cuda" else CPU_POLICY_SUITE)
    policy = {**StopPolicy().to_dict(), **dict(suite.policy)}
    min_time = args.min_time_s if args.min_time_s is not None else (CUDA_MIN_TIME_S if args.device == "cuda" else None)
    if min_time is not None:
        policy["min_time_s"] = min_time
    return make_spec(cases[0], opts, policy, tempfile.mkdtemp(prefix="pbr-isa-")), policy


def build_case(spec: Any) -> Any:
    """The worker's phases up to (not including) `measure`, as run_case walks them."""
    from harness.measure.worker import new_case_state, walk_phases

    state = new_case_state(spec)
    walk_phases(state, stop_before="measure")
    if "compiled" not in state.variants:
        raise RuntimeError(f"{spec.case.case_id}: no compiled variant after the accuracy phase")
    return state


@dataclass
class Rig:
    """What every loop of one case shares: the worker's timer, calibration and probe."""

    state: Any
    timer: Callable[[Callable[[], Any], int], float]
    probe: Any  # MachineProbe, warmed up
    probe_cost_s: float
    per_sample_peaks: bool  # the device's allocator peak is read around each sample (GPU)
    policy: Any = None


def make_rig(state: Any) -> Rig:
    """Warm-up, calibration and probe as the worker's measure phase makes them."""
    from harness.measure.probe import make_probe
    from harness.measure.timing import EventTimer, HostTimer, calibrate_inner
    from harness.measure.worker import PER_SAMPLE_PEAK_KINDS, case_threads

    device, policy = state.device, state.policy
    timer: Callable[[Callable[[], Any], int], float]
    timer = EventTimer(device.event_pair, device.synchronize) if device.has_events else HostTimer(device.synchronize)
    for _ in range(policy.warmup):
        for fn in state.variants.values():
            fn()
    state.inner = {name: calibrate_inner(timer, fn, policy.target_sample_s) for name, fn in state.variants.items()}
    probe = make_probe(device.type, device.torch_name, timer, time.perf_counter_ns, threads=case_threads(device))
    cost = probe.warm_up()
    return Rig(state, timer, probe, cost, device.memory_kind in PER_SAMPLE_PEAK_KINDS, replace(policy, warmup=0))


# ---- the conditions --------------------------------------------------------------------------

@dataclass
class Loop:
    """One timed loop's outcome: samples per variant and the rounds the probe sampled after."""

    samples: dict[str, list[float]]
    probe_gaps: list[int] = field(default_factory=list)  # round indices after which the probe sampled
    hook_s: dict[str, float] = field(default_factory=dict)  # per variant: seconds per sample in the peak hooks
    peak_bytes: dict[str, int] = field(default_factory=dict)  # per variant: the peak the hooks read


def conditions(rig: Rig) -> list[str]:
    base = ["off", "noop", "probe", "edges"]
    if not rig.per_sample_peaks:
        return base
    cuda = ["nestedpeaks"] if getattr(rig.state.device, "type", "") == "cuda" else []
    return base + ["peaks", "probe+peaks", "edges+peaks", *cuda]


class NestedDictPeaks:
    """A CUDA device's peak reset and read through torch.cuda.memory_stats_as_nested_dict
    (one nested dict built in C++) instead of memory_allocated / max_memory_allocated, each
    of which flattens all of memory_stats in Python: the same counters at a smaller host
    cost between samples (condition `nestedpeaks`: is the hooks' cost what perturbs)."""

    memory_kind = "device_allocator"

    def __init__(self, index: int) -> None:
        self.index = index

    def _allocated(self) -> dict[str, int]:
        import torch

        torch.cuda.synchronize(self.index)
        return torch.cuda.memory_stats_as_nested_dict(self.index)["allocated_bytes"]["all"]

    def reset_peak_memory(self) -> int:
        import torch

        torch.cuda.synchronize(self.index)
        torch.cuda.reset_peak_memory_stats(self.index)
        return int(self._allocated()["current"])

    def peak_memory(self) -> int:
        return int(self._allocated()["peak"])


class BetweenRounds:
    """The worker's probe schedule up to this benchmark (ProbeSchedule.after_round before
    the change it measured), kept here so the `probe` condition stays what it was: after
    each round, up to OLD_SAMPLES_PER_GAP probe samples while (samples + 1) x the typical
    sample cost stays under the budget share of the timed seconds so far. Records the
    rounds after which it sampled in `gaps`."""

    def __init__(self, probe: Any, cost_s: float, gaps: list[int]) -> None:
        self.probe, self.cost_s, self.gaps, self.budget = probe, cost_s, gaps, OLD_BUDGET
        self.timed_s = 0.0
        self.costs: list[float] = []
        self.rounds = 0

    def typical_cost(self) -> float:
        return statistics.median(self.costs) if len(self.costs) >= 3 else self.cost_s

    def __call__(self, round_seconds: float) -> None:
        self.timed_s += round_seconds
        for _ in range(OLD_SAMPLES_PER_GAP):
            if (len(self.costs) + 1) * self.typical_cost() > self.budget * self.timed_s:
                break
            before = self.probe.spent_s
            self.probe.sample()
            self.costs.append(self.probe.spent_s - before)
            if not self.gaps or self.gaps[-1] != self.rounds:
                self.gaps.append(self.rounds)
        self.rounds += 1


def noop_hook(seconds: float) -> None:
    """An after_round hook that does nothing: what calling any hook between rounds costs."""


def run_loop(rig: Rig, condition: str) -> Loop:
    from harness.measure.probe import ProbeSchedule
    from harness.measure.timing import measure_interleaved
    from harness.measure.worker import RoundPeaks

    parts = set(condition.split("+"))
    peak_device = NestedDictPeaks(rig.state.device.index) if "nestedpeaks" in parts else rig.state.device
    peaks = RoundPeaks(peak_device) if parts & {"peaks", "nestedpeaks"} else None
    if peaks is not None:
        peak_device.reset_peak_memory()
    gaps: list[int] = []
    after_round = BetweenRounds(rig.probe, rig.probe_cost_s, gaps) if "probe" in parts else None
    if "noop" in parts:
        after_round = noop_hook
    edges = ProbeSchedule(rig.probe) if "edges" in parts else None
    if edges is not None:
        edges.before_rounds()
    samples = measure_interleaved(rig.state.variants, rig.timer, rig.policy, inner=rig.state.inner,
                                  after_round=after_round,
                                  before_sample=peaks.before if peaks else None,
                                  after_sample=peaks.after if peaks else None)
    if edges is not None:
        edges.after_rounds(sum(sum(v) * rig.state.inner[name] for name, v in samples.items()))
    hook_s = {name: peaks.spent_s[name] / len(samples[name]) for name in peaks.spent_s} if peaks else {}
    read = {name: peaks.memory(name) for name in samples} if peaks else {}
    return Loop(samples, gaps, hook_s, {name: m.peak_memory_bytes for name, m in read.items() if m is not None})


def measure_case(rig: Rig, blocks: int, progress: Callable[[str], None],
                 deadline: float = float("inf")) -> dict[str, Any]:
    """`blocks` block sets, every condition once per set, the order rotating; fewer (3 at
    least) once time.perf_counter() passes `deadline` (the run's --max-wall-s share)."""
    names = conditions(rig)
    medians: dict[str, dict[str, list[float]]] = {c: {v: [] for v in rig.state.variants} for c in names}
    next_rest: dict[str, dict[str, list[float]]] = {c: {v: [] for v in rig.state.variants} for c in names}
    gaps: dict[str, list[int]] = {c: [] for c in names}
    rounds: dict[str, list[int]] = {c: [] for c in names}
    hook_s: dict[str, dict[str, list[float]]] = {c: {v: [] for v in rig.state.variants} for c in names}
    peak_bytes: dict[str, dict[str, list[int]]] = {c: {v: [] for v in rig.state.variants} for c in names}
    for block in range(blocks):
        shift = block % len(names)
        for condition in names[shift:] + names[:shift]:
            loop = run_loop(rig, condition)
            rounds[condition].append(min(len(s) for s in loop.samples.values()))
            for variant, seconds in loop.hook_s.items():
                hook_s[condition][variant].append(seconds)
            for variant, nbytes in loop.peak_bytes.items():
                peak_bytes[condition][variant].append(nbytes)
            gaps[condition].append(len(loop.probe_gaps))
            for variant, values in loop.samples.items():
                medians[condition][variant].append(statistics.median(values))
                ratio = next_over_rest(values, loop.probe_gaps)
                if ratio is not None:
                    next_rest[condition][variant].append(ratio)
        progress(f"block set {block + 1}/{blocks}")
        if block + 1 >= MIN_BLOCKS and time.perf_counter() > deadline:
            progress(f"stopped after {block + 1} block sets: past this case's share of --max-wall-s")
            break
    return {"conditions": names, "loop_medians_s": medians, "next_over_rest": next_rest,
            "probe_gaps": gaps, "rounds": rounds, "hook_s": hook_s, "peak_bytes": peak_bytes, "inner": dict(rig.state.inner),
            "probe_cost_s": rig.probe_cost_s, "probe_version": rig.probe.version}


def next_over_rest(values: list[float], gaps: list[int]) -> float | None:
    """Median of the samples of the round right after a probe gap over the rest's median."""
    after = {g + 1 for g in gaps if g + 1 < len(values)}
    if not after or len(after) == len(values):
        return None
    nxt = [v for i, v in enumerate(values) if i in after]
    rest = [v for i, v in enumerate(values) if i not in after]
    return statistics.median(nxt) / statistics.median(rest)


# ---- statistics and the table ----------------------------------------------------------------

def paired_change(cond: list[float], off: list[float]) -> dict[str, Any]:
    """Median paired ratio cond/off over block sets, its 95% bootstrap CI, Mann-Whitney p."""
    import numpy as np
    from scipy import stats

    ratios = np.asarray(cond) / np.asarray(off)
    ci = stats.bootstrap((ratios,), np.median, confidence_level=0.95, n_resamples=4000, method="percentile",
                         random_state=np.random.default_rng(0)).confidence_interval
    p = stats.mannwhitneyu(cond, off, alternative="two-sided").pvalue
    return {"ratio": float(np.median(ratios)), "ci": [float(ci.low), float(ci.high)], "mw_p": float(p)}


def summarise(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    med = result["loop_medians_s"]
    for variant in med["off"]:
        for condition in result["conditions"]:
            values = med[condition][variant]
            row: dict[str, Any] = {"variant": variant, "condition": condition,
                                   "median_us": 1e6 * statistics.median(values),
                                   "gaps": statistics.median(result["probe_gaps"][condition]),
                                   "rounds": statistics.median(result["rounds"][condition])}
            if condition != "off":
                row.update(paired_change(values, med["off"][variant]))
            nr = result["next_over_rest"][condition][variant]
            row["next_over_rest"] = statistics.median(nr) if nr else None
            hooks = result["hook_s"][condition][variant]
            row["hook_us"] = 1e6 * statistics.median(hooks) if hooks else None
            peaks = result["peak_bytes"][condition][variant]
            row["peak_mib"] = max(peaks) / (1 << 20) if peaks else None
            rows.append(row)
    return rows


def print_table(case_id: str, rows: list[dict[str, Any]], block_sets: int) -> None:
    print(f"\n{case_id} ({block_sets} block sets)")
    print(f"  {'variant':9s} {'condition':12s} {'median us':>10s} {'vs off':>7s} {'95% CI':>15s} {'MW p':>7s} "
          f"{'rounds':>7s} {'gaps':>5s} {'next/rest':>9s} {'hook us':>8s} {'peak MiB':>9s}")
    for r in rows:
        change = (f"{r['ratio']:7.3f} [{r['ci'][0]:.3f},{r['ci'][1]:.3f}] {r['mw_p']:7.3f}" if "ratio" in r
                  else f"{'-':>7s} {'-':>15s} {'-':>7s}")
        nr = f"{r['next_over_rest']:9.3f}" if r["next_over_rest"] is not None else f"{'-':>9s}"
        hook = f"{r['hook_us']:8.1f}" if r["hook_us"] is not None else f"{'-':>8s}"
        peak = f"{r['peak_mib']:9.1f}" if r["peak_mib"] is not None else f"{'-':>9s}"
        print(f"  {r['variant']:9s} {r['condition']:12s} {r['median_us']:10.2f} {change} "
              f"{r['rounds']:7.0f} {r['gaps']:5.0f} {nr} {hook} {peak}")


def run_one(case_text: str, args: argparse.Namespace, progress: Callable[[str], Callable[[str], None]],
            deadline: float) -> tuple[str, dict[str, Any]]:
    """Plan, build and compile one case, then its block sets; (case id, result with rows)."""
    from harness.measure.worker import case_threads

    spec, policy = plan(case_text, args)
    case_id = spec.case.case_id
    state = build_case(spec)
    progress(case_id)(f"built and compiled (threads {case_threads(state.device)}, policy {policy})")
    rig = make_rig(state)
    try:
        result = measure_case(rig, args.blocks, progress(case_id), deadline)
    finally:
        rig.probe.close()
    result["rows"] = summarise(result)
    result["policy"] = policy
    result["block_sets"] = len(result["rounds"]["off"])
    return case_id, result


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="pbr-inductor-"))
    if args.device == "cuda":
        reason = cuda_missing_reason()
        if reason:
            print(f"probe_between_rounds: {reason}; run it with --device cpu here", file=sys.stderr)
            return 2
    started = time.perf_counter()
    load_before = load_average()

    def progress(case_id: str) -> Callable[[str], None]:
        return lambda what: print(f"[{time.perf_counter() - started:6.1f} s] {case_id}: {what} "
                                  f"(load {load_average()})", flush=True)

    out: dict[str, Any] = {"device": args.device, "blocks": args.blocks, "load_before": load_before, "cases": {}}
    case_texts = args.cases or list(CUDA_CASES if args.device == "cuda" else CPU_CASES)
    for i, case_text in enumerate(case_texts):
        # a case's block sets may run until its share of --max-wall-s (the builds included) is spent
        deadline = started + args.max_wall_s * (i + 1) / len(case_texts) if args.max_wall_s else float("inf")
        try:
            case_id, result = run_one(case_text, args, progress, deadline)
        except Exception as exc:  # noqa: BLE001 - a failing case is data; the other cases still run
            out["cases"][case_text] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            print(f"\n{case_text}: failed: {type(exc).__name__}: {str(exc)[:500]}", flush=True)
            continue
        out["cases"][case_id] = result
        print_table(case_id, result["rows"], result["block_sets"])
        print(f"  probe set {result['probe_version']}, {1e6 * result['probe_cost_s']:.0f} us a sample")
    out["load_after"] = load_average()
    out["wall_s"] = time.perf_counter() - started
    print(f"\nload average before {load_before}, after {out['load_after']}; {out['wall_s']:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, default=str))
        print(f"wrote {args.out}")
    return 1 if any("error" in c for c in out["cases"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
