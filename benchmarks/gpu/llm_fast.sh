#!/usr/bin/env bash
# Batch-1 decode of Llama-3.1-8B and Gemma-2B (bf16, random weights, static KV cache, the
# harness's `decode` scenario: 64 tokens per call after a 512-token prompt) under gpt-fast's
# recipe as a named compiler config, against the HBM bandwidth; then a torch profiler summary
# of each compiled decode step (benchmarks/gpu/decode_profile.py) showing where time goes.
#
#   OUT=/tmp/out PYTHONPATH=$PWD bash benchmarks/gpu/llm_fast.sh      (repository root as cwd)
#   COMPILER=gpt-fast OUT=... bash benchmarks/gpu/llm_fast.sh           (reduce-overhead variant)
#
# Steps: (1) the device-to-device copy bandwidth (bytes read + written), the ceiling beside
# the 4.8 TB/s datasheet figure the records use; (2) Llama decode, its own empty compile cache
# (a cold compile); (3) Gemma decode, likewise; (4) the profiles, on those caches (warm).
# Writes under $OUT: versions.txt, bandwidth.json, run.log, runs/*.json, profile_*.json, summary.txt.
# Budget: BUDGET_S (default 540 s); a step that no longer fits is not started.
# Dry run on CPU: OUT=/tmp/dry DEVICE=cpu SIZE=tiny DTYPE=float32 COMPILER=aot_eager bash benchmarks/gpu/llm_fast.sh
BUDGET_S=${BUDGET_S:-540}
# shellcheck source=benchmarks/gpu/common.sh
source "$(dirname "$0")/common.sh"  # OUT, PY, DEVICE, SIZE, START, remaining, fit_limit, versions
DTYPE=${DTYPE:-bfloat16}
COMPILER=${COMPILER:-gpt-fast-max-autotune}
CACHE_ROOT=${CACHE_ROOT:-/tmp/cb-llm-cache}

versions "compiler $COMPILER, device $DEVICE, size $SIZE, dtype $DTYPE, budget ${BUDGET_S}s" transformers

if [ "$DEVICE" = cuda ]; then
  timeout 60 $PY - "$OUT/bandwidth.json" <<'PYEOF' | tee -a "$OUT/versions.txt"
import json, sys, torch
n = 4 * 2**30 // 2  # 4 GiB of bf16, far beyond the 60 MB L2
src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
dst = torch.empty_like(src)
for _ in range(3):
    dst.copy_(src)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
times = []
for _ in range(20):
    start.record(); dst.copy_(src); end.record(); end.synchronize()
    times.append(start.elapsed_time(end) / 1e3)
times.sort()
bw = 2 * src.numel() * src.element_size() / times[len(times) // 2]
print(f"device-to-device copy: {bw / 1e12:.2f} TB/s (median of 20, bytes read + written, 4 GiB)")
json.dump({"copy_bandwidth_bytes_s": bw, "samples_s": times}, open(sys.argv[1], "w"))
PYEOF
fi

decode_case() {  # workload timeout_s
  local wl=$1 limit dir="$CACHE_ROOT/$1"
  limit=$(fit_limit "$wl decode" "$2" 20 60) || return
  rm -rf "$dir"; mkdir -p "$dir"
  echo "=== $wl decode, $COMPILER, timeout ${limit}s ($(remaining)s left)" | tee -a "$OUT/run.log"
  COMPILEBENCH_COMPILE_CACHE_DIR="$dir" timeout $(( limit + 20 )) $PY -m harness run --workload "$wl" \
    --scenario decode --compiler "$COMPILER" --device "$DEVICE" --dtype "$DTYPE" --size "$SIZE" \
    --min-time 1 --min-samples 5 --warmup 1 --timeout "$limit" --out "$OUT" --label "$wl-decode-$COMPILER" \
    --no-ingest 2>&1 | tee -a "$OUT/run.log"
  echo "=== $wl decode: exit code ${PIPESTATUS[0]}" | tee -a "$OUT/run.log"
}

# --tokens 64: the decode case's cache length (512 + 64), so the profile's compile hits the
# case's cache; another length is another graph and a cold compile (95 s for Llama on an H200)
profile() {  # workload timeout_s
  local wl=$1 limit
  limit=$(fit_limit "$wl profile" "$2" 10 45) || return
  echo "=== $wl profile ($(remaining)s left)" | tee -a "$OUT/run.log"
  TORCHINDUCTOR_CACHE_DIR="$CACHE_ROOT/$wl" timeout "$limit" $PY benchmarks/gpu/decode_profile.py --workload "$wl" \
    --compiler "$COMPILER" --size "$SIZE" --dtype "$DTYPE" --device "$DEVICE" --tokens 64 --json "$OUT/profile_$wl.json" \
    2>&1 | grep -v "^USDT\|^STAGE" | tee -a "$OUT/run.log"
}

decode_case llama-3.1-8b 230
decode_case gemma-2b 140
profile llama-3.1-8b 150
profile gemma-2b 100

$PY - "$OUT" <<'PYEOF' | tee "$OUT/summary.txt"
import glob, json, sys
keys = ["param_count", "compile_time_s", "graph_breaks", "recompiles", "tpot_s_median", "tpot_s_p90",
        "decode_tokens_per_s", "eager_decode_tokens_per_s", "bandwidth_utilisation", "achieved_bandwidth_bytes_s",
        "weight_bytes_per_step", "kv_cache_bytes_per_step", "peak_bandwidth_source", "speedup"]
copy = None
try:
    copy = json.load(open(sys.argv[1] + "/bandwidth.json"))["copy_bandwidth_bytes_s"]
except OSError:
    pass
for path in sorted(glob.glob(sys.argv[1] + "/runs/*.json")):
    for r in json.load(open(path))["records"]:
        m = r.get("metrics", {})
        print(r["case_id"], r["status"], (r.get("error") or {}).get("message", "")[:300])
        print("   ", json.dumps({k: m.get(k) for k in keys if k in m}))
        if copy and m.get("achieved_bandwidth_bytes_s"):
            print(f"    of measured copy bandwidth ({copy / 1e12:.2f} TB/s): {m['achieved_bandwidth_bytes_s'] / copy:.1%}")
PYEOF
wall_line "$OUT/summary.txt"
