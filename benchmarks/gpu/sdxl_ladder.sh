#!/usr/bin/env bash
# The diffusers "fast diffusion" tutorial's ladder on the whole SDXL text-to-image pipeline
# (suites/sdxl_pipeline.py: both text encoders, 30 Euler steps with CFG, VAE decode, 1024 px,
# random weights from the shipped configs), one rung per harness case, in two calls:
#
#   PART=eager OUT=/tmp/out PYTHONPATH=$PWD bash benchmarks/gpu/sdxl_ladder.sh
#       rungs 1 (fp32) and 2 (bf16), vanilla attention, eager (about 2.5 min on an H200)
#   PART=compiled OUT=/tmp/out2 PYTHONPATH=$PWD bash benchmarks/gpu/sdxl_ladder.sh
#       rung 6 (max-autotune + fused QKV + channels_last + CUDA graphs) in an empty cache (its
#       cold compile), rung 5 (the same without CUDA graphs) on rung 6's cache (autotuning is
#       reused, its FX graph is not), then rung 4 (torch.compile default) in an empty cache
#       (about 8.5 min on an H200; rung 3, bf16 + SDPA eager, is rung 4's eager variant)
#
# GEMMS=cublas (default): rungs 5 and 6 keep GEMMs on cuBLAS (benchmarks/gpu/sdxl_cublas_gemm.toml);
# GEMMS=triton: the tutorial's Triton GEMM templates (compiler/configs.py sdxl-max-autotune*),
# which did not finish compiling in 720 s on the H200 with torch 2.11 (docs/BENCHMARKS.md).
# The two parts are independent (run them on two GPUs, or in two calls).
# Each rung's record says `compile_cache: cold|warm` (whether its cache dir started empty).
#
# Budget: each part stays under BUDGET_S (default 560 s); a case that no longer fits is not
# started (the log says so), a case that overruns its timeout is recorded as `timeout`.
# Dry run on CPU (tiny pipeline, a few minutes):
#   PART=eager OUT=/tmp/dry DEVICE=cpu SIZE=tiny DTYPE_LOW=float32 STEPS=2 bash benchmarks/gpu/sdxl_ladder.sh
BUDGET_S=${BUDGET_S:-560}
# shellcheck source=benchmarks/gpu/common.sh
source "$(dirname "$0")/common.sh"  # OUT, PY, DEVICE, SIZE, START, remaining, fit_limit, versions
PART=${PART:-eager}
DTYPE_LOW=${DTYPE_LOW:-bfloat16}  # the tutorial's half precision
STEPS=${STEPS:-30}
CACHE_ROOT=${CACHE_ROOT:-/tmp/cb-sdxl-cache}
MARGIN_S=20
FUSED="attention=sdpa channels_last=true fused_qkv=true"

GEMMS=${GEMMS:-cublas}
case "$GEMMS" in
  cublas) R6=sdxl-max-autotune-cublas-cudagraphs R5=sdxl-max-autotune-cublas
          COMPILER_FILE=(--compiler-file benchmarks/gpu/sdxl_cublas_gemm.toml) ;;
  triton) R6=sdxl-max-autotune-cudagraphs R5=sdxl-max-autotune COMPILER_FILE=() ;;
  *) echo "GEMMS must be cublas or triton"; exit 2 ;;
esac

# rung|compiler|dtype|options|timeout_s|cache (a folder name under CACHE_ROOT, "fresh:" empties it first; - = none)
case "$PART" in
  eager) CASES=(
    "1|eager|float32|attention=vanilla|200|-"
    "2|eager|$DTYPE_LOW|attention=vanilla|140|-") ;;
  compiled) CASES=(
    "6|$R6|$DTYPE_LOW|$FUSED|280|fresh:r6"
    "5|$R5|$DTYPE_LOW|$FUSED|200|r6"
    "4|inductor|$DTYPE_LOW|attention=sdpa|210|fresh:r4") ;;
  *) echo "PART must be eager or compiled"; exit 2 ;;
esac

versions "part $PART; device $DEVICE, size $SIZE, steps $STEPS, budget ${BUDGET_S}s, cache root $CACHE_ROOT" \
  diffusers transformers

run_rung() {
  local rung=$1 compiler=$2 dtype=$3 options=$4 limit cache=$6 opt_args=() env_cache=()
  limit=$(fit_limit "rung $rung ($compiler)" "$5" "$MARGIN_S" 45) || return
  for o in $options; do opt_args+=(--option "$o"); done
  opt_args+=(--option "steps=$STEPS")
  if [ "$cache" != "-" ]; then
    local dir="$CACHE_ROOT/${cache#fresh:}"
    [ "${cache#fresh:}" != "$cache" ] && rm -rf "$dir"
    mkdir -p "$dir"
    env_cache=(env COMPILEBENCH_COMPILE_CACHE_DIR="$dir")
  fi
  echo "=== rung $rung: $compiler $dtype [$options] cache=$cache timeout ${limit}s ($(remaining)s left)" | tee -a "$OUT/run.log"
  timeout $(( limit + MARGIN_S )) "${env_cache[@]}" $PY -m harness run --workload sdxl-pipeline --scenario text2image \
    "${COMPILER_FILE[@]}" --compiler "$compiler" --device "$DEVICE" --dtype "$dtype" --size "$SIZE" "${opt_args[@]}" \
    --min-time 0 --min-samples 3 --warmup 1 --timeout "$limit" --out "$OUT" --label "sdxl-ladder-rung$rung-$PART" \
    --no-ingest 2>&1 | tee -a "$OUT/run.log"
  echo "=== rung $rung: exit code ${PIPESTATUS[0]}" | tee -a "$OUT/run.log"
}

for item in "${CASES[@]}"; do
  IFS='|' read -r rung compiler dtype options limit cache <<< "$item"
  run_rung "$rung" "$compiler" "$dtype" "$options" "$limit" "$cache"
done

if compgen -G "$OUT/runs/*.json" > /dev/null; then
  $PY benchmarks/sdxl_ladder_table.py "$OUT"/runs/*.json | tee "$OUT/summary.md"
fi
wall_line "$OUT/summary.md"
