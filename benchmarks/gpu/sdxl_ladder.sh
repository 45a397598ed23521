#!/usr/bin/env bash
# The diffusers "fast diffusion" tutorial's ladder on the whole SDXL text-to-image pipeline
# (suites/sdxl_pipeline.py: both text encoders, 30 Euler steps with CFG, VAE decode, 1024 px,
# random weights from the shipped configs), one rung per harness case, in two calls:
#
#   PART=cold OUT=/tmp/out PYTHONPATH=$PWD bash benchmarks/gpu/sdxl_ladder.sh
#       rung 6 (max-autotune + fused QKV + channels_last + CUDA graphs) compiled in an empty
#       cache (its cold compile), then the eager rungs 1 (fp32) and 2 (bf16), vanilla attention
#   PART=warm OUT=/tmp/out2 PYTHONPATH=$PWD bash benchmarks/gpu/sdxl_ladder.sh
#       rung 4 (torch.compile default) in an empty cache (its cold compile), rung 5
#       (max-autotune without CUDA graphs) on rung 6's cache (same GEMMs: autotuning is reused,
#       its FX graph is not), rung 6 again on its own cache (warm compile)
#
# The two parts share CACHE_ROOT (default /tmp/cb-sdxl-cache): run `warm` on the same machine
# after `cold` (on the lent H200, chain the calls while the machine is warm). Rung 3 (bf16 +
# SDPA, eager) is rung 4's eager baseline, measured in the same worker, interleaved.
# Each rung's record says `compile_cache: cold|warm` (whether its cache dir started empty).
#
# Budget: each part stays under BUDGET_S (default 465 s); a case that no longer fits is not
# started (the log says so), a case that overruns its timeout is recorded as `timeout`.
# Dry run on CPU (tiny pipeline, a few minutes):
#   PART=cold OUT=/tmp/dry DEVICE=cpu SIZE=tiny DTYPE_LOW=float32 STEPS=2 bash benchmarks/gpu/sdxl_ladder.sh
BUDGET_S=${BUDGET_S:-465}
# shellcheck source=benchmarks/gpu/common.sh
source "$(dirname "$0")/common.sh"  # OUT, PY, DEVICE, SIZE, START, remaining, fit_limit, versions
PART=${PART:-cold}
DTYPE_LOW=${DTYPE_LOW:-bfloat16}  # the tutorial's half precision
STEPS=${STEPS:-30}
CACHE_ROOT=${CACHE_ROOT:-/tmp/cb-sdxl-cache}
MARGIN_S=20
FUSED="attention=sdpa channels_last=true fused_qkv=true"

# rung|compiler|dtype|options|timeout_s|cache (a folder name under CACHE_ROOT, "fresh:" empties it first; - = none)
case "$PART" in
  cold) CASES=(
    "6|sdxl-max-autotune-cudagraphs|$DTYPE_LOW|$FUSED|300|fresh:r6"
    "1|eager|float32|attention=vanilla|80|-"
    "2|eager|$DTYPE_LOW|attention=vanilla|60|-") ;;
  warm) CASES=(
    "4|inductor|$DTYPE_LOW|attention=sdpa|190|fresh:r4"
    "5|sdxl-max-autotune|$DTYPE_LOW|$FUSED|170|r6"
    "6|sdxl-max-autotune-cudagraphs|$DTYPE_LOW|$FUSED|110|r6") ;;
  *) echo "PART must be cold or warm"; exit 2 ;;
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
    --compiler "$compiler" --device "$DEVICE" --dtype "$dtype" --size "$SIZE" "${opt_args[@]}" \
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
