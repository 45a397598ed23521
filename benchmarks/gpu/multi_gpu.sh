#!/usr/bin/env bash
# Two GPUs of one host (a 2 x H200 box): the `gpu` suite with --gpus 0,1, and DDP/FSDP2
# training steps of a compiled model over NCCL with torchrun (--nproc_per_node 2).
#
#   OUT=/path PART=dist bash benchmarks/gpu/multi_gpu.sh               # DDP + FSDP2, NCCL (~3-5 min)
#   OUT=/path PART=suite SHARD=1/2 bash benchmarks/gpu/multi_gpu.sh    # half the gpu suite on 2 GPUs
#   OUT=/path PART=suite SHARD=2/2 SINGLE="one-GPU run files" bash ... # + speedup vs the one-GPU runs
#
# SINGLE: run files from gpu_suite.sh (one GPU); summarize.py then prints the speedup =
# one-GPU worker time of the same cases / this run's wall time (target >= 1.6x).
# NVLink multicast / NVLS stay off on the lent machines.
set -uo pipefail
: "${OUT:?set OUT to the folder for logs and results}"
PART="${PART:-dist}"
SHARD="${SHARD:-1/2}"
GPUS="${GPUS:-0,1}"
BUDGET_S="${BUDGET_S:-450}"
SINGLE="${SINGLE:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
PY="${PYTHON:-python3}"
mkdir -p "$OUT/results"
(nvidia-smi topo -m; nvidia-smi --query-gpu=index,name,memory.total --format=csv) > "$OUT/gpu-info.txt" 2>&1 || true
start=$(date +%s.%N)
if [ "$PART" = "dist" ]; then
    tag="dist"
    # compilebench distributed runs `python -m torch.distributed.run --standalone --nproc_per_node 2` per case
    timeout -s TERM "$BUDGET_S" "$PY" -m harness distributed --nproc 2 --backend nccl --device cuda \
        --strategy ddp,fsdp2 -c eager -c inductor -w mlp-deep --size full --dtype bfloat16 --steps 20 --warmup 3 \
        --timeout 200 --out "$OUT/results" --label "$tag" > "$OUT/run-$tag.log" 2>&1
    rc=$?
else
    tag="suite-gpus-$(echo "$SHARD" | tr / o)"
    timeout -s TERM "$BUDGET_S" "$PY" -m harness run --suite gpu --device cuda --gpus "$GPUS" --shard "$SHARD" \
        --shard-costs none --out "$OUT/results" --label "$tag" > "$OUT/run-$tag.log" 2>&1
    rc=$?
fi
end=$(date +%s.%N)
echo "{\"part\": \"$PART\", \"shard\": \"$SHARD\", \"gpus\": \"$GPUS\", \"wall_s\": $("$PY" -c "print(round($end - $start, 1))"), \"rc\": $rc}" | tee "$OUT/wall-$tag.json"
tail -n 40 "$OUT/run-$tag.log"
run_file=$(ls -t "$OUT"/results/runs/*.json 2>/dev/null | head -n 1)
if [ -z "$run_file" ]; then echo "no run file written (rc=$rc)"; exit 1; fi
"$PY" -m harness report "$run_file" -o "$OUT/report-$tag.html" || true
# shellcheck disable=SC2086
"$PY" benchmarks/gpu/summarize.py "$run_file" ${SINGLE:+--single $SINGLE} | tee "$OUT/summary-$tag.md"
exit 0
