#!/usr/bin/env bash
# The whole `gpu` suite (what `tox -e bench-gpu` runs) in the background, so one 10-minute
# device call can start it and a second call (same warm machine) can collect it (issue 25:
# target <= 600 s on one H200).
#
#   call 1:  bash benchmarks/gpu/bench_gpu_bg.sh start            # returns at once
#   call 2:  bash benchmarks/gpu/bench_gpu_bg.sh collect          # waits up to WAIT_S, copies to $OUT
#
# The run lives in $DIR (default /tmp/cb-bench-gpu, outside the per-call $OUT, which each call
# gets empty); `collect` prints the log tail, the wall time and the phase table
# (benchmarks/gpu/phase_table.py) and copies everything to $OUT/bench-gpu/.
# EXTRA passes flags to `run` (EXTRA=--no-preload: the old spawn path, for the before/after).
set -uo pipefail
DIR="${DIR:-/tmp/cb-bench-gpu}"
PY="${PYTHON:-python3}"
EXTRA="${EXTRA:-}"
WAIT_S="${WAIT_S:-560}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
case "${1:-}" in
  start)
    rm -rf "$DIR"; mkdir -p "$DIR/results"
    # setsid + nohup: its own session, so the end of the call does not take the run with it
    # shellcheck disable=SC2086
    setsid nohup bash -c "s=\$(date +%s); \"$PY\" -m harness run --suite gpu --device cuda --out \"$DIR/results\" \
      --no-ingest --label bench-gpu $EXTRA > \"$DIR/gpu-run.log\" 2>&1; rc=\$?; \
      echo \"{\\\"rc\\\": \$rc, \\\"wall_s\\\": \$((\$(date +%s) - s))}\" > \"$DIR/wall.json\"" \
      < /dev/null > /dev/null 2>&1 &
    sleep 5; echo "started in $DIR:"; tail -n 3 "$DIR/gpu-run.log" 2>/dev/null
    ;;
  collect)
    waited=0
    while [ ! -f "$DIR/wall.json" ] && [ "$waited" -lt "$WAIT_S" ]; do sleep 5; waited=$((waited + 5)); done
    tail -n 30 "$DIR/gpu-run.log"
    if [ -f "$DIR/wall.json" ]; then
      cat "$DIR/wall.json"
      "$PY" benchmarks/gpu/phase_table.py "$DIR"/results/runs/*.json | tee "$DIR/phase-table.txt"
    else
      echo "still running after ${WAIT_S}s of waiting; collect again"
    fi
    if [ -n "${OUT:-}" ]; then mkdir -p "$OUT/bench-gpu" && cp -r "$DIR"/. "$OUT/bench-gpu/"; fi
    [ -f "$DIR/wall.json" ]
    ;;
  *) echo "usage: $0 start|collect" >&2; exit 2 ;;
esac
