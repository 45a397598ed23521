#!/usr/bin/env bash
# Llama-3.1-8B (bf16, random weights) on one GPU: prefill 1x512 and decode (bs 1, 128 tokens
# per call from a 512-token prompt), inductor default vs reduce-overhead; every case also
# measures eager, interleaved in the same process. Then the decode-loop overhead benchmark.
#
#   OUT=/tmp/out PYTHONPATH=$PWD bash benchmarks/gpu/llm.sh      (repository root as cwd)
#
# Writes under $OUT: versions.txt, run.log, show.txt, results/runs/*.json, decode_overhead.{log,json}.
# Budget: about 6 minutes on an H200 (4 cases of ~1 min each, most of it cold compile).
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

# 1. the harness: prefill + decode, two compilers (eager is measured inside each case)
timeout 330 $PY -m harness run --workload llama-3.1-8b --scenario prefill,decode \
  --compiler inductor,inductor-reduce-overhead --device cuda --dtype bfloat16 --size full \
  --min-time 2 --min-samples 10 --timeout 160 --out "$OUT/results" --label llama8b-h200 2>&1 | tee "$OUT/run.log"
run_rc=${PIPESTATUS[0]}
$PY -m harness show latest --out "$OUT/results" > "$OUT/show.txt" 2>&1
$PY - "$OUT/results" <<'PYEOF' | tee "$OUT/summary.txt"
import json, sys, glob
for path in sorted(glob.glob(sys.argv[1] + "/runs/*.json")):
    run = json.load(open(path))
    for r in run["records"]:
        m = r.get("metrics", {})
        keys = ["param_count", "compile_time_s", "speedup", "recompiles", "graph_breaks", "cudagraph_skips",
                "ttft_s_median", "eager_ttft_s_median", "prefill_tokens_per_s", "eager_prefill_tokens_per_s",
                "tpot_s_median", "tpot_s_p90", "eager_tpot_s_median", "decode_tokens_per_s", "eager_decode_tokens_per_s",
                "bandwidth_utilisation", "eager_bandwidth_utilisation", "peak_bandwidth_source"]
        print(r["case_id"], r["status"], (r.get("error") or {}).get("message", "")[:300])
        print("   ", json.dumps({k: m.get(k) for k in keys if k in m}))
PYEOF

# 2. decode-loop overhead against a minimal loop on the same compiled 8B step
timeout 150 $PY benchmarks/llm_decode_overhead.py --device cuda --size full --dtype bfloat16 \
  --mode reduce-overhead --rounds 20 --json "$OUT/decode_overhead.json" 2>&1 | tee "$OUT/decode_overhead.log"
bench_rc=${PIPESTATUS[0]}
echo "harness run exit code: $run_rc, overhead benchmark exit code: $bench_rc" | tee -a "$OUT/versions.txt"
