"""Peak memory from the timed rounds vs the separate memory pass, on real GPU workloads.

    python3 benchmarks/gpu/memfold_check.py --out $OUT/memfold.json          # H200, < 120 s
    python3 benchmarks/gpu/memfold_check.py --device cpu --out /tmp/mf.json  # dry mode, tiny MLP

Each case is built and run by the worker's own phases (harness/measure/worker.py PHASES:
setup, build, eager first call, compile, accuracy, measure) in this process, with the
`gpu` suite's case definitions (plan_cases) and a short policy. The measure phase reads the
allocator's peak around each variant's last warm-up call (memory_rounds.scope "last_warmup",
memory_source "rounds"; docs/RESULTS.md, "Peak memory"); then the old
separate pass (memory_pass: gc, reset, 3 calls, sync, read) runs per variant, as the worker
did before. The table gives, per variant, both peaks and rises, their difference in MiB and
%, and the wall seconds each cost: the pass's 3 calls against the rounds' resets and reads.

On CPU the worker reads the RSS high-water mark once around all the timed rounds where Linux
resets it (RoundsWindowPeak; memory_source "rounds", else "pass"): the dry mode compares that
with the pass (benchmarks/cpu_memfold.py does it over repeated processes, with latency).
Without CUDA, `--device cuda` exits 2 with one line saying so.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

MiB = float(1 << 20)
# workload/scenario/compiler; inductor on the MLPs (a compiled variant, CUDA graphs in one),
# eager on Llama (its compiles would take the whole budget; the fold is variant-agnostic)
GPU_CASES = ("mlp-deep/forward/inductor-reduce-overhead", "mlp-deep/train/inductor",
             "llama-3.1-8b/prefill/eager", "llama-3.1-8b/decode/eager")
CPU_CASES = ("mlp-deep/forward/aot_eager",)
# few, short rounds: the budget stays in builds and compiles. warmup 3, the gpu suite's: on an
# allocator device the worker reads each variant's peak around its last warm-up call and only
# when at least one warm-up call came before it (a CUDA-graph case records on an early call);
# with fewer it takes the pass, and there would be nothing to compare
POLICY = {"warmup": 3, "min_samples": 3, "min_time_s": 0.3, "max_samples": 100, "max_time_s": 8.0}
# a difference within this is the same figure (allocator rounding is 512 B; 1 MiB is slack)
SAME_MIB = 1.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--case", action="append", dest="cases", metavar="WORKLOAD/SCENARIO/COMPILER",
                   help=f"repeatable; default on cuda: {', '.join(GPU_CASES)}; on cpu: {', '.join(CPU_CASES)}")
    p.add_argument("--size", help="workload size (default: full on cuda, tiny on cpu)")
    p.add_argument("--dtype", help="default: bfloat16 on cuda (the gpu suite's), float32 on cpu")
    p.add_argument("--out", help="write the JSON here")
    return p.parse_args(argv)


def cuda_missing_reason() -> str | None:
    import torch

    if torch.cuda.is_available():
        return None
    return f"CUDA is not available here (torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'})"


def plan(case_text: str, args: argparse.Namespace) -> Any:
    """The WorkerSpec the runner would make for this case of the `gpu` suite."""
    from harness.run.runner import PlanError, RunOptions, make_spec, plan_cases

    parts = case_text.split("/")
    if len(parts) != 3:
        raise PlanError(f"--case {case_text!r} is not WORKLOAD/SCENARIO/COMPILER, e.g. mlp-deep/forward/inductor")
    workload, scenario, compiler = parts
    opts = RunOptions(suite="gpu", workloads=[workload], scenarios=[scenario], compilers=[compiler],
                      devices=[args.device], sizes=[args.size], dtypes=[args.dtype])
    cases, _ = plan_cases(opts)
    return make_spec(cases[0], opts, POLICY, tempfile.mkdtemp(prefix="memfold-isa-"))


def run_until_memory(spec: Any) -> Any:
    """The worker's phases up to (not including) `memory`, exactly as run_case walks them."""
    from harness.measure.worker import new_case_state, walk_phases

    state = new_case_state(spec)
    walk_phases(state, stop_before="memory")
    state.enter("memory")
    return state


def compare_variant(state: Any, name: str) -> dict[str, Any]:
    """The pass's figures for one variant (timed) against the rounds' (None where not folded)."""
    from harness.measure.worker import memory_pass

    start = time.perf_counter()
    passed = memory_pass(state.device, state.variants[name])
    pass_s = time.perf_counter() - start
    peaks = state.round_peaks
    folded = peaks.memory(name) if peaks is not None else None
    row: dict[str, Any] = {
        "variant": name, "memory_kind": passed.memory_kind,
        "pass_peak_bytes": passed.peak_memory_bytes, "pass_delta_bytes": passed.peak_memory_delta_bytes,
        "pass_wall_s": pass_s, "folded": folded is not None,
        "rounds_peak_bytes": folded.peak_memory_bytes if folded else None,
        "rounds_delta_bytes": folded.peak_memory_delta_bytes if folded else None,
        "rounds_wall_s": peaks.spent_s.get(name, 0.0) if peaks is not None else None,
        "rounds_reads": peaks.reads.get(name, 0) if peaks is not None else None,
        "samples": len(state.samples.get(name, [])),
    }
    for what in ("peak", "delta"):
        a, b = row[f"pass_{what}_bytes"], row[f"rounds_{what}_bytes"]
        row[f"{what}_diff_mib"] = (b - a) / MiB if a is not None and b is not None else None
        row[f"{what}_diff_pct"] = 100.0 * (b - a) / a if a and b is not None else None
    diffs = [abs(row[k]) for k in ("peak_diff_mib", "delta_diff_mib") if row[k] is not None]
    row["verdict"] = ("not folded" if folded is None else "same" if max(diffs) <= SAME_MIB else "DIFFERS")
    return row


def check_case(case_text: str, args: argparse.Namespace) -> dict[str, Any]:
    from harness.measure.worker import classify_exception, exception_info, memory

    started = time.perf_counter()
    result: dict[str, Any] = {"case": case_text}
    state = None
    try:
        spec = plan(case_text, args)
        result["case_id"] = spec.case.case_id
        state = run_until_memory(spec)
        result["variants"] = [compare_variant(state, name) for name in state.variants]
        memory(state)  # the worker's own memory phase: which source its record now says
        result["record_memory_source"] = {name: getattr(state.record, name).memory_source
                                          for name in state.variants}
        peaks = state.round_peaks
        result["probe_resident_bytes"] = peaks.resident_bytes if peaks is not None else None
        result["phase_s"] = dict(state.record.metrics["phase_s"])
        result["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - one failed case is data; the others still run
        phase = state.phase if state is not None else "plan"
        result["status"] = classify_exception(exc, phase)
        result["error"] = exception_info(exc, phase).to_dict()
    result["wall_s"] = time.perf_counter() - started
    del state
    release_device(args.device)
    return result


def release_device(device: str) -> None:
    """Free the previous case's model and compiled graphs before the next one is built."""
    import torch

    torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def fmt_mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MiB:.1f}"


def fmt_diff(mib: float | None, pct: float | None) -> str:
    if mib is None:
        return "-"
    return f"{mib:+.2f} ({pct:+.2f}%)" if pct is not None else f"{mib:+.2f}"


def print_table(results: list[dict[str, Any]]) -> None:
    header = (f"{'case':44s} {'variant':9s} {'pass peak':>10s} {'rnd peak':>10s} {'peak diff MiB':>18s} "
              f"{'pass rise':>10s} {'rnd rise':>10s} {'rise diff MiB':>18s} {'pass s':>7s} {'rnd s':>7s} "
              f"{'reads':>5s}  verdict")
    print(header)
    print("-" * len(header))
    for res in results:
        if res["status"] != "ok":
            err = res.get("error") or {}
            print(f"{res['case']:44s} {res['status']}: {err.get('type')}: {str(err.get('message'))[:120]}")
            continue
        for row in res["variants"]:
            rnd_s = "-" if row["rounds_wall_s"] is None else f"{row['rounds_wall_s']:.3f}"
            print(f"{res['case']:44s} {row['variant']:9s} {fmt_mib(row['pass_peak_bytes']):>10s} "
                  f"{fmt_mib(row['rounds_peak_bytes']):>10s} {fmt_diff(row['peak_diff_mib'], row['peak_diff_pct']):>18s} "
                  f"{fmt_mib(row['pass_delta_bytes']):>10s} {fmt_mib(row['rounds_delta_bytes']):>10s} "
                  f"{fmt_diff(row['delta_diff_mib'], row['delta_diff_pct']):>18s} {row['pass_wall_s']:7.3f} "
                  f"{rnd_s:>7s} {row['rounds_reads'] if row['rounds_reads'] is not None else '-':>5}  {row['verdict']}")
        print(f"{'':44s} record memory_source {res['record_memory_source']}, probe resident "
              f"{fmt_mib(res['probe_resident_bytes'])} MiB, case wall {res['wall_s']:.1f} s")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.size = args.size or ("full" if args.device == "cuda" else "tiny")
    args.dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    cases = args.cases or list(GPU_CASES if args.device == "cuda" else CPU_CASES)
    if args.device == "cuda":
        why = cuda_missing_reason()
        if why:
            print(f"memfold_check: {why}; run it on a GPU box, or pass --device cpu for the dry mode", file=sys.stderr)
            return 2
    # a cold Inductor cache of its own, as the runner gives each case
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="memfold-inductor-"))
    started = time.perf_counter()
    results = []
    for case_text in cases:
        results.append(check_case(case_text, args))
        print(f"[{time.perf_counter() - started:6.1f} s] {case_text}: {results[-1]['status']}", flush=True)
    print_table(results)
    summary = summarise(results, args, time.perf_counter() - started)
    print(f"total {summary['wall_s']:.1f} s; memory pass {summary['pass_wall_s']:.2f} s vs rounds' reads "
          f"{summary['rounds_wall_s']:.3f} s; verdicts {summary['verdicts']}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"summary": summary, "cases": results}, indent=1, default=str))
        print(f"wrote {args.out}")
    return 0 if all(r["status"] == "ok" for r in results) else 1


def summarise(results: list[dict[str, Any]], args: argparse.Namespace, wall_s: float) -> dict[str, Any]:
    import torch

    rows = [row for res in results if res["status"] == "ok" for row in res["variants"]]
    verdicts: dict[str, int] = {}
    for row in rows:
        verdicts[row["verdict"]] = verdicts.get(row["verdict"], 0) + 1
    return {
        "device": args.device, "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
        "torch": torch.__version__, "size": args.size, "dtype": args.dtype, "policy": POLICY,
        "same_within_mib": SAME_MIB, "wall_s": wall_s, "verdicts": verdicts,
        "pass_wall_s": sum(r["pass_wall_s"] for r in rows),
        "rounds_wall_s": sum(r["rounds_wall_s"] or 0.0 for r in rows),
        "failed": [r["case"] for r in results if r["status"] != "ok"],
    }


if __name__ == "__main__":
    raise SystemExit(main())
