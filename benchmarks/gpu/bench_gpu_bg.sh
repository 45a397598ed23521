#!/usr/bin/env bash
# The whole `gpu` suite (what `tox -e bench-gpu` runs) in the background, so one 10-minute
# device call can start it and a second call (same warm machine) can collect it (issue 25:
# target <= 600 s on one H200).
#
#   call 1:  bash benchmarks/gpu/bench_gpu_bg.sh start            # returns at once
#   call 2:  bash benchmarks/gpu/bench_gpu_bg.sh collect          # waits up to WAIT_S, copies to $OUT
#   any call: bash benchmarks/gpu/bench_gpu_bg.sh stop             # SIGTERM to the run's process group
#
# `stop` signals the session `start` made (its id is in $DIR/pgid), so finished cases are saved and
# nothing else is hit: `pkill -f <pattern>` from a device call matches that call's own shell, whose
# command line holds the pattern too (2026-12-01, a lost call).
# The run lives in $DIR (default /tmp/cb-bench-gpu, outside the per-call $OUT, which each call
# gets empty); `collect` prints the log tail, the wall time and the phase table
# (benchmarks/gpu/phase_table.py) and brings back $OUT/bench-gpu.tgz (the run's files without
# the clone and venvs), the run file and the phase table.
# EXTRA passes flags to `run` (EXTRA=--no-preload: the old spawn path, for the before/after).
# RUN_CMD replaces the whole command (any shell line writing run files under $DIR/results),
# e.g. the `hf` suite's forward cases, small models first:
#   DIR=/tmp/cb-hf RUN_CMD='python3 -m harness run --suite hf -w ... --out /tmp/cb-hf/results' \
#     bash benchmarks/gpu/bench_gpu_bg.sh start
# `collect` refreshes $OUT every REFRESH_S (60) while it waits, so a call cut short by the
# device budget still brings back what had finished.
# TOX=1: the newcomer's path instead, `python3 -m tox -e bench-gpu` in a copy of the tree
# without its .git, .tox, results and reports (a clean clone's files), tox installed into
# its own venv and pip pointed at the carried wheels (WHEELS, default ./.whl: tox and its
# needs, setuptools for the build, diffusers, ruptures); one `tox -e bench-gpu` invocation (the
# log's "tox start/end" stamps; until 2026-12-02 a `--notest` env build first, whose second
# invocation reinstalled the package, ~10 s the newcomer never pays); wall.json then counts the
# env build too. If tox wrote no run file, it says so in the log and runs the suite directly.
set -uo pipefail
DIR="${DIR:-/tmp/cb-bench-gpu}"
PY="${PYTHON:-python3}"
EXTRA="${EXTRA:-}"
WAIT_S="${WAIT_S:-560}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
# $OUT brings back 8 files at most: the run's files as one archive (the clone and the venvs
# stay behind), the run file(s) and the phase table also as plain files
pack_out() {
  [ -n "${OUT:-}" ] || return 0
  tar -czf "$OUT/bench-gpu.tgz.part" -C "$DIR" --exclude=clone --exclude=toxvenv . 2>/dev/null \
    && mv "$OUT/bench-gpu.tgz.part" "$OUT/bench-gpu.tgz"
  cp "$DIR"/results/runs/*.json "$OUT/" 2>/dev/null; cp "$DIR/phase-table.txt" "$OUT/" 2>/dev/null
  return 0
}
case "${1:-}" in
  start)
    rm -rf "$DIR"; mkdir -p "$DIR/results"
    RUN_ARGS="--out $DIR/results --no-ingest --label bench-gpu $EXTRA"
    if [ -n "${RUN_CMD:-}" ]; then
      CMD="$RUN_CMD"
    elif [ "${TOX:-0}" = 1 ]; then
      WHEELS="$(cd "${WHEELS:-.whl}" && pwd)"
      mkdir -p "$DIR/clone"
      tar --exclude=./.git --exclude=./.tox --exclude=./results/runs --exclude=./reports --exclude=./.whl -cf - . \
        | tar -xf - -C "$DIR/clone"
      TOXENV="env -u PYTHONPATH PIP_NO_INDEX=1 PIP_FIND_LINKS=$WHEELS $DIR/toxvenv/bin/tox -e bench-gpu"
      # one `tox -e bench-gpu`, as the newcomer runs it (env build, package install, the suite,
      # the report); the stamps split its wall. Run directly only when it wrote no run file.
      CMD="cd $DIR/clone && $PY -m venv $DIR/toxvenv && $DIR/toxvenv/bin/pip install -q --no-index --find-links $WHEELS tox; \
        echo \"tox start \$(date +%s.%N)\"; $TOXENV -- $RUN_ARGS; rc=\$?; echo \"tox end \$(date +%s.%N) rc \$rc\"; \
        ls $DIR/results/runs/*.json > /dev/null 2>&1 || { echo 'tox wrote no run file: running the suite directly'; \
        cd $PWD && $PY -m harness run --suite gpu --device cuda $RUN_ARGS; }"
    else
      CMD="$PY -m harness run --suite gpu --device cuda $RUN_ARGS"
    fi
    echo "$CMD" > "$DIR/command.txt"
    # setsid + nohup: its own session, so the end of the call does not take the run with it
    setsid nohup bash -c "s=\$(date +%s); ( $CMD ) > \"$DIR/gpu-run.log\" 2>&1; rc=\$?; \
      echo \"{\\\"rc\\\": \$rc, \\\"wall_s\\\": \$((\$(date +%s) - s))}\" > \"$DIR/wall.json\"" \
      < /dev/null > /dev/null 2>&1 &
    echo $! > "$DIR/pgid"  # setsid execs in the child (not a group leader): its pid is the new session's id
    sleep 5; echo "started in $DIR:"; tail -n 3 "$DIR/gpu-run.log" 2>/dev/null
    ;;
  collect)
    waited=0
    while [ ! -f "$DIR/wall.json" ] && [ "$waited" -lt "$WAIT_S" ]; do
      sleep 5; waited=$((waited + 5))
      [ $((waited % ${REFRESH_S:-60})) -eq 0 ] && pack_out
    done
    tail -n 30 "$DIR/gpu-run.log"
    if [ -f "$DIR/wall.json" ]; then
      cat "$DIR/wall.json"
      "$PY" benchmarks/gpu/phase_table.py "$DIR"/results/runs/*.json | tee "$DIR/phase-table.txt"
    else
      echo "still running after ${WAIT_S}s of waiting; collect again"
    fi
    pack_out
    [ -f "$DIR/wall.json" ]
    ;;
  stop)
    [ -f "$DIR/pgid" ] || { echo "no $DIR/pgid: nothing started here" >&2; exit 1; }
    pg=$(cat "$DIR/pgid")
    kill -TERM -- "-$pg" 2>/dev/null && echo "sent SIGTERM to process group $pg"
    for _ in $(seq 1 60); do kill -0 -- "-$pg" 2>/dev/null || break; sleep 1; done  # a run saves its file first
    kill -0 -- "-$pg" 2>/dev/null && echo "process group $pg still alive after 60 s"
    tail -n 5 "$DIR/gpu-run.log"; pack_out
    ;;
  *) echo "usage: $0 start|collect|stop" >&2; exit 2 ;;
esac
