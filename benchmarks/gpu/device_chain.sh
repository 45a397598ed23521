#!/usr/bin/env bash
# A session's device work as one background chain of steps, started and collected by
# bench_gpu_bg.sh, so back-to-back 10-minute calls keep one run going (docs/BENCHMARKS.md,
# "Next session"):
#   call 1: DIR=/tmp/cb-chain RUN_CMD="bash benchmarks/gpu/device_chain.sh" bash benchmarks/gpu/bench_gpu_bg.sh start; \
#           OUT=$OUT WAIT_S=530 DIR=/tmp/cb-chain bash benchmarks/gpu/bench_gpu_bg.sh collect
#   call 2..: OUT=$OUT WAIT_S=545 DIR=/tmp/cb-chain bash benchmarks/gpu/bench_gpu_bg.sh collect   (at once)
#   last call: collect with a shorter WAIT_S, then `bench_gpu_bg.sh stop` (the cut run saves its cases)
# STEPS, in order (default "bench serial resume hftrain": `tox -e bench-gpu` on the twin-group order beside
# the suite one case at a time on the same host (~19 min of the session's 30; docs/BENCHMARKS.md, fifteenth
# session), then the breadth left for issue 24, the cut chunk first):
#   fvs     fork vs spawn, REPEAT processes each (fork_vs_spawn.sh; FVS_ARGS its `run` flags)
#   bench   the newcomer's `tox -e bench-gpu` from a copy of the tree (bench_gpu_bg.sh TOX=1), timed;
#           BENCH_DEFER, when set, is its COMPILEBENCH_DEFER_COMPILED_STATE (unset: the default, the
#           decode eager rows derived from the twins' first call, which decodeown's figures check:
#           `python benchmarks/eager_twins.py BENCH.json --reference DECODEOWN.json`)
#   serial  the `gpu` suite with --compile-overlap 1 (one case at a time; SERIAL_ARGS, SERIAL_S): the
#           other side of bench's default overlap of 2 (`compilebench compare SERIAL BENCH`)
#   decodeown  the `gpu` suite's decode eager cases in processes of their own (--no-eager-from-twin):
#           the reference the derived decode eager figures must match to the byte
#   defer   the same decode cases as run by default (the eager case derived from the inductor
#           twin's eager first call), without the rest of the suite
#   old     the cases OLD_ARGS names run by the old tree in OLD (default .old, e.g. `git archive
#           7edde66`), OLD_S at most: the old-way side of an old-vs-new compare with `bench`
#   warmab  the decode compiled cases run with --warmup-budget 0 (3 warm-up rounds) and 1 (the gpu suite's: 2),
#           alternating as WARMAB_ORDER says (default "0 1 0"; WARMAB_ARGS the cases): benchmarks/warmup_budget.py reads them
#   resume  `run --resume` of every journal under RESUME_DIRS (cut runs of earlier sessions)
#   timmfwd the timm suite's forward cases at full size (eager, inductor), from line TIMM_FROM (default 1)
#           to TIMM_TO of timm_forward_order.txt, TIMM_K (default 4) a run (ordered_chunks.sh); all 65 were
#           measured by the eleventh session (results/baselines/h200-2026-12-03c/)
#   timmtrain the timm suite's train steps, the same models in the same order and chunks (TIMM_FROM,
#           TIMM_TO, TIMM_K); none measured on the H200 yet
#   hftrain the hf train steps from line HF_FROM (default 34: after the fourteenth session's chunk) of hf_train_order.txt on, K a run
#           (ordered_chunks.sh), CASE_TIMEOUT_S (default 900) a case
# Dry run on CPU: BENCH_RUN_CMD="python3 -m harness run --suite smoke -w mlp-classic --out /tmp/x/bench/results" \
#   RUN_CMD="bash benchmarks/gpu/device_chain.sh" STEPS="bench resume hftrain" DEVICE=cpu EXTRA="--size tiny" HF_FROM=16 HF_TO=17 RESUME_DIRS= DIR=/tmp/x bash $0
set -uo pipefail
DIR="${DIR:?}"
SITE="${SITE:-/tmp/site}"
PY="${PYTHON:-python3}"
STEPS="${STEPS:-bench serial resume hftrain}"
# cut chunks of earlier sessions (each runs/ holds a journal), in turn: the fourteenth session's (hf train lines
# 31-33: BlenderbotForCausalLM done, BlenderbotForConditionalGeneration's inductor case and DebertaV2's two left)
RESUME_DIRS="${RESUME_DIRS-results/baselines/h200-2026-12-03f/hf-train/chunk-1}"
mkdir -p "$DIR"
[ -d "$SITE" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  .whl/diffusers-*.whl .whl/ruptures-*.whl .whl/importlib_metadata-*.whl .whl/zipp-*.whl .whl/lazy_importer-*.whl \
  > "$DIR/pip.log" 2>&1

step_fvs() {
  OUT="$DIR/fvs" SITE="$SITE" REPEAT="${REPEAT:-4}" \
    ARGS="${FVS_ARGS:---suite gpu --device cuda -w mlp-deep --scenario forward -c eager,inductor}" \
    bash benchmarks/gpu/fork_vs_spawn.sh > "$DIR/fvs.log" 2>&1
}

step_bench() {  # its own setsid run inside this one; collect waits for it (the suite: 12-13 min)
  # RUN_CMD is this chain's own command, inherited from bench_gpu_bg.sh: cleared, or it would
  # start the chain again (BENCH_RUN_CMD replaces the suite, for a dry run)
  env ${BENCH_DEFER:+COMPILEBENCH_DEFER_COMPILED_STATE=$BENCH_DEFER} RUN_CMD="${BENCH_RUN_CMD:-}" DIR="$DIR/bench" TOX=1 \
    bash benchmarks/gpu/bench_gpu_bg.sh start > "$DIR/bench.log" 2>&1
  DIR="$DIR/bench" WAIT_S="${BENCH_WAIT_S:-1500}" bash benchmarks/gpu/bench_gpu_bg.sh collect >> "$DIR/bench.log" 2>&1
}

step_serial() {  # issue 25: the `gpu` suite one case at a time (--compile-overlap 1), the other side of bench's overlap
  PYTHONPATH="$SITE:$PWD" HF_HUB_OFFLINE=1 timeout -s TERM "${SERIAL_S:-900}" "$PY" -m harness run \
    ${SERIAL_ARGS:---suite gpu --device cuda} --compile-overlap 1 --out "$DIR/serial" --no-ingest --label serial \
    > "$DIR/serial.log" 2>&1
}

step_decodeown() {
  PYTHONPATH="$SITE:$PWD" HF_HUB_OFFLINE=1 "$PY" -m harness run \
    ${DECODEOWN_ARGS:---suite gpu --device cuda -w llama-3.1-8b,gemma-2b --scenario decode -c eager} \
    --no-eager-from-twin --out "$DIR/decodeown" --no-ingest --label decode-eager-own > "$DIR/decodeown.log" 2>&1
}

step_defer() {
  PYTHONPATH="$SITE:$PWD" HF_HUB_OFFLINE=1 "$PY" -m harness run \
    ${DEFER_ARGS:---suite gpu --device cuda -w llama-3.1-8b,gemma-2b --scenario decode} \
    --out "$DIR/defer" --no-ingest --label decode-deferred > "$DIR/defer.log" 2>&1
}

step_old() {
  local old
  old="$(cd "${OLD:-.old}" && pwd)" || return 2
  (cd "$old" && PYTHONPATH="$SITE:$old" HF_HUB_OFFLINE=1 timeout -s TERM "${OLD_S:-900}" "$PY" -m harness run \
    ${OLD_ARGS:---suite gpu --device cuda -w llama-3.1-8b,gemma-2b,sdxl-unet} \
    --out "$DIR/old" --no-ingest --label old-way) > "$DIR/old.log" 2>&1
}

step_warmab() {  # issue 25: the decode cases with the third warm-up round (budget 0) and without (1.0, the gpu suite's), alternating
  local b rc i=0
  for b in ${WARMAB_ORDER:-0 1 0}; do
    i=$((i + 1))
    PYTHONPATH="$SITE:$PWD" HF_HUB_OFFLINE=1 "$PY" -m harness run \
      ${WARMAB_ARGS:---suite gpu --device cuda -w llama-3.1-8b,gemma-2b --scenario decode -c inductor,inductor-reduce-overhead} \
      --warmup-budget "$b" --out "$DIR/warmab/$i-budget$b" --no-ingest --label "warmab-$i-budget$b" > "$DIR/warmab-$i.log" 2>&1
    rc=$?
    echo "{\"warmab\": $i, \"budget\": $b, \"rc\": $rc}" >> "$DIR/warmab.jsonl"
  done
}

step_resume() {
  local src journal id n=0
  for src in $RESUME_DIRS; do
    n=$((n + 1)); cp -r "$src" "$DIR/resume-$n"
    for journal in "$DIR/resume-$n"/runs/*.journal.jsonl; do
      [ -e "$journal" ] || continue  # none left: a finished resume removes its journal
      id=$(basename "$journal" .journal.jsonl)
      PYTHONPATH="$SITE:$PWD" HF_HUB_OFFLINE=1 "$PY" -m harness run --resume "$id" --out "$DIR/resume-$n" \
        > "$DIR/resume-$n-$id.log" 2>&1
      echo "{\"resume\": \"$src/$id\", \"rc\": $?}" >> "$DIR/resume.jsonl"
    done
  done
}

timm_models() {
  grep -v '^#' benchmarks/gpu/timm_forward_order.txt | sed -n "${TIMM_FROM:-1},${TIMM_TO:-\$}p"
}

step_timmfwd() {  # timm at full size on the H200: all 65 by the eleventh session (17-63 s a model forked, rising down the list)
  DIR="$DIR/timm-forward" SITE="$SITE" SUITE=timm SCENARIO=forward K="${TIMM_K:-4}" CASE_TIMEOUT_S="${CASE_TIMEOUT_S:-300}" \
    MODELS="$(timm_models)" bash benchmarks/gpu/ordered_chunks.sh > "$DIR/timm-forward.log" 2>&1
}

step_timmtrain() {  # a backward graph to compile too: hf's forked train steps took about 2.1x their forward walls
  DIR="$DIR/timm-train" SITE="$SITE" SUITE=timm SCENARIO=train K="${TIMM_K:-4}" CASE_TIMEOUT_S="${CASE_TIMEOUT_S:-600}" \
    MODELS="$(timm_models)" bash benchmarks/gpu/ordered_chunks.sh > "$DIR/timm-train.log" 2>&1
}

step_hftrain() {  # the larger models' train steps take 1-10 min of worker wall (MobileBert's: 590 s): a 900 s case limit
  DIR="$DIR/hf-train" SITE="$SITE" SUITE=hf SCENARIO=train K="${K:-3}" CASE_TIMEOUT_S="${CASE_TIMEOUT_S:-900}" \
    MODELS="$(grep -v '^#' benchmarks/gpu/hf_train_order.txt | sed -n "${HF_FROM:-34},${HF_TO:-\$}p")" \
    bash benchmarks/gpu/ordered_chunks.sh > "$DIR/hf-train.log" 2>&1
}

for step in $STEPS; do
  s=$(date +%s)
  if declare -F "step_$step" > /dev/null; then "step_$step"; rc=$?; else echo "unknown step $step" >&2; rc=2; fi
  echo "{\"step\": \"$step\", \"rc\": $rc, \"wall_s\": $(( $(date +%s) - s ))}" | tee -a "$DIR/steps.jsonl"
done
