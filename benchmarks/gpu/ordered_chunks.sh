#!/usr/bin/env bash
# A suite's workloads in a chosen order (cheapest first), K at a time, each chunk its own
# `run` and run file: a device call cut short at any point keeps every finished chunk (and the
# interrupted chunk's finished cases), and the models that got done are the cheap ones, not a
# round-robin share. Merge afterwards: compilebench merge DIR/chunk-*/runs/*.json -o merged.json
#
#   DIR=/tmp/cb-hftrain SUITE=hf SCENARIO=train MODELS="hf-PLBartForCausalLM hf-DistillGPT2 ..." K=3 \
#     bash benchmarks/gpu/ordered_chunks.sh
#
# COMPILERS (default eager,inductor: forward eager rows derived from the inductor processes, train
# eager cases in processes of their own),
# CASE_TIMEOUT_S (default 300), DEVICE (default cuda), EXTRA (more `run` flags), SITE: extra wheels' folder on PYTHONPATH (diffusers).
set -uo pipefail
: "${DIR:?set DIR to the folder for the chunks}" "${SUITE:?}" "${MODELS:?}"
SCENARIO="${SCENARIO:-forward,train}"
COMPILERS="${COMPILERS:-eager,inductor}"
K="${K:-3}"
CASE_TIMEOUT_S="${CASE_TIMEOUT_S:-300}"
PY="${PYTHON:-python3}"
export PYTHONPATH="${SITE:+$SITE:}$PWD" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$DIR"
read -r -d "" -a models <<< "$MODELS" || true  # MODELS may span lines
for ((i = 0; i < ${#models[@]}; i += K)); do
  chunk=$(IFS=,; echo "${models[*]:i:K}")
  n=$((i / K + 1)); s=$(date +%s)
  "$PY" -m harness run --suite "$SUITE" --device "${DEVICE:-cuda}" -w "$chunk" -c "$COMPILERS" --scenario "$SCENARIO" \
      --timeout "$CASE_TIMEOUT_S" --out "$DIR/chunk-$n" --no-ingest --label "$SUITE-$SCENARIO-chunk-$n" ${EXTRA:-} \
      > "$DIR/chunk-$n.log" 2>&1
  echo "{\"chunk\": $n, \"models\": \"$chunk\", \"rc\": $?, \"wall_s\": $(( $(date +%s) - s ))}" | tee -a "$DIR/chunks.jsonl"
done
