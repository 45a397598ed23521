# Sourced (never run) by the budgeted GPU scripts: diffusion.sh, sdxl_ladder.sh, llm_fast.sh.
# Each sets its own defaults (BUDGET_S first), then `source "$(dirname "$0")/common.sh"`.
# What it sets up: strict mode, $OUT (required) created, offline Hugging Face, the repository
# on PYTHONPATH, PY / DEVICE / SIZE defaults, START (the budget clock) and the helpers below.
set -uo pipefail
: "${OUT:?set OUT to an output folder}"
: "${BUDGET_S:?the sourcing script sets BUDGET_S before common.sh}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-full}
START=$(date +%s)
mkdir -p "$OUT"

# seconds of BUDGET_S left
remaining() { echo $(( BUDGET_S - ($(date +%s) - START) )); }

# fit_limit WHAT LIMIT MARGIN MIN: the step's timeout cut to what the budget has left after
# MARGIN (its start-up and write-out); prints nothing and logs NOT STARTED when under MIN
# seconds would be left, so a step that cannot finish is never begun.
fit_limit() {
  local what=$1 limit=$2 margin=$3 min=$4 left
  left=$(( $(remaining) - margin ))
  if [ "$left" -lt "$min" ]; then
    echo "NOT STARTED $what: ${left}s of the ${BUDGET_S}s budget left (needs at least ${min}s)" | tee -a "$OUT/run.log" >&2
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "$limit"
}

# versions NOTE MODULE...: date, torch/CUDA and each module's version, the GPU, nvidia-smi and
# NOTE into $OUT/versions.txt (and the log); exits 2 when one of the modules cannot be imported
versions() {
  local note=$1
  shift
  {
    date -u +"date: %Y-%m-%dT%H:%M:%SZ"
    "$PY" - "$@" <<'PYEOF' || { echo "cannot import torch $*: put their wheels on PYTHONPATH"; exit 2; }
import importlib, sys
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda,
      *(f"{m} {importlib.import_module(m).__version__}" for m in sys.argv[1:]))
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
PYEOF
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>/dev/null
    echo "$note"
  } | tee "$OUT/versions.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 2
}

# wall_line FILE: the script's wall time against its budget, appended to FILE
wall_line() { echo "script wall: $(( $(date +%s) - START ))s (budget ${BUDGET_S}s)" | tee -a "$1"; }
