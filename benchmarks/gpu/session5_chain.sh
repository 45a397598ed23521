#!/usr/bin/env bash
# The fifth session's device work as one background chain (started by bench_gpu_bg.sh RUN_CMD,
# collected by the calls after it; everything lands under $DIR):
# 1. issue 25's GPU proof: old (7edde66, .old) vs this tree, the `gpu` suite's six mlp-deep
#    cases, 3 processes a side interleaved, then compare; the new side's run files also check
#    the two memory fixes (074232f: peaks read around the last warm-up call, nothing subtracted)
#    through memory_rounds_table.py;
# 2. issue 24: the `hf` suite's train steps at full size, eager + inductor, cheapest first (by
#    the H200 forward walls of hf-forward-all39-dynamo-merged.json), 3 models a chunk, until the
#    device budget ends the call.
set -uo pipefail
DIR="${DIR:?}"
SITE="${SITE:-/tmp/site}"
OUT="$DIR/oldnew" SITE="$SITE" REPEAT="${REPEAT:-3}" OLD_S=170 NEW_S=140 \
  ARGS="--suite gpu --device cuda -w mlp-deep" bash benchmarks/gpu/oldnew.sh > "$DIR/oldnew.log" 2>&1
PYTHONPATH="$SITE:$PWD" python3 benchmarks/gpu/memory_rounds_table.py "$DIR"/oldnew/new/runs/*.json \
  > "$DIR/memory-rounds-new.txt" 2>&1
PYTHONPATH="$SITE:$PWD" python3 benchmarks/gpu/memory_rounds_table.py "$DIR"/oldnew/old/runs/*.json \
  > "$DIR/memory-rounds-old.txt" 2>&1
DIR="$DIR/hf-train" SITE="$SITE" SUITE=hf SCENARIO=train K=3 MODELS="${MODELS:-$(grep -v '^#' benchmarks/gpu/hf_train_order.txt)}" bash benchmarks/gpu/ordered_chunks.sh > "$DIR/hf-train.log" 2>&1
