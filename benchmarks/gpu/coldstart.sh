#!/usr/bin/env bash
# Cold-start table on a CUDA box (issue 5): JIT cold / JIT warm / Mega-Cache /
# aot_compile load / AOTInductor load, each a fresh process, for
#   1. the tiny deep MLP (same workload as the CPU benchmark, on cuda)
#   2. GPT-2 (124 M params, shipped config, random weights), bf16, batch 1 x 128 tokens
# Run from the repository root:
#   OUT=/tmp/out PYTHONPATH=$PWD bash benchmarks/gpu/coldstart.sh
# Writes $OUT/coldstart-*.log (the tables) and $OUT/coldstart-*.json (everything).
# Budget: < 8 minutes on an H200 box with 16 cores (AOTInductor builds dominate).
set -u
OUT=${OUT:?set OUT to an output folder}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-$PWD}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY=${PYTHON:-python3}
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name())" \
  | tee "$OUT/coldstart-env.log" || exit 2
status=0
run() {  # name, seconds, then benchmark args; each run bounded so the script stays under budget
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$PY" benchmarks/coldstart.py --device cuda --json "$OUT/coldstart-$name.json" "$@" \
    > "$OUT/coldstart-$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc" | tee -a "$OUT/coldstart-summary.log"
  tail -n 25 "$OUT/coldstart-$name.log" | tee -a "$OUT/coldstart-summary.log"
  [ $rc -eq 0 ] || status=1
}
run mlp-deep 150 --workload mlp-deep --size tiny --steady-calls 50
# GPT-2 without the two extra rows (Mega-Cache, aot_compile on the build's cache) to fit the budget
run gpt2 300 --workload gpt2-prefill-logits --workload-file benchmarks/gpu/coldstart_workloads.py \
    --size full --dtype bfloat16 --batch-size 1 --steady-calls 50 --rows jit_cold,jit_warm,aot_compile,aoti
exit $status
