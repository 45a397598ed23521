#!/usr/bin/env bash
# The `gpu` suite on one GPU (cold compiles included), with its HTML report and wall time.
#
#   OUT=/path SHARD=1/4 bash benchmarks/gpu/gpu_suite.sh     # one call per shard: 1/4 .. 4/4
#
# Runs from the repository root on a box with CUDA torch (PYTHONPATH=$PWD, compilebench not
# installed). The whole suite (21 cases) is estimated at ~25-30 min on one H200, more than
# one 8-minute call, so it is split with --shard (a fixed round-robin partition:
# --shard-costs none, so every call computes the same split). BUDGET_S stops the run with
# SIGTERM before the call limit: finished cases are saved (the run is marked interrupted).
# Merge the shards afterwards on any machine:
#   python3 -m harness merge OUT1/results/runs/*.json OUT2/... -o gpu-merged.json
# Dry run on CPU:  OUT=/tmp/o SUITE=smoke DEVICE=cpu EXTRA="-w mlp-classic" bash benchmarks/gpu/gpu_suite.sh
set -uo pipefail
: "${OUT:?set OUT to the folder for logs, run files and the report}"
SHARD="${SHARD:-1/1}"
SUITE="${SUITE:-gpu}"
DEVICE="${DEVICE:-cuda}"
BUDGET_S="${BUDGET_S:-450}"
EXTRA="${EXTRA:-}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
PY="${PYTHON:-python3}"
tag="${SUITE}-$(echo "$SHARD" | tr / o)"
mkdir -p "$OUT/results"
(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true) > "$OUT/gpu-info.txt" 2>&1
"$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), 'transformers', transformers.__version__)" | tee "$OUT/versions.txt"
"$PY" - <<'PY' | tee "$OUT/preflight.txt"
from harness.run.runner import load_registries
load_registries([])
from suites.gpu import missing_workloads, required_workloads
print("gpu suite workloads:", required_workloads(), "missing:", missing_workloads() or "none")
PY
start=$(date +%s.%N)
# shellcheck disable=SC2086
timeout -s TERM "$BUDGET_S" "$PY" -m harness run --suite "$SUITE" --device "$DEVICE" --shard "$SHARD" --shard-costs none \
    --out "$OUT/results" --label "$tag" $EXTRA > "$OUT/run-$tag.log" 2>&1
rc=$?
end=$(date +%s.%N)
wall=$("$PY" -c "print(round($end - $start, 1))")
echo "{\"suite\": \"$SUITE\", \"shard\": \"$SHARD\", \"wall_s\": $wall, \"rc\": $rc, \"budget_s\": $BUDGET_S}" | tee "$OUT/wall-$tag.json"
tail -n 40 "$OUT/run-$tag.log"
run_file=$(ls -t "$OUT"/results/runs/*.json 2>/dev/null | head -n 1)
if [ -z "$run_file" ]; then echo "no run file written (rc=$rc)"; exit 1; fi
"$PY" -m harness report "$run_file" -o "$OUT/report-$tag.html"
"$PY" benchmarks/gpu/summarize.py "$run_file" | tee "$OUT/summary-$tag.md"
exit 0
