#!/usr/bin/env bash
# Does the preloaded worker move a figure? The same cases run by this tree forked from its fork
# server (`pre`, COMPILEBENCH_PRELOAD_GPU=1: GPU cases fork, as by default since the sixth session), by this tree spawned (`nopre`, --no-preload) and by an old tree (`old`, spawned:
# its code predates the server), REPEAT processes of each, interleaved (pre, nopre, old, pre, ...)
# so the host's process-to-process speed lands in each side's spread; then a per-process table
# (benchmarks/gpu/per_process_table.py: compile wall/CPU, compile RSS before/peak, eager and
# compiled medians) and `compare` nopre -> pre and old -> pre. REPEAT >= 4 gives compare its
# process-level test (harness/analysis/significance.py); below that it pools the samples, and
# across processes of a host that moves 1.9x between them that reads host speed as code.
#
#   run(carry=[".old", ".whl"]): OUT=$OUT SITE=/tmp/site REPEAT=4 bash benchmarks/gpu/fork_vs_spawn.sh
#
# ARGS: the cases (default: the `gpu` suite's mlp-deep forward, eager + inductor: ~30 s a process
# on an H200). SIDES (default "pre nopre old"). OLD: the old tree (.old). LIMIT_S: one process's
# time limit. SITE: extra wheels' folder (diffusers) on PYTHONPATH. PYTHON: the interpreter.
set -uo pipefail
: "${OUT:?set OUT to the folder for logs and run files}"
ARGS="${ARGS:---suite gpu --device cuda -w mlp-deep --scenario forward -c eager,inductor}"
SIDES="${SIDES:-pre nopre old}"
REPEAT="${REPEAT:-4}"
LIMIT_S="${LIMIT_S:-180}"
PY="${PYTHON:-python3}"
NEW="$PWD"
OLD="$(cd "${OLD:-.old}" 2>/dev/null && pwd || echo "")"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
one() {  # one SIDE ROUND
  local side=$1 round=$2 tree=$NEW flag="" s
  case $side in nopre) flag=--no-preload ;; old) tree=$OLD ;; esac
  # set either way, so an older tree's default cannot pick the path
  local gpu_preload=0; [ "$side" = pre ] && gpu_preload=1
  if [ -z "$tree" ]; then echo "no old tree (OLD=$OLD): skipping side old" >&2; return; fi
  s=$(date +%s)
  # shellcheck disable=SC2086
  (cd "$tree" && COMPILEBENCH_PRELOAD_GPU=$gpu_preload PYTHONPATH="${SITE:+$SITE:}$tree" timeout -s TERM "$LIMIT_S" "$PY" -m harness run $ARGS $flag \
      --out "$OUT/$side" --no-ingest --label "$side-$round") > "$OUT/$side-$round.log" 2>&1
  echo "{\"side\": \"$side\", \"round\": $round, \"rc\": $?, \"wall_s\": $(( $(date +%s) - s ))}" | tee -a "$OUT/walls.jsonl"
}
for round in $(seq 1 "$REPEAT"); do for side in $SIDES; do one "$side" "$round"; done; done
export PYTHONPATH="${SITE:+$SITE:}$NEW"
{
  "$PY" benchmarks/gpu/per_process_table.py $(for side in $SIDES; do echo "$side=$OUT/$side"; done)
  for base in nopre old; do
    [ -d "$OUT/$base/runs" ] && [ -d "$OUT/pre/runs" ] || continue
    echo "== compare $base -> pre"
    "$PY" -m harness compare "$OUT/$base/runs" "$OUT/pre/runs" --all --format plain --json-file "$OUT/compare-$base-pre.json"
    echo "compare exit $?"
  done
} 2>&1 | tee "$OUT/summary.txt"
exit 0
