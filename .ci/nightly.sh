#!/usr/bin/env bash
# The nightly workflow's shell steps (.github/workflows/nightly.yml calls these; nothing else
# in the workflow decides anything). Rehearse them on CPU with .ci/nightly_local.py.
#
#   .ci/nightly.sh run SUITE [RUN ARGS...]   run one suite as tonight's `nightly-SUITE` run, ingested
#   .ci/nightly.sh shard SUITE               one GPU matrix job: `--shard auto`, not ingested
#   .ci/nightly.sh merge SUITE SHARD_DIR     the shards' run files -> one run, ingested
#   .ci/nightly.sh compare SUITE             tonight vs the last judgeable night, both from the history store
#   .ci/nightly.sh expected SUITE            tonight's run against the committed expected counts
#   .ci/nightly.sh pr-expected SUITE [ARGS]  (PR gate) run SUITE, not ingested, and check that run's expected counts
#
# Exit codes follow compilebench's (README "Exit codes"). A run step fails (1) when tonight has
# failed cases that .ci/known-failures/SUITE.txt (or $KNOWN_FAILURES) does not list, the first
# night too: HUD counts a model that stopped running as a failure. The compare step judges
# tonight against the newest earlier night that can be judged against (some case ok, none
# contended, complete: .ci/nightly_check.py base), names it and every newer night it passed
# over, and fails the job on a regression (1) with the markdown in $GITHUB_STEP_SUMMARY, and on
# exit 3 (compilebench could not compare) with a message that says it is *not* a regression.
# A shard step fails (3) when its run wrote no run file of this shard (e.g. the tox env did not
# install): that is not "some cases failed".
#
# Environment: OUT (results folder, default results), COMPILEBENCH (the command, default
# `compilebench`), PYTHON (the python that has compilebench, default python), NIGHTLY_SELECT
# (case selection instead of `--suite SUITE`; the rehearsal uses tiny cases), KNOWN_FAILURES (a
# known-failures file instead of .ci/known-failures/SUITE.txt), NIGHTLY_GPU_RUN
# (the whole command a shard runs, to which `--shard auto ...` is appended; default the
# bench-gpu tox env: the gpu suite on the runner's own CUDA torch), SHARD_COSTS (history file balancing the shards, default none: round-robin),
# COMPARE_ARGS (extra gate options, e.g. --allow-mismatch on hosted runners whose CPU varies).
set -uo pipefail

OUT=${OUT:-results}
COMPILEBENCH=${COMPILEBENCH:-compilebench}
PYTHON=${PYTHON:-python}
SUMMARY=${GITHUB_STEP_SUMMARY:-/dev/null}
STATE="$OUT/nightly"  # tonight's run id per suite, so compare never mistakes last night for tonight
CHECK="$(dirname "$0")/nightly_check.py"

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
        1) echo "$what: some cases failed; they are recorded in the run file, checked against the known failures next" ;;
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
    check_failures "$after" "$suite"
}

check_failures() {  # $1 run, $2 suite: 1 on failed cases not listed as known failures
    local rc
    "$PYTHON" "$CHECK" failures "$OUT" "$1" "$2"
    rc=$?
    case $rc in
        0|1) return "$rc" ;;
        2) error "$2: the known-failures file is wrong (exit 2); see the log above"; return 2 ;;
        *) error "$2: cannot read tonight's run $1 to check its failures (exit 3); see the log above"; return 3 ;;
    esac
}

run_files() { find "$OUT/runs" -maxdepth 1 -name '*.json' 2>/dev/null | sort; }

new_run_files() {  # the run files in $OUT/runs that are not in the listing $1
    comm -13 <(printf '%s\n' "$1" | sed '/^$/d') <(run_files)
}

cmd_shard() {
    local suite=$1
    local what="shard ${COMPILEBENCH_SHARD_INDEX:-?}/${COMPILEBENCH_SHARD_COUNT:-?} of $suite" before rc new
    before=$(run_files)
    # shellcheck disable=SC2086  # a command and its options
    ${NIGHTLY_GPU_RUN:-python3 -m tox -e bench-gpu --} --shard auto \
        --shard-costs "${SHARD_COSTS:-none}" --label "nightly-$suite" --out "$OUT" --no-ingest
    rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 1 ]; then  # 1 also comes from tox when its env did not install
        new=$(new_run_files "$before")
        if [ -z "$new" ]; then
            error "$what wrote no run file in $OUT/runs (exit $rc): nothing was measured (the bench-gpu tox env did not install, or the run stopped before writing); see the log above"
            return 3
        fi
        if [ "$(wc -l <<<"$new")" -ne 1 ]; then
            error "$what wrote $(wc -l <<<"$new") run files, expected one: $(tr '\n' ' ' <<<"$new")"; return 3
        fi
        if ! "$PYTHON" "$CHECK" shard-file "$new" "nightly-$suite" "${COMPILEBENCH_SHARD_INDEX:-}" \
                "${COMPILEBENCH_SHARD_COUNT:-}"; then
            error "$what: $new is not this shard's run file (see the line above)"; return 3
        fi
    fi
    judge_run "$rc" "$what" || return $?
    [ "$rc" -eq 0 ] || echo "$what: its failed cases are checked against the known failures by the merge step"
}

cmd_merge() {
    local suite=$1 dir=$2
    local label="nightly-$suite" rc missing
    shopt -s nullglob
    local files=("$dir"/*.json)
    if [ ${#files[@]} -eq 0 ]; then
        error "merge $suite: no shard run files in $dir (did every shard job fail?)"; return 3
    fi
    mkdir -p "$OUT" "$STATE"
    # --allow-missing: the shards that ran are still judged; the merged run records what is
    # missing (and is then never a later night's base), and this step fails below
    $COMPILEBENCH merge "${files[@]}" -o "$OUT/merged-$suite.json" --label "$label" --ingest "$OUT/history.sqlite" \
        --allow-missing
    rc=$?
    if [ "$rc" -ne 0 ]; then
        error "merge $suite failed (exit $rc): the shards disagree or cannot be read; see the log above"
        return "$rc"
    fi
    "$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["run_id"])' "$OUT/merged-$suite.json" \
        >"$STATE/$suite.tonight"
    echo "tonight's merged $suite run: $(cat "$STATE/$suite.tonight")"
    missing=$("$PYTHON" "$CHECK" merge-missing "$OUT/merged-$suite.json") || return 3
    check_failures "$OUT/merged-$suite.json" "$suite"
    rc=$?
    if [ -n "$missing" ]; then
        error "merge $suite: $missing tonight (a shard job failed; the merged run has the others' cases and is compared next)"
        return 3
    fi
    return "$rc"
}

cmd_compare() {
    local suite=$1
    local label="nightly-$suite" tonight choice prev skipped rc md
    if [ ! -s "$STATE/$suite.tonight" ]; then
        error "compare $suite: tonight's run is missing (its run step failed); nothing compared (exit 3, not a regression)"
        return 3
    fi
    tonight=$(cat "$STATE/$suite.tonight")
    choice=$("$PYTHON" "$CHECK" base "$OUT" "$label" "$tonight") || {
        error "compare $suite: cannot read the history store in $OUT (exit 3, not a regression); see the log above"
        return 3
    }
    prev=$(awk -F'\t' '$1 == "base" {print $2}' <<<"$choice")
    skipped=$(awk -F'\t' '$1 == "skip" {print "- " $2 ": " $3}' <<<"$choice")
    if [ -n "$skipped" ]; then
        printf 'compare %s: newer nights passed over as a base (they could not be judged against):\n%s\n\n' \
            "$suite" "$skipped" | tee -a "$SUMMARY"
    fi
    if [ -z "$prev" ]; then
        if [ -n "$skipped" ]; then
            echo "::warning::compare $suite: no earlier $label night can be judged against (listed above); nothing to compare, tonight may be the next base"
            echo "compare $suite: no judgeable previous night; nothing to compare" >>"$SUMMARY"
        else
            echo "compare $suite: no previous night labelled $label in $OUT/history.sqlite yet; nothing to compare" \
                | tee -a "$SUMMARY"
        fi
        return 0
    fi
    echo "compare $suite: base $prev, the newest earlier $label night that can be judged against" | tee -a "$SUMMARY"
    echo "compare $suite: previous night $prev -> tonight $tonight"
    md=$(mktemp)
    # shellcheck disable=SC2086  # COMPARE_ARGS is a list of options
    $COMPILEBENCH gate "$prev" "$tonight" --out "$OUT" --markdown "$md" --json-file "$STATE/$suite.compare.json" \
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

expected_check() {  # $1 run (id or file), $2 what: the committed expected counts, the whole suite
    local rc
    $COMPILEBENCH expected check "$1" --out "$OUT" --complete
    rc=$?
    case $rc in
        0) echo "$2: expected counts match" ;;
        1) error "$2: status, accuracy, graph breaks or recompiles differ from the committed expected file (listed above)" ;;
        130) error "$2 was interrupted (exit 130)" ;;
        3) error "$2: compilebench could not check (exit 3); see the log above" ;;
        *) error "$2: bad usage or input (exit $rc), e.g. no expected file for this suite and torch; see the log above" ;;
    esac
    return "$rc"
}

cmd_expected() {
    local suite=$1
    if [ ! -s "$STATE/$suite.tonight" ]; then
        error "expected $suite: tonight's run is missing (its run step failed); nothing checked (exit 3)"; return 3
    fi
    expected_check "$(cat "$STATE/$suite.tonight")" "expected $suite"
}

# The PR gate's expected counts: run the suite (not ingested) and check *that* run, not
# whatever `latest` resolves to. A run with failed cases (1) goes on to the check, which pins
# each case's status; 2, 3 and 130 stop here.
cmd_pr_expected() {
    local suite=$1; shift
    local what="expected $suite (PR build)" before rc new
    before=$(run_files)
    # shellcheck disable=SC2086  # NIGHTLY_SELECT is a list of options
    $COMPILEBENCH run ${NIGHTLY_SELECT:---suite $suite} --no-ingest --label "pr-expected-$suite" --out "$OUT" "$@"
    rc=$?
    case $rc in
        0|1) ;;
        *) judge_run "$rc" "run $suite (PR build)"; return $? ;;
    esac
    new=$(new_run_files "$before")
    if [ -z "$new" ]; then
        error "$what: the run wrote no run file in $OUT/runs (exit $rc); nothing checked"; return 3
    fi
    if [ "$(wc -l <<<"$new")" -ne 1 ]; then
        error "$what: the run wrote $(wc -l <<<"$new") run files, expected one: $(tr '\n' ' ' <<<"$new")"; return 3
    fi
    echo "$what: checking the run this job wrote, $new"
    expected_check "$new" "$what"
}

main() {
    local action=${1:-}
    [ $# -gt 0 ] && shift
    case $action in
        run) [ $# -ge 1 ] || { echo "usage: $0 run SUITE [RUN ARGS...]" >&2; return 2; }; cmd_run "$@" ;;
        shard) [ $# -eq 1 ] || { echo "usage: $0 shard SUITE" >&2; return 2; }; cmd_shard "$@" ;;
        merge) [ $# -eq 2 ] || { echo "usage: $0 merge SUITE SHARD_DIR" >&2; return 2; }; cmd_merge "$@" ;;
        compare) [ $# -eq 1 ] || { echo "usage: $0 compare SUITE" >&2; return 2; }; cmd_compare "$@" ;;
        expected) [ $# -eq 1 ] || { echo "usage: $0 expected SUITE" >&2; return 2; }; cmd_expected "$@" ;;
        pr-expected) [ $# -ge 1 ] || { echo "usage: $0 pr-expected SUITE [RUN ARGS...]" >&2; return 2; }
            cmd_pr_expected "$@" ;;
        *) echo "usage: $0 run|shard|merge|compare|expected|pr-expected SUITE ..." >&2; return 2 ;;
    esac
}

main "$@"
