#!/usr/bin/env bash
# Llama-3.1-8B (bf16, random weights) on one GPU: prefill 1x512 and decode (bs 1, 64 tokens
# per call from a 512-token prompt), inductor default vs reduce-overhead; every case also
# measures eager, interleaved in the same process. Then the decode-loop overhead benchmark.
#
#   OUT=/tmp/out PYTHONPATH=$PWD bash benchmarks/gpu/llm.sh      (repository root as cwd)
#   PART=generate OUT=/tmp/out2 PYTHONPATH=$PWD bash benchmarks/gpu/llm.sh
#     second part (another ~6 minutes): Llama-3.1-8B and Qwen2.5-0.5B `generate` with
#     reduce-overhead through generation_config.compile_config against a disable_compile
#     eager baseline, then GPT-2 and Qwen2.5-0.5B training steps (inductor).
#
# Writes under $OUT: versions.txt, run.log, show.txt, summary.txt, runs/*.json, decode_overhead.{log,json}.
# Budget: about 7 minutes on an H200: 4 cases of 70-100 s (40-50 s of it cold compile of the
# 8B graph; eager decode at ~35 ms/token is the slowest part of measuring), then ~90 s of
# overhead benchmark. Measured there (2026-11-30): decode cases 100-105 s each.
set -uo pipefail
: "${OUT:?set OUT to an output folder}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY=${PYTHON:-python3}
mkdir -p "$OUT"

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  $PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda); print('transformers', transformers.__version__); print('gpu', torch.cuda.get_device_name(0))"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
} | tee "$OUT/versions.txt"

# one line per record: status, error, and the named metrics (plus the common ones)
summary() {
  $PY - "$OUT" "$@" <<'PYEOF' | tee "$OUT/summary.txt"
import json, sys, glob
common = ["param_count", "compile_time_s", "speedup", "recompiles", "graph_breaks", "cudagraph_skips"]
for path in sorted(glob.glob(sys.argv[1] + "/runs/*.json")):
    for r in json.load(open(path))["records"]:
        m = r.get("metrics", {})
        print(r["case_id"], r["status"], (r.get("error") or {}).get("message", "")[:300])
        print("   ", json.dumps({k: m.get(k) for k in common + sys.argv[2:] if k in m}))
PYEOF
}

run_part_generate() {
  timeout 300 $PY -m harness run --workload llama-3.1-8b,qwen2.5-0.5b --scenario generate \
    --compiler inductor-reduce-overhead --device cuda --dtype bfloat16 --size full \
    --min-time 1 --min-samples 5 --timeout 200 --out "$OUT" --label llm-generate-gpu 2>&1 | tee "$OUT/run.log"
  timeout 160 $PY -m harness run --workload gpt2,qwen2.5-0.5b --scenario llm-train \
    --compiler inductor --device cuda --dtype bfloat16 --size full \
    --min-time 1 --min-samples 5 --timeout 120 --out "$OUT" --label llm-train-gpu 2>&1 | tee -a "$OUT/run.log"
}

if [ "${PART:-decode}" = generate ]; then
  run_part_generate
  summary eager_generate_compiled_frames ttft_s_median eager_ttft_s_median tpot_s_median tpot_s_p90 \
    eager_tpot_s_median e2e_tokens_per_s eager_e2e_tokens_per_s train_samples_per_s eager_train_samples_per_s \
    train_tokens_per_s accuracy
  exit 0
fi

# 1. the harness: prefill + decode, two compilers (eager is measured inside each case)
timeout 380 $PY -m harness run --workload llama-3.1-8b --scenario decode,prefill \
  --compiler inductor-reduce-overhead,inductor --device cuda --dtype bfloat16 --size full \
  --min-time 1 --min-samples 5 --timeout 200 --out "$OUT" --label llama8b-gpu 2>&1 | tee "$OUT/run.log"
run_rc=${PIPESTATUS[0]}
$PY -m harness show latest --out "$OUT" > "$OUT/show.txt" 2>&1
summary ttft_s_median eager_ttft_s_median prefill_tokens_per_s eager_prefill_tokens_per_s tpot_s_median tpot_s_p90 \
  eager_tpot_s_median decode_tokens_per_s eager_decode_tokens_per_s bandwidth_utilisation eager_bandwidth_utilisation \
  peak_bandwidth_source

# 2. decode-loop overhead against a minimal loop on the same compiled 8B step
timeout 95 $PY benchmarks/llm_decode_overhead.py --device cuda --size full --dtype bfloat16 \
  --mode reduce-overhead --rounds 10 --json "$OUT/decode_overhead.json" 2>&1 | tee "$OUT/decode_overhead.log"
bench_rc=${PIPESTATUS[0]}
echo "harness run exit code: $run_rc, overhead benchmark exit code: $bench_rc" | tee -a "$OUT/versions.txt"
