"""CPU peak memory from the timed rounds vs the separate memory pass, on real tiny cases.

    python benchmarks/cpu_memfold.py                       # smoke's tiny MLP cases, 3 processes each
    python benchmarks/cpu_memfold.py --repeat 5 --case mlp-deep/train/inductor --out /tmp/mf.json

Each repetition is a fresh process (spawned, as `--no-preload` starts a case) that walks the
worker's own phases (harness/measure/worker.py PHASES: setup ... measure) for one case of
the `smoke` suite with the suite's policy, so the timed rounds read the RSS high-water mark
around all the timed samples (RoundsWindowPeak: /proc/self/clear_refs '5' right before the
first, VmHWM right after the last). Then, in the same process, the old separate pass (memory_pass: gc,
reset, 3 calls, read) runs per variant, as the worker did before. Per variant it reports
both peaks and rises and their difference; a difference within the spread of the pass's
own peaks over the repetitions is the same figure.

Latency: after that, still in the same process, `--blocks` sets of short interleaved
measurements (the worker's measure_interleaved, the suite's policy), one per way of running
the loop (latency_blocks: plain, its A/A, the CPU window with and without a gc before it,
the GPU way's per-sample reset and read). The median of the block medians per variant, over
plain's, says whether a way of reading the peak moves the timed figures; `again` says how
far two blocks of the same way differ.

The probe's share of RSS: VmRSS before the machine probe starts, after its warm-up, and
after it is closed (the pass runs after the close; the fold subtracts nothing on CPU).
Exit 0 when every case ran, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MiB = float(1 << 20)
CASES = ("mlp-classic/forward/inductor", "mlp-classic/train/inductor", "mlp-deep/forward/inductor")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", action="append", dest="cases", metavar="WORKLOAD/SCENARIO/COMPILER",
                   help=f"repeatable; default: {', '.join(CASES)} (tiny, float32, the smoke suite's policy)")
    p.add_argument("--repeat", type=int, default=3, help="fresh processes per case (default 3)")
    p.add_argument("--blocks", type=int, default=6, help="latency block sets per process (default 6)")
    p.add_argument("--out", help="write the JSON here")
    p.add_argument("--child", help=argparse.SUPPRESS)  # one case in this process; JSON to --out
    args = p.parse_args(argv)
    if args.repeat < 1 or args.blocks < 1:
        p.error("--repeat and --blocks must be at least 1")
    return args


# ---- the child: one case, fold and pass in one process -----------------------------------

def plan(case_text: str) -> tuple[Any, dict[str, Any]]:
    """The WorkerSpec the runner would make for this smoke case, and the policy it runs with."""
    from harness.measure.timing import StopPolicy
    from harness.run.runner import PlanError, RunOptions, make_spec, plan_cases

    parts = case_text.split("/")
    if len(parts) != 3:
        raise PlanError(f"--case {case_text!r} is not WORKLOAD/SCENARIO/COMPILER, e.g. mlp-classic/forward/inductor")
    workload, scenario, compiler = parts
    opts = RunOptions(suite="smoke", workloads=[workload], scenarios=[scenario], compilers=[compiler],
                      devices=["cpu"], sizes=["tiny"], preload=False)
    cases, suite_policy = plan_cases(opts)
    policy = {**StopPolicy().to_dict(), **suite_policy}
    return make_spec(cases[0], opts, policy, tempfile.mkdtemp(prefix="cpu-memfold-isa-")), policy


def run_until_memory(spec: Any) -> Any:
    """The worker's phases up to (not including) `memory`, exactly as run_case walks them
    (the GPU check's walk, benchmarks/gpu/memfold_check.py, shared)."""
    import importlib.util

    path = ROOT / "benchmarks" / "gpu" / "memfold_check.py"
    module_spec = importlib.util.spec_from_file_location("memfold_check", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    state = module.run_until_memory(spec)
    if state.record.status != "ok":
        raise RuntimeError(f"the case ended {state.record.status} before the memory phase")
    return state


def memory_rows(state: Any) -> list[dict[str, Any]]:
    """Per variant: the rounds' figures (already read) and a pass's, run now."""
    from harness.measure.worker import memory_pass

    rows = []
    peaks = state.round_peaks
    for name, fn in state.variants.items():
        started = time.perf_counter()
        passed = memory_pass(state.device, fn)
        folded = peaks.memory(name) if peaks is not None else None
        rows.append({"variant": name, "samples": len(state.samples[name]),
                     "pass_peak_bytes": passed.peak_memory_bytes, "pass_delta_bytes": passed.peak_memory_delta_bytes,
                     "pass_wall_s": time.perf_counter() - started,
                     "rounds_peak_bytes": folded.peak_memory_bytes if folded else None,
                     "rounds_delta_bytes": folded.peak_memory_delta_bytes if folded else None,
                     "rounds_reads": peaks.reads.get(name, 0) if peaks else 0,
                     "rounds_spent_s": peaks.spent_s.get(name, 0.0) if peaks else 0.0})
    return rows


# the ways of running the timed loop that the latency check compares, each against `plain`
MODES = ("plain", "again", "window", "gc_window", "per_sample")


def latency_blocks(state: Any, policy: dict[str, Any], blocks: int) -> dict[str, Any]:
    """Short interleaved measurements, the modes in turn (rotating who goes first): `plain`
    the timed loop alone (the worker before the fold), `again` the same once more (the A/A:
    what two blocks of one way differ by), `window` the RSS mark reset before the loop and
    read after it (what the worker does on CPU), `gc_window` the same after a gc.collect()
    (memory_pass's), `per_sample` the GPU way (reset before and read after every sample,
    outside the timer)."""
    import gc

    from harness.measure.timing import HostTimer, StopPolicy, measure_interleaved
    from harness.measure.worker import RoundPeaks

    timer = HostTimer(state.device.synchronize)
    short = replace(StopPolicy(**policy), warmup=0)
    medians: dict[str, dict[str, list[float]]] = {mode: {} for mode in MODES}
    spent: dict[str, float] = {}
    reads: dict[str, int] = {}
    for block in range(blocks):
        shift = block % len(MODES)
        for mode in MODES[shift:] + MODES[:shift]:
            peaks = RoundPeaks(state.device) if mode == "per_sample" else None
            if mode == "gc_window":
                gc.collect()
            if mode in ("window", "gc_window"):
                state.device.reset_peak_memory()
            samples = measure_interleaved(state.variants, timer, short, inner=state.inner,
                                          before_sample=peaks.before if peaks else None,
                                          after_sample=peaks.after if peaks else None)
            if mode in ("window", "gc_window"):
                state.device.peak_memory()
            for name, values in samples.items():
                medians[mode].setdefault(name, []).append(statistics.median(values))
            for name, seconds in (peaks.spent_s.items() if peaks else ()):
                spent[name] = spent.get(name, 0.0) + seconds
                reads[name] = reads.get(name, 0) + peaks.reads.get(name, 0)
    ratios = {mode: {name: statistics.median(medians[mode][name]) / statistics.median(medians["plain"][name])
                     for name in medians["plain"]} for mode in MODES[1:]}
    return {"block_medians_s": medians, "over_plain": ratios,
            "per_sample_hook_s": {name: spent[name] / reads[name] for name in spent if reads.get(name)}}


def probe_rss() -> dict[str, Any]:
    """VmRSS before the machine probe, after its warm-up, after its close (this process)."""
    import torch

    from harness.measure.devices import cpu_rss
    from harness.measure.probe import make_probe
    from harness.measure.timing import HostTimer

    def rss() -> int:
        return cpu_rss() or 0

    before = rss()
    probe = make_probe("cpu", "cpu", HostTimer(), time.perf_counter_ns, threads=max(torch.get_num_threads(), 1))
    probe.warm_up()
    warm = rss()
    probe.close()
    return {"before_bytes": before, "warm_bytes": warm, "closed_bytes": rss()}


def child(case_text: str, blocks: int) -> dict[str, Any]:
    from harness.measure.worker import MEMORY_ROUNDS_KEY

    spec, policy = plan(case_text)
    state = run_until_memory(spec)
    result = {"case_id": spec.case.case_id, "pid": os.getpid(),
              "memory_rounds": state.record.metrics.get(MEMORY_ROUNDS_KEY),
              "variants": memory_rows(state), "latency": latency_blocks(state, policy, blocks)}
    result["probe_rss"] = probe_rss()
    return result


# ---- the parent: repetitions and the table -----------------------------------------------

def run_child(case_text: str, blocks: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cpu-memfold-") as tmp:
        out = Path(tmp) / "child.json"
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / "inductor"), "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        cmd = [sys.executable, __file__, "--child", case_text, "--blocks", str(blocks), "--out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
        if proc.returncode != 0 or not out.exists():
            return {"case": case_text, "status": "failed", "error": (proc.stderr or proc.stdout)[-1500:]}
        return {"case": case_text, "status": "ok", **json.loads(out.read_text())}


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def summarise_case(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per variant over the case's repetitions: pass peaks, rounds peaks, differences, noise."""
    ok = [r for r in runs if r["status"] == "ok"]
    rows = []
    for name in ([v["variant"] for v in ok[0]["variants"]] if ok else []):
        per = [next(v for v in r["variants"] if v["variant"] == name) for r in ok]
        pass_peaks = [v["pass_peak_bytes"] / MiB for v in per]
        rnd_peaks = [v["rounds_peak_bytes"] / MiB for v in per if v["rounds_peak_bytes"] is not None]
        diffs = [(v["rounds_peak_bytes"] - v["pass_peak_bytes"]) / MiB for v in per if v["rounds_peak_bytes"] is not None]
        rise_diffs = [(v["rounds_delta_bytes"] - v["pass_delta_bytes"]) / MiB for v in per
                      if v["rounds_delta_bytes"] is not None and v["pass_delta_bytes"] is not None]
        over_plain = {mode: [r["latency"]["over_plain"][mode][name] for r in ok] for mode in MODES[1:]}
        hook_s = [r["latency"]["per_sample_hook_s"].get(name) for r in ok]
        rows.append({"variant": name, "runs": len(per), "pass_peaks_mib": pass_peaks, "rounds_peaks_mib": rnd_peaks,
                     "peak_diff_mib": diffs, "rise_diff_mib": rise_diffs,
                     "pass_spread_mib": max(pass_peaks) - min(pass_peaks) if pass_peaks else None,
                     "pass_wall_s": [v["pass_wall_s"] for v in per], "reads": [v["rounds_reads"] for v in per],
                     "latency_over_plain": over_plain,
                     "per_sample_hook_s": [h for h in hook_s if h is not None]})
    return rows


def fmt_list(values: list[float], spec: str = ".1f") -> str:
    return "/".join(format(v, spec) for v in values) or "-"


def print_table(results: dict[str, dict[str, Any]]) -> None:
    print(f"{'case':30s} {'variant':9s} {'pass peak MiB':>20s} {'rounds peak MiB':>20s} {'rounds-pass MiB':>20s} "
          f"{'rise diff MiB':>18s} {'pass s':>15s} {'hook us':>8s}  latency over plain's: "
          + ", ".join(MODES[1:]))
    for case_text, res in results.items():
        for fail in (r for r in res["runs"] if r["status"] != "ok"):
            print(f"{case_text:30s} failed: {fail['error'][-300:]}")
        for row in res["summary"]:
            hook_us = 1e6 * statistics.median(row["per_sample_hook_s"]) if row["per_sample_hook_s"] else float("nan")
            print(f"{case_text:30s} {row['variant']:9s} {fmt_list(row['pass_peaks_mib']):>20s} "
                  f"{fmt_list(row['rounds_peaks_mib']):>20s} {fmt_list(row['peak_diff_mib'], '+.2f'):>20s} "
                  f"{fmt_list(row['rise_diff_mib'], '+.2f'):>18s} {fmt_list(row['pass_wall_s'], '.2f'):>15s} "
                  f"{hook_us:8.1f}  " + ", ".join(f"{mode} {fmt_list(row['latency_over_plain'][mode], '.3f')}"
                                                  for mode in MODES[1:]))
        for run in (r for r in res["runs"] if r["status"] == "ok"):
            p = run["probe_rss"]
            print(f"{'':30s} pid {run['pid']}: memory_rounds {json.dumps(run['memory_rounds'])[:160]}; probe RSS "
                  f"+{(p['warm_bytes'] - p['before_bytes']) / MiB:.2f} MiB warm, "
                  f"{(p['closed_bytes'] - p['before_bytes']) / MiB:+.2f} MiB after close")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        Path(args.out).write_text(json.dumps(child(args.child, args.blocks), default=str))
        return 0
    cases = args.cases or list(CASES)
    results: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    load_before = load_average()
    for case_text in cases:
        results[case_text] = {"runs": []}
    # the repetitions of every case interleaved, so a loaded minute hits all cases alike
    for i in range(args.repeat):
        for case_text in cases:
            results[case_text]["runs"].append(run_child(case_text, args.blocks))
            print(f"[{time.perf_counter() - started:6.1f} s] {case_text} {i + 1}/{args.repeat}: "
                  f"{results[case_text]['runs'][-1]['status']} (load {load_average()})", flush=True)
    for res in results.values():
        res["summary"] = summarise_case(res["runs"])
    print_table(results)
    print(f"load average before {load_before}, after {load_average()}; {time.perf_counter() - started:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps({"load_before": load_before, "load_after": load_average(),
                                              "cases": results}, indent=1, default=str))
        print(f"wrote {args.out}")
    return 0 if all(r["status"] == "ok" for res in results.values() for r in res["runs"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
