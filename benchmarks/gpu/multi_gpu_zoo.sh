#!/usr/bin/env bash
# Issue 26: the model-zoo suites across every GPU of one host, scaling measured.
#
# Per suite (SUITES, default "hf timm"), in $OUT/<suite>/:
#   1. shards:   N runs `--shard i/N` at once, shard i alone on GPU i (one case at a time each: their
#                case walls are the one-GPU reference), N = the visible GPUs; partitioned by COSTS
#                (a history .sqlite every shard sees alike; default none = round-robin)
#   2. merge:    `compilebench merge` of the N shards -> merged.json, ingested into the history of step 3
#   3. gpus-all: `compilebench run --suite S --gpus all`: the shared queue ordered longest first by the
#                shards' measured times, its config.multi_gpu scored against them (vs_history)
#   4. check:    benchmarks/scaling_check.py check gpus-all merged (same cases, statuses, breaks,
#                accuracy; figures within noise) and one row of the table -> $OUT/scaling-table.md
#
# Each call stops itself at BUDGET_S (SIGTERM: finished cases are journaled) and the next call
# resumes where it stopped (`run --resume`), so call it until it prints ALL DONE:
#
#   OUT=/path bash benchmarks/gpu/multi_gpu_zoo.sh          # 8 x H200 (nvidia-h200-x8): repeat until ALL DONE
#
# 1-GPU dry run of the same steps (N=1: one shard = the whole plan, --gpus all = one GPU), 2 compiled cases:
#   OUT=/path BUDGET_S=170 SUITES=hf SELECT="-w hf-BertForMaskedLM,hf-DistilBertForMaskedLM --scenario forward --size tiny -c inductor" \
#       bash benchmarks/gpu/multi_gpu_zoo.sh
# CPU rehearsal (two fake GPUs running CPU cases; COMPILEBENCH_TEST_FAKE_GPUS is test-only):
#   OUT=/tmp/zoo FAKE_GPUS=2 SUITES=hf-tiny SELECT="-w hf-BertForMaskedLM,hf-DistilBertForMaskedLM --scenario forward -c eager" \
#       PYTHON=/work/venv/bin/python bash benchmarks/gpu/multi_gpu_zoo.sh
#
# NVLink multicast / NVLS stay off on the lent machines.
set -uo pipefail
: "${OUT:?set OUT to the folder for run files, logs and the table}"
SUITES="${SUITES:-hf timm}"
SELECT="${SELECT:-}"
BUDGET_S="${BUDGET_S:-540}"            # one call of the device tool is 600 s at most
CASE_TIMEOUT_S="${CASE_TIMEOUT_S:-420}" # one case never holds a whole call
COSTS="${COSTS:-none}"
FAKE_GPUS="${FAKE_GPUS:-}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
START=$(date +%s)
mkdir -p "$OUT"
[ -n "$FAKE_GPUS" ] && export COMPILEBENCH_TEST_FAKE_GPUS="$FAKE_GPUS"

left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }

# the GPUs this process sees, as CUDA_VISIBLE_DEVICES entries (the parent's mask, if any)
if [ -n "$FAKE_GPUS" ]; then
    mapfile -t GPU_IDS < <(seq 0 $((FAKE_GPUS - 1)))
elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    IFS=, read -r -a GPU_IDS <<< "$CUDA_VISIBLE_DEVICES"
else
    mapfile -t GPU_IDS < <("$PY" -c "import torch; print('\n'.join(map(str, range(torch.cuda.device_count()))))")
fi
N="${N:-${#GPU_IDS[@]}}"
if [ "$N" -lt 1 ]; then echo "no GPU visible: run on a GPU host (or FAKE_GPUS=2 to rehearse on CPU)"; exit 2; fi

{
    date -u +"date: %Y-%m-%dT%H:%M:%SZ"
    "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
    "$PY" -c "import timm; print('timm', timm.__version__)" 2>/dev/null || echo "timm: not importable"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv 2>/dev/null || echo "nvidia-smi: none"
    echo "shards N=$N on GPUs ${GPU_IDS[*]}; SELECT=$SELECT; COSTS=$COSTS; git $(git rev-parse --short HEAD 2>/dev/null)"
} > "$OUT/versions.txt" 2>&1

# state DIR: done (a run file and no journal), resume:JOURNAL, or new
state() {
    local journal
    journal=$(ls "$1"/runs/*.journal.jsonl 2>/dev/null | head -n 1)
    if [ -n "$journal" ]; then echo "resume:$journal"
    elif ls "$1"/runs/*.json > /dev/null 2>&1; then echo done
    else echo new; fi
}

# step DIR LOG ARGS...: start or resume one run in DIR within the call's budget; 0 when DIR is done
step() {
    local dir=$1 log=$2 s
    shift 2
    s=$(state "$dir")
    [ "$s" = done ] && return 0
    [ "$(left)" -lt 30 ] && return 1
    mkdir -p "$dir"
    if [ "${s%%:*}" = resume ]; then
        timeout -s TERM "$(left)" "$PY" -m harness run --resume "${s#resume:}" --out "$dir" >> "$log" 2>&1
    else
        # shellcheck disable=SC2086
        timeout -s TERM "$(left)" "$PY" -m harness run "$@" $SELECT --timeout "$CASE_TIMEOUT_S" --out "$dir" >> "$log" 2>&1
    fi
    [ "$(state "$dir")" = done ]
}

all_done=1
for suite in $SUITES; do
    dir="$OUT/$suite"
    mkdir -p "$dir"
    # 1. N shards at once, shard i alone on GPU i
    pids=()
    for i in $(seq 1 "$N"); do
        (
            [ -z "$FAKE_GPUS" ] && export CUDA_VISIBLE_DEVICES="${GPU_IDS[$((i - 1))]}"
            step "$dir/shard-$i" "$dir/shard-$i.log" --suite "$suite" --shard "$i/$N" --shard-costs "$COSTS" \
                --label "$suite-shard-$i-of-$N"
        ) &
        pids+=($!)
    done
    shards_ok=1
    for pid in "${pids[@]}"; do wait "$pid" || shards_ok=0; done
    if [ "$shards_ok" != 1 ]; then echo "$suite: shards not finished yet (call again)"; all_done=0; continue; fi
    # 2. merge, and give the merged shards to step 3 as its history (queue order and one-GPU reference)
    if [ ! -f "$dir/merged.json" ]; then
        mkdir -p "$dir/gpus-all"
        if ! "$PY" -m harness merge "$dir"/shard-*/runs/*.json -o "$dir/merged.json" --label "$suite-merged" \
                --ingest "$dir/gpus-all/history.sqlite" >> "$dir/merge.log" 2>&1; then
            echo "$suite: merge failed: $(tail -n 1 "$dir/merge.log")"; all_done=0; continue
        fi
    fi
    # 3. --gpus all (the history in its --out holds only the merged shards)
    if ! step "$dir/gpus-all" "$dir/gpus-all.log" --suite "$suite" --gpus all --label "$suite-gpus-all"; then
        echo "$suite: --gpus all not finished yet (call again)"; all_done=0; continue
    fi
    # 4. check and the table row
    gpus_run=$(ls "$dir"/gpus-all/runs/*.json | head -n 1)
    if [ ! -f "$dir/check.txt" ]; then
        "$PY" benchmarks/scaling_check.py check "$gpus_run" "$dir/merged.json" > "$dir/check.txt" 2>&1
        echo "exit $?" >> "$dir/check.txt"
        "$PY" benchmarks/scaling_check.py table --suite "$suite" --gpus-run "$gpus_run" \
            --shard-runs "$dir"/shard-*/runs/*.json --merged "$dir/merged.json" --markdown "$OUT/scaling-table.md"
        "$PY" -m harness show "$gpus_run" --format markdown > "$dir/gpus-all-show.md" 2>&1
    fi
    cat "$dir/check.txt"
done
echo "call wall: $(( $(date +%s) - START ))s (budget ${BUDGET_S}s)"
if [ "$all_done" = 1 ]; then
    echo "ALL DONE: table in $OUT/scaling-table.md; run files to commit under results/baselines/: $OUT/*/gpus-all/runs/*.json $OUT/*/merged.json"
else
    echo "NOT DONE: call again with the same OUT"
fi
