#!/usr/bin/env bash
# Old way vs new way on one machine in one call (issue 25's proof that the faster instrument
# reports the same figures): the same cases run by the code of an old commit and by this tree,
# back to back, then `compilebench compare old new` (probe-normalised verdicts) and the phase
# tables of both runs.
#
#   git archive 7edde66 | (mkdir -p .old && tar -x -C .old)      # here; .old is git-ignored
#   run(carry=[".old", ".whl"]): OUT=$OUT bash benchmarks/gpu/oldnew.sh
#
# OLD (default .old): the old tree. ARGS: the cases (default: the `gpu` suite's mlp-deep, all
# six cases, and gemma-2b decode, three: forward, train and decode, derived and own-process
# eager, CUDA graphs; about 260 s old + 200 s new on an H200). OLD_S / NEW_S: each side's
# time limit (SIGTERM: the run is saved as interrupted). SITE: extra wheels' folder
# (diffusers) put on PYTHONPATH for both sides. REPEAT=N runs the pair N times, interleaved
# (old, new, old, new, ...), into one folder a side, and compare reads the folders: N
# processes a side, so the process-to-process host speed is inside compare's noise instead
# of inside each comparison (one process a side cannot tell a slower host from slower code).
# A longer REPEAT goes through bench_gpu_bg.sh (RUN_CMD) to span two calls.
set -uo pipefail
: "${OUT:?set OUT to the folder for logs and run files}"
OLD="$(cd "${OLD:-.old}" && pwd)"
ARGS="${ARGS:---suite gpu --device cuda -w mlp-deep,gemma-2b --scenario forward,train,decode}"
OLD_S="${OLD_S:-300}"
NEW_S="${NEW_S:-260}"
PY="${PYTHON:-python3}"
NEW="$PWD"
SITE_PATH="${SITE:+$SITE:}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
(nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv; date -u; uptime) > "$OUT/machine.txt" 2>&1
REPEAT="${REPEAT:-1}"
side() {  # side NAME TREE LIMIT ROUND
  local name=$1 tree=$2 limit=$3 round=$4 s
  s=$(date +%s)
  # shellcheck disable=SC2086
  (cd "$tree" && PYTHONPATH="$SITE_PATH$tree" timeout -s TERM "$limit" "$PY" -m harness run $ARGS \
      --out "$OUT/$name" --no-ingest --label "$name-$round") > "$OUT/$name-$round.log" 2>&1
  echo "{\"side\": \"$name\", \"round\": $round, \"rc\": $?, \"wall_s\": $(( $(date +%s) - s ))}" | tee -a "$OUT/walls.jsonl"
  tail -n 4 "$OUT/$name-$round.log"
}
for round in $(seq 1 "$REPEAT"); do
  side old "$OLD" "$OLD_S" "$round"
  side new "$NEW" "$NEW_S" "$round"
done
export PYTHONPATH="$SITE_PATH$NEW"
{
  for name in old new; do echo "== $name"; "$PY" benchmarks/gpu/phase_table.py "$OUT/$name"/runs/*.json; done
  echo "== compare old new"
  "$PY" -m harness compare "$OUT"/old/runs "$OUT"/new/runs --all --format plain \
      --json-file "$OUT/compare.json"
  echo "compare exit $?"
} 2>&1 | tee "$OUT/summary.txt"
exit 0
