#!/usr/bin/env bash
# The `hf` suite (PyTorch's HuggingFace dashboard list, 39 models, full size, float32, eager vs
# inductor, forward + train step: 146 cases) as shards that each fit one 9-minute call.
#
#   OUT=/path N=20 SHARDS="1"           bash benchmarks/gpu/hf_shards.sh   # one H200: shard 1 of 20
#   OUT=/path N=24 SHARDS="1 2 3 4 5 6 7 8" bash benchmarks/gpu/hf_shards.sh   # 8 H200s: 8 shards at once
#   OUT=/path RESUME=<run id> SHARDS=3 bash benchmarks/gpu/hf_shards.sh   # finish interrupted shard 3
#
# Each shard in SHARDS runs on its own GPU (CUDA_VISIBLE_DEVICES = its position in SHARDS), all at
# once, each stopped with SIGTERM at BUDGET_S (finished cases are saved; the run is marked
# interrupted and `RESUME=<its run id>` finishes it in a later call). The partition is round-robin
# (--shard-costs none), so every call computes the same split. SUITE=timm runs the timm suite
# the same way (260 cases; timm must be importable: pip install timm with a matching torchvision).
#
# How many shards (docs/SUITES.md, "On the H200"): estimated from model sizes and the tiny-size
# compile times on CPU, not measured on the H200 yet: eager cases ~20 s (worker start, random init
# on the GPU, 1 s of samples), inductor forward ~60 s, inductor train step ~120 s, the 7-20 B
# models (GPT-J, Mistral-7B, gpt-oss-20b) a few minutes each. About 130 min for the hf suite on
# one GPU: N=20 gives ~6.5 min a shard; N=24 leaves room for an unlucky shard with two large
# models. Merge the shards on any machine afterwards:
#   python3 -m harness merge OUT/shard-*/runs/*.json -o hf-merged.json && python3 -m harness show hf-merged.json
set -uo pipefail
: "${OUT:?set OUT to the folder for logs and run files}"
SUITE="${SUITE:-hf}"
N="${N:-20}"
SHARDS="${SHARDS:-1}"
BUDGET_S="${BUDGET_S:-500}"
CASE_TIMEOUT_S="${CASE_TIMEOUT_S:-420}"  # one case never holds a whole call
EXTRA="${EXTRA:-}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
(nvidia-smi --query-gpu=index,name,memory.total --format=csv || true) > "$OUT/gpu-info.txt" 2>&1
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count(), 'transformers', transformers.__version__)" | tee "$OUT/versions.txt"
start=$(date +%s)
if [ -n "${RESUME:-}" ]; then
    timeout -s TERM "$BUDGET_S" "$PY" -m harness run --resume "$RESUME" --out "$OUT/shard-${SHARDS%% *}" \
        > "$OUT/resume-$RESUME.log" 2>&1
    echo "resume $RESUME exit $? after $(( $(date +%s) - start )) s"; tail -n 30 "$OUT/resume-$RESUME.log"; exit 0
fi
gpu=0
for i in $SHARDS; do
    (
        export CUDA_VISIBLE_DEVICES=$gpu
        # shellcheck disable=SC2086
        timeout -s TERM "$BUDGET_S" "$PY" -m harness run --suite "$SUITE" --device cuda --shard "$i/$N" --shard-costs none \
            --timeout "$CASE_TIMEOUT_S" --out "$OUT/shard-$i" --label "$SUITE-$i-of-$N" $EXTRA > "$OUT/run-$i.log" 2>&1
        echo "{\"suite\": \"$SUITE\", \"shard\": \"$i/$N\", \"gpu\": $gpu, \"rc\": $?, \"wall_s\": $(( $(date +%s) - start ))}" \
            | tee "$OUT/wall-$i.json"
    ) &
    gpu=$((gpu + 1))
done
wait
for i in $SHARDS; do
    echo "== shard $i/$N"; grep -E "^\[[0-9]+/[0-9]+\] (ok|fail|skipped|oom|timeout|crashed)|statuses:" "$OUT/run-$i.log" | tail -n 20
done
exit 0
