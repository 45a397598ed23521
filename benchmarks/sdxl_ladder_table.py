"""The SDXL pipeline ladder as a markdown table, from `sdxl-pipeline` run files only.

    python3 benchmarks/sdxl_ladder_table.py RUN.json [RUN.json ...]

One row per rung (suites/sdxl_pipeline.py LADDER; rung 3 is rung 4's eager baseline, read
from the same record), seconds per image, the phases (text encode, one denoising step,
VAE decode), compile time with whether its cache started empty, then the end-to-end
speedups from fp32 eager (rung 1), bf16 eager (rung 2) and bf16 + SDPA eager (rung 3),
and the denoising-step speedup of the full recipe against its own eager baseline.
When a rung was run more than once (cold and warm calls), the last record that is ok
gives the speed; every record's compile time is listed. The cuBLAS-GEMM variants of rungs 5
and 6 (benchmarks/gpu/sdxl_cublas_gemm.toml) count as those rungs; the case column names them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.model.schema import Record, load_run  # noqa: E402

TRUE = ("true", "1", "yes", "on", True)


def rung_of(record: Record) -> str | None:
    """Rung number from the case's compiler, dtype and options (None: not a ladder case)."""
    case = record.case
    opts = dict(case.options)
    attention = str(opts.get("attention", "sdpa"))
    fused = opts.get("fused_qkv") in TRUE and opts.get("channels_last") in TRUE
    half = case.dtype in ("bfloat16", "float16")
    table = {
        ("eager", "float32", "vanilla", False): "1",
        ("eager", "half", "vanilla", False): "2",
        ("eager", "half", "sdpa", False): "3",
        ("inductor", "half", "sdpa", False): "4",
        ("sdxl-max-autotune", "half", "sdpa", True): "5",
        ("sdxl-max-autotune-cudagraphs", "half", "sdpa", True): "6",
    }
    # benchmarks/gpu/sdxl_cublas_gemm.toml: the same rungs with GEMMs left on cuBLAS
    compiler = case.compiler.replace("-cublas", "")
    return table.get((compiler, "half" if half else case.dtype, attention, fused))


def median(block: dict[str, Any] | None) -> float | None:
    return ((block or {}).get("summary") or {}).get("median")


def collect(paths: list[str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """rung -> {seconds, phases, compile list}; rung 3 from rung 4's eager variant."""
    rungs: dict[str, dict[str, Any]] = {}
    compiles: list[str] = []
    for path in paths:
        for record in load_run(path).records:
            if record.case.workload != "sdxl-pipeline":
                continue
            rung = rung_of(record)
            m = record.metrics or {}
            if record.compiled is not None or m.get("compile_time_s") is not None or record.status != "ok":
                compiles.append(compile_line(rung, record))
            if rung is None or record.status != "ok":
                continue
            measured = record.compiled or record.eager
            rungs[rung] = {"s": median(measured), "step": m.get("denoise_step_s"), "vae": m.get("vae_decode_s"),
                           "text": m.get("text_encode_s"), "case": record.case_id,
                           "step_speedup": m.get("denoise_step_speedup"), "eager_step": m.get("eager_denoise_step_s"),
                           "eager_s": median(record.eager) if record.compiled else None}
            if rung == "4":
                rungs["3"] = {"s": median(record.eager), "step": m.get("eager_denoise_step_s"),
                              "vae": m.get("eager_vae_decode_s"), "text": m.get("eager_text_encode_s"),
                              "case": record.case_id + " (eager variant)"}
    return rungs, compiles


def compile_line(rung: str | None, record: Record) -> str:
    m = record.metrics or {}
    status = record.status + (f" ({str((record.error or {}).get('message', ''))[:80]})" if record.error else "")
    value = m.get("compile_time_s")
    shown = f"{value:.1f} s" if value is not None else "-"
    return f"| {rung or '?'} | {record.case.compiler} | {m.get('compile_cache', '?')} | {shown} | {status} |"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.1f}"


def table(paths: list[str]) -> str:
    rungs, compiles = collect(paths)
    lines = ["| rung | s/image | denoise step ms | VAE decode ms | text encode ms | vs fp32 eager | vs bf16 eager "
             "| vs bf16+SDPA eager | case |", "|---|---|---|---|---|---|---|---|---|"]
    for rung in sorted(rungs):
        r = rungs[rung]

        def speedup(base: str, r: dict[str, Any] = r) -> str:
            b = rungs.get(base, {}).get("s")
            return f"{b / r['s']:.2f}x" if b and r["s"] else "-"

        lines.append(f"| {rung} | {r['s']:.3f} | {ms(r['step'])} | {ms(r['vae'])} | {ms(r['text'])} "
                     f"| {speedup('1')} | {speedup('2')} | {speedup('3')} | {r['case']} |")
    lines += ["", "| rung | compiler | cache at start | first compiled call (compile + 1 image) | status |",
              "|---|---|---|---|---|", *compiles]
    full = rungs.get("6")
    if full and full.get("step_speedup"):
        lines += ["", f"Full recipe (rung 6), denoising step: {ms(full['eager_step'])} ms eager (bf16, SDPA, fused QKV, "
                      f"channels_last) vs {ms(full['step'])} ms compiled = {full['step_speedup']:.2f}x"]
        for base in ("1", "2", "3"):
            if rungs.get(base, {}).get("step"):
                lines.append(f"  vs rung {base}'s step ({ms(rungs[base]['step'])} ms): "
                             f"{rungs[base]['step'] / full['step']:.2f}x")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        raise SystemExit(2)
    print(table(sys.argv[1:]))
