#!/usr/bin/env bash
# Issue 12 on a CUDA box:
#   phase 1, concurrently (their timings are not clean figures): every named compiler config
#     on a tiny model (3 runs), the cold-start table of mlp-deep tiny, and (REPRO, default
#     --all) the standalone AOTInductor reproducer (benchmarks/gpu/aoti_repro.py);
#   phase 2: the cold-start table of GPT-2 full, bf16, batch 1 x 128 tokens, on the GPU.
# Run from the repository root (PYTHONPATH=$PWD, compilebench not installed):
#   OUT=/tmp/out bash benchmarks/gpu/compat.sh                                   # one GPU
#   SECOND_GPU=1 REPRO="" OUT=/tmp/out bash benchmarks/gpu/compat.sh             # two GPUs
# Two GPUs (SECOND_GPU=1): GPT-2's aot_compile and AOTInductor rows (builds and loads) run from
# the start on the second GPU, alone on it; phase 2 then runs only GPT-2's JIT rows on the first.
# Measured on H200s with torch 2.11 (2026-11-30): phase 1 needs about 320 s (mlp-deep: six rows
# of ~25 s processes, then the AOTI build, 81 s, and its load), GPT-2's JIT rows about 130 s,
# its AOT rows about 300 s; so about 7.5 min on two GPUs, over 12 min on one. These pieces ran
# in two calls, not yet end to end as one.
# Dry run on CPU (a subset; COMPILERS is space-separated, the *_ROWS comma-separated):
#   OUT=/tmp/o DEVICE=cpu GPT2_SIZE=tiny GPT2_DTYPE=float32 COMPILERS="eager inductor cudagraphs" \
#     MLP_ROWS=jit_cold,aot_compile GPT2_ROWS=aoti REPRO="--model mlp" bash benchmarks/gpu/compat.sh
# Writes $OUT/compat.log (everything below) and $OUT/compat.tar.gz (run files, cold-start JSON, logs).
set -uo pipefail
: "${OUT:?set OUT to an output folder}"
DEVICE=${DEVICE:-cuda}
GPT2_SIZE=${GPT2_SIZE:-full}
GPT2_DTYPE=${GPT2_DTYPE:-bfloat16}
PHASE1_S=${PHASE1_S:-330}
PHASE2_S=${PHASE2_S:-420}
MLP_ROWS=${MLP_ROWS:-jit_cold,jit_warm,mega_cache,aot_compile,aot_compile_warm,aoti}
GPT2_ROWS=${GPT2_ROWS:-jit_cold,jit_warm,mega_cache,aot_compile,aot_compile_warm,aoti}
REPRO=${REPRO---all}
SECOND_GPU=${SECOND_GPU:-}
GPT2_AOT_ROWS=${GPT2_AOT_ROWS:-aot_compile,aot_compile_warm,aoti}
GPT2_AOT_S=${GPT2_AOT_S:-300}
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
WORK=$(mktemp -d /tmp/compat-XXXX)
mkdir -p "$OUT"
date -u +"%Y-%m-%dT%H:%M:%SZ"
(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true) 2>&1
"$PY" - <<'PY'
import json, platform, os, torch
from harness.measure.capabilities import capabilities_summary
s = capabilities_summary()
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                  "cpus": os.cpu_count(), **s["versions"], "missing_features": s["missing"]}))
PY
names=${COMPILERS:-$("$PY" -c "from compiler.configs import builtin_configs; print(' '.join(c.name for c in builtin_configs()))")}
autotune=$(tr ' ' '\n' <<<"$names" | grep max-autotune | paste -sd, -)
rest=($(tr ' ' '\n' <<<"$names" | grep -v max-autotune))
half=$(( ${#rest[@]} / 2 ))
set_a=$(IFS=,; echo "${rest[*]:0:$half}")
set_b=$(IFS=,; echo "${rest[*]:$half}")
gpt2_coldstart() {  # tag, rows, budget_s
  timeout -s TERM "$3" "$PY" -m harness coldstart -w gpt2-prefill-logits --workload-file benchmarks/gpu/coldstart_workloads.py \
    --size "$GPT2_SIZE" --dtype "$GPT2_DTYPE" --device "$DEVICE" --batch-size 1 --steady-calls 50 --timeout 150 \
    --out "$WORK/coldstart-$1" \
    --rows "$2" --json-file "$WORK/coldstart-$1.json" > "$WORK/coldstart-$1.log" 2>&1
}
if [ -n "$SECOND_GPU" ]; then
  gpt2_start=$(date +%s)
  (CUDA_VISIBLE_DEVICES=$SECOND_GPU gpt2_coldstart gpt2-aot "$GPT2_AOT_ROWS" "$GPT2_AOT_S"
   echo "coldstart gpt2 [$GPT2_AOT_ROWS] on GPU $SECOND_GPU: exit $? in $(( $(date +%s) - gpt2_start )) s") &
  aot_pid=$!
  export CUDA_VISIBLE_DEVICES=${FIRST_GPU:-0}
  GPT2_ROWS=$(tr ',' '\n' <<<"$GPT2_ROWS" | grep -vxF -f <(tr ',' '\n' <<<"$GPT2_AOT_ROWS") | paste -sd, -)
fi
matrix() {  # tag, compilers
  timeout -s TERM "$PHASE1_S" "$PY" -m harness run -w mlp-blocks --workload-file benchmarks/gpu/compat_workloads.py \
    --scenario forward --size tiny --device "$DEVICE" -c "$2" --min-time 0.1 --min-samples 10 --timeout 180 \
    --out "$WORK/matrix-$1" --no-ingest --label "compat-matrix-$1" > "$WORK/matrix-$1.log" 2>&1
  echo "matrix $1 ($2): exit $?"
}
echo "== phase 1: compiler matrix [$set_a] [$set_b] [$autotune], mlp-deep cold start, AOTI reproducer"
start=$(date +%s)
for tag in a b c; do
  case $tag in a) set=$set_a ;; b) set=$set_b ;; c) set=$autotune ;; esac
  [ -n "$set" ] && matrix "$tag" "$set" &
done
(timeout -s TERM "$PHASE1_S" "$PY" -m harness coldstart -w mlp-deep --size tiny --device "$DEVICE" --steady-calls 50 \
   --rows "$MLP_ROWS" --timeout 150 --out "$WORK/coldstart-mlp-deep" --json-file "$WORK/coldstart-mlp-deep.json" > "$WORK/coldstart-mlp-deep.log" 2>&1; echo "coldstart mlp-deep: exit $?") &
if [ -n "$REPRO" ]; then
  (timeout -s TERM "$PHASE1_S" "$PY" benchmarks/gpu/aoti_repro.py $REPRO --device "$DEVICE" > "$WORK/aoti-repro.log" 2>&1;
   echo "aoti repro: exit $?") &
fi
wait $(jobs -p | grep -vx "${aot_pid:-none}")
echo "phase 1: $(( $(date +%s) - start )) s"
echo "== phase 2: GPT-2 cold start ($GPT2_SIZE, $GPT2_DTYPE), alone"
start=$(date +%s)
gpt2_coldstart gpt2 "$GPT2_ROWS" "$PHASE2_S"
echo "coldstart gpt2 [$GPT2_ROWS]: exit $? in $(( $(date +%s) - start )) s"
wait  # the second GPU's GPT-2 rows
for f in "$WORK"/matrix-*.log "$WORK"/coldstart-*.log; do echo "---- $(basename "$f")"; tail -n 40 "$f"; done
[ -f "$WORK/aoti-repro.log" ] && echo "---- aoti-repro.log" && grep -E "^== |SUMMARY|step:|Fatal|Segmentation|File \"" "$WORK/aoti-repro.log" | tail -n 60
"$PY" - "$WORK" <<'PY'
import glob, json, sys
for path in sorted(glob.glob(sys.argv[1] + "/matrix-*/runs/*.json")):
    for r in json.load(open(path))["records"]:
        c, m, e = r["case"], r.get("metrics") or {}, r.get("error") or {}
        print(f"{c['compiler']:38s} {r['status']:12s} compile {m.get('compile_time_s') or 0:7.2f} s  "
              f"speedup {m.get('speedup') or 0:5.2f}  {(e.get('message') or '')[:150]}")
PY
tar czf "$OUT/compat.tar.gz" -C "$WORK" --exclude='cache-*' --exclude='*.pt2' --exclude='*.bin' --exclude='*.so' \
  --exclude='history.sqlite' . 2>/dev/null
ls -la "$OUT"
