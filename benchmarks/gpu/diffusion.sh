#!/usr/bin/env bash
# SDXL base 1.0 UNet (2.57 B parameters, random weights from the shipped config), fp16,
# 1024 px, UNet batch 2 (one image with classifier-free guidance: --batch-size counts
# images), one denoising step (`unet_step`): eager vs inductor (default) vs
# inductor-reduce-overhead vs inductor-max-autotune-no-cudagraphs. Eager is measured inside
# every case, interleaved with the compiled variant in the same process.
#
#   OUT=/tmp/out PYTHONPATH=$PWD bash benchmarks/gpu/diffusion.sh      (repository root as cwd)
#
# Needs CUDA torch and diffusers importable (a wheel on PYTHONPATH is fine). Writes under
# $OUT: versions.txt, run.log, runs/*.json (one run file per compiler), summary.md.
#
# Budget: the whole script stays under BUDGET_S (default 450 s, 7.5 minutes). Each case is
# one fresh worker (build + cold compile + measurement) with its own --timeout; a case that
# runs out of time is killed by the runner and recorded with status `timeout`, and a case
# that no longer fits in what is left of the budget is not started (the log says so).
# max-autotune compiles of SDXL can take many minutes, so it goes last and gets what is left;
# if it times out, give it a run of its own:
#   OUT=/tmp/out-ma CASES="inductor-max-autotune-no-cudagraphs:420" bash benchmarks/gpu/diffusion.sh
# Other compilers the same way, e.g. CASES="inductor-regional:200" (regional compilation).
#
# Dry run of the logic on CPU (tiny UNet, Dynamo-only compilers, a few minutes):
#   OUT=/tmp/dry DEVICE=cpu SIZE=tiny DTYPE=float32 CASES="aot_eager:300" bash benchmarks/gpu/diffusion.sh
BUDGET_S=${BUDGET_S:-450}
# shellcheck source=benchmarks/gpu/common.sh
source "$(dirname "$0")/common.sh"  # OUT, PY, DEVICE, SIZE, START, remaining, fit_limit, versions
DTYPE=${DTYPE:-float16}
# compiler:per-case timeout in seconds, in the order they run
CASES=${CASES:-"inductor:170 inductor-reduce-overhead:170 inductor-max-autotune-no-cudagraphs:400"}
MARGIN_S=25  # summary + the runner's own start-up and run-file writing, per case

versions "cases: $CASES; device $DEVICE, size $SIZE, dtype $DTYPE, budget ${BUDGET_S}s" diffusers

run_case() {
  local compiler=$1 limit
  limit=$(fit_limit "$compiler" "$2" "$MARGIN_S" 60) || return
  echo "=== $compiler: per-case timeout ${limit}s ($(remaining)s of the budget left)" | tee -a "$OUT/run.log"
  # the runner kills the worker at --timeout and records `timeout`; the outer timeout only
  # guards against the runner itself hanging
  timeout $(( limit + MARGIN_S )) $PY -m harness run --workload sdxl-unet --scenario unet_step \
    --compiler "$compiler" --device "$DEVICE" --dtype "$DTYPE" --size "$SIZE" --batch-size 1 \
    --min-time 2 --min-samples 10 --timeout "$limit" --out "$OUT" --label "sdxl-unet-$compiler" \
    2>&1 | tee -a "$OUT/run.log"
  echo "=== $compiler: exit code ${PIPESTATUS[0]}" | tee -a "$OUT/run.log"
}

for item in $CASES; do
  run_case "${item%%:*}" "${item##*:}"
done

if compgen -G "$OUT/runs/*.json" > /dev/null; then
  $PY benchmarks/diffusion_table.py "$OUT"/runs/*.json | tee "$OUT/summary.md"
else
  echo "no run file was written" | tee "$OUT/summary.md"
fi
wall_line "$OUT/summary.md"
