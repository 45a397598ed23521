#!/usr/bin/env bash
# CPU cases on a GPU box (issue 25): a CPU case run by `compilebench run` on a machine whose
# torch has CUDA must start (forked from a server that never initialised CUDA, or spawned)
# and end `ok`, and its figures must not depend on the start path. One tiny mlp-classic
# forward (eager + inductor) forked (default) and with --no-preload, then compare and the
# per-case start/status/peak lines. About a minute.
#
#   run(carry=[".whl"]): OUT=$OUT bash benchmarks/gpu/cpu_case_check.sh
# Brings back $OUT/cpu-check.tgz (both run folders and logs) and prints the summary.
set -uo pipefail
: "${OUT:?set OUT}"
D="${D:-/tmp/cb-cpu-check}"
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
rm -rf "$D"; mkdir -p "$D"
ARGS="-w mlp-classic --scenario forward -c eager,inductor --device cpu --size tiny --no-ingest"
for side in forked spawned; do
  extra=""; [ "$side" = spawned ] && extra="--no-preload"
  s=$(date +%s)
  # shellcheck disable=SC2086
  "$PY" -m harness run $ARGS $extra --out "$D/$side" --label "cpu-$side" > "$D/$side.log" 2>&1
  echo "$side: exit $? in $(( $(date +%s) - s )) s"; tail -n 4 "$D/$side.log"
done
"$PY" - "$D" <<'PY' | tee "$D/summary.txt"
import glob, json, sys
for side in ("forked", "spawned"):
    for f in glob.glob(f"{sys.argv[1]}/{side}/runs/*.json"):
        for r in json.load(open(f))["records"]:
            w = r.get("worker") or {}
            peaks = {k: round((r.get(k) or {}).get("peak_memory_bytes", 0) / 2**20, 1) for k in ("eager", "compiled")}
            print(side, r["case_id"], r["status"], w.get("start"), w.get("start_note"), "peak MiB", peaks,
                  (r.get("error") or "")[:200])
PY
"$PY" -m harness compare "$D"/spawned/runs "$D"/forked/runs --all --format plain 2>&1 | tail -n 15
tar -czf "$OUT/cpu-check.tgz" -C "$D" .
