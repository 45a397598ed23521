#!/usr/bin/env bash
# The nightly workflow's shell steps (.github/workflows/nightly.yml calls these; nothing else
# in the workflow decides anything). Rehearse them on CPU with .ci/nightly_local.py.
#
#   .ci/nightly.sh run SUITE [RUN ARGS...]   run one suite as tonight's `nightly-SUITE` run, ingested
#   .ci/nightly.sh shard SUITE               one GPU matrix job: `--shard auto`, not ingested
#   .ci/nightly.sh merge SUITE SHARD_DIR     the shards' run files -> one run, ingested
#   .ci/nightly.sh compare SUITE             tonight vs the previous night, both from the history store
#
# Exit codes follow compilebench's (README "Exit codes"): a run whose cases failed (1) is data,
# recorded in its run file; the compare step judges it. The compare step fails the job on a
# regression (1) with the markdown in $GITHUB_STEP_SUMMARY, and on exit 3 (compilebench could
# not compare) with a message that says it is *not* a regression.
#
# Environment: OUT (results folder, default results), COMPILEBENCH (the command, default
# `compilebench`), PYTHON (the python that has compilebench, default python), NIGHTLY_SELECT
# (case selection instead of `--suite SUITE`; the rehearsal uses tiny cases), NIGHTLY_GPU_RUN
# (the whole command a shard runs, to which `--shard auto ...` is appended; default the
# bench-gpu tox env: the gpu suite on the runner's own CUDA torch), SHARD_COSTS (history file balancing the shards, default none: round-robin),
# COMPARE_ARGS (extra gate options, e.g. --allow-mismatch on hosted runners whose CPU varies).
set -uo pipefail

OUT=${OUT:-results}
COMPILEBENCH=${COMPILEBENCH:-compilebench}
PYTHON=${PYTHON:-python}
SUMMARY=${GITHUB_STEP_SUMMARY:-/dev/null}
STATE="$OUT/nightly"  # tonight's run id per suite, so compare never mistakes last night for tonight

error() { echo "::error::$*"; echo "**nightly: $***" >>"$SUMMARY"; }

run_ids() {  # the run ids labelled $1, oldest first, from the run files and the history store; fails on a damaged store
    "$PYTHON" - "$OUT" "$1" <<'EOF'
import sys
from harness.run.lookup import list_runs
print("\n".join(e.run_id for e in list_runs(sys.argv[1], need_meta=True) if e.label == sys.argv[2]))
EOF
}

# compilebench's exit code -> this step's, with the message CI shows
judge_run() {
    local rc=$1 what=$2
    case $rc in
        0) echo "$what: every case ok" ;;
        1) echo "::warning::$what: some cases failed; they are recorded in the run file and judged by the compare step" ;;
        130) error "$what was interrupted (exit 130)"; return 130 ;;
        3) error "$what: compilebench could not do its job (exit 3: I/O error, corrupt store, nothing measured); see the log above"; return 3 ;;
        *) error "$what: bad usage or input (exit $rc); see the log above"; return "$rc" ;;
    esac
}

cmd_run() {
    local suite=$1; shift
    local label="nightly-$suite" before after rc
    before=$(run_ids "$label") || { error "run $suite: cannot read $OUT (damaged history store?); see the log above"; return 3; }
    before=$(tail -n1 <<<"$before")
    # shellcheck disable=SC2086  # NIGHTLY_SELECT is a list of options
    $COMPILEBENCH run ${NIGHTLY_SELECT:---suite $suite} --label "$label" --out "$OUT" "$@"
    rc=$?
    judge_run "$rc" "run $suite" || return $?
    after=$(run_ids "$label" | tail -n1)
    if [ -z "$after" ] || [ "$after" = "$before" ]; then
        error "run $suite wrote no new run (exit $rc)"; return 3
    fi
    mkdir -p "$STATE" && echo "$after" >"$STATE/$suite.tonight"
    echo "tonight's $suite run: $after"
}

cmd_shard() {
    local suite=$1
    local rc
    # shellcheck disable=SC2086  # a command and its options
    ${NIGHTLY_GPU_RUN:-python3 -m tox -e bench-gpu --} --shard auto \
        --shard-costs "${SHARD_COSTS:-none}" --label "nightly-$suite" --out "$OUT" --no-ingest
    rc=$?
    judge_run "$rc" "shard ${COMPILEBENCH_SHARD_INDEX:-?}/${COMPILEBENCH_SHARD_COUNT:-?} of $suite"
}

cmd_merge() {
    local suite=$1 dir=$2
    local label="nightly-$suite" rc
    shopt -s nullglob
    local files=("$dir"/*.json)
    if [ ${#files[@]} -eq 0 ]; then
        error "merge $suite: no shard run files in $dir (did every shard job fail?)"; return 3
    fi
    mkdir -p "$OUT" "$STATE"
    $COMPILEBENCH merge "${files[@]}" -o "$OUT/merged-$suite.json" --label "$label" --ingest "$OUT/history.sqlite"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        error "merge $suite failed (exit $rc): a shard is missing or the shards disagree; see the log above"
        return "$rc"
    fi
    "$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["run_id"])' "$OUT/merged-$suite.json" \
        >"$STATE/$suite.tonight"
    echo "tonight's merged $suite run: $(cat "$STATE/$suite.tonight")"
}

cmd_compare() {
    local suite=$1
    local label="nightly-$suite" tonight prev rc md
    if [ ! -s "$STATE/$suite.tonight" ]; then
        error "compare $suite: tonight's run is missing (its run step failed); nothing compared (exit 3, not a regression)"
        return 3
    fi
    tonight=$(cat "$STATE/$suite.tonight")
    prev=$(run_ids "$label") || {
        error "compare $suite: cannot read the history store in $OUT (exit 3, not a regression); see the log above"
        return 3
    }
    prev=$(grep -vxF "$tonight" <<<"$prev" | tail -n1)
    if [ -z "$prev" ]; then
        echo "compare $suite: no previous night labelled $label in $OUT/history.sqlite yet; nothing to compare" \
            | tee -a "$SUMMARY"
        return 0
    fi
    echo "compare $suite: previous night $prev -> tonight $tonight"
    md=$(mktemp)
    # shellcheck disable=SC2086  # COMPARE_ARGS is a list of options
    $COMPILEBENCH gate "$prev" "$tonight" --out "$OUT" --markdown "$md" --json "$STATE/$suite.compare.json" \
        ${COMPARE_ARGS:-}
    rc=$?
    cat "$md" >>"$SUMMARY" 2>/dev/null
    rm -f "$md"
    case $rc in
        0) echo "compare $suite: no regression against $prev" ;;
        1) error "compare $suite: REGRESSION against the previous night ($prev -> $tonight); the table is in the job summary" ;;
        3) error "compare $suite: compilebench could not compare (exit 3: nothing in common, machine contended, corrupt store...); this is NOT a regression, see the log above" ;;
        *) error "compare $suite: bad usage or input (exit $rc), e.g. different hardware (COMPARE_ARGS=--allow-mismatch); see the log above" ;;
    esac
    return "$rc"
}

main() {
    local action=${1:-}
    [ $# -gt 0 ] && shift
    case $action in
        run) [ $# -ge 1 ] || { echo "usage: $0 run SUITE [RUN ARGS...]" >&2; return 2; }; cmd_run "$@" ;;
        shard) [ $# -eq 1 ] || { echo "usage: $0 shard SUITE" >&2; return 2; }; cmd_shard "$@" ;;
        merge) [ $# -eq 2 ] || { echo "usage: $0 merge SUITE SHARD_DIR" >&2; return 2; }; cmd_merge "$@" ;;
        compare) [ $# -eq 1 ] || { echo "usage: $0 compare SUITE" >&2; return 2; }; cmd_compare "$@" ;;
        *) echo "usage: $0 run|shard|merge|compare SUITE ..." >&2; return 2 ;;
    esac
}

main "$@"
