#!/usr/bin/env bash
# The next session's device work as one background chain (docs/BENCHMARKS.md, "Fifth session",
# Next session), started and collected by bench_gpu_bg.sh:
#   call 1: DIR=/tmp/cb-s6 RUN_CMD="bash benchmarks/gpu/session6_chain.sh" bash benchmarks/gpu/bench_gpu_bg.sh start; \
#           OUT=$OUT WAIT_S=540 DIR=/tmp/cb-s6 bash benchmarks/gpu/bench_gpu_bg.sh collect
#   call 2..: OUT=$OUT WAIT_S=540 DIR=/tmp/cb-s6 bash benchmarks/gpu/bench_gpu_bg.sh collect   (back to back)
#   last call: ... collect with a shorter WAIT_S, then `bench_gpu_bg.sh stop` (saves the cut run)
# 1. fork vs spawn, REPEAT processes each (benchmarks/gpu/fork_vs_spawn.sh): does the GPU case's
#    smaller server (7cc12c6) close the Inductor-phase gap that made 5248cda spawn GPU cases?
# 2. the fifth session's cut hf train run, finished from its journal (RESUME_DIR, `run --resume`);
# 3. the other hf train steps, cheapest first, 3 models a run (ordered_chunks.sh).
# Dry run on CPU: DEVICE=cpu EXTRA="--size tiny" FVS_ARGS="-w mlp-classic --device cpu --size tiny ..." RESUME_DIR=
set -uo pipefail
DIR="${DIR:?}"
SITE="${SITE:-/tmp/site}"
PY="${PYTHON:-python3}"
mkdir -p "$DIR"
[ -d "$SITE" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  .whl/diffusers-*.whl .whl/ruptures-*.whl .whl/importlib_metadata-*.whl .whl/zipp-*.whl .whl/lazy_importer-*.whl \
  > "$DIR/pip.log" 2>&1
OUT="$DIR/fvs" SITE="$SITE" REPEAT="${REPEAT:-4}" \
  ARGS="${FVS_ARGS:---suite gpu --device cuda -w mlp-deep --scenario forward -c eager,inductor}" \
  bash benchmarks/gpu/fork_vs_spawn.sh > "$DIR/fvs.log" 2>&1
RESUME_DIR="${RESUME_DIR-results/baselines/h200-2026-12-01e/hf-train/chunk-2}"
if [ -n "$RESUME_DIR" ]; then
  cp -r "$RESUME_DIR" "$DIR/resume"
  for journal in "$DIR"/resume/runs/*.journal.jsonl; do
    [ -e "$journal" ] || continue  # none left: a finished resume removes its journal
    id=$(basename "$journal" .journal.jsonl)
    PYTHONPATH="$SITE:$PWD" HF_HUB_OFFLINE=1 "$PY" -m harness run --resume "$id" --out "$DIR/resume" \
      > "$DIR/resume-$id.log" 2>&1
    echo "{\"resume\": \"$id\", \"rc\": $?}" >> "$DIR/resume.jsonl"
  done
fi
DIR="$DIR/hf-train" SITE="$SITE" SUITE=hf SCENARIO=train K=3 MODELS="${MODELS:-$(grep -v '^#' benchmarks/gpu/hf_train_order.txt | tail -n +7)}" bash benchmarks/gpu/ordered_chunks.sh > "$DIR/hf-train.log" 2>&1
