"""The nightly's questions about run files and the history store (.ci/nightly.sh asks them).

    python .ci/nightly_check.py base OUT LABEL TONIGHT     which night tonight is judged against
    python .ci/nightly_check.py failures OUT RUN SUITE     did tonight's cases fail (known failures aside)?
    python .ci/nightly_check.py shard-file FILE LABEL I N  is FILE the run file of shard I/N?
    python .ci/nightly_check.py merge-missing FILE         what a merge --allow-missing lacks (empty: nothing)

`base` prints `base<TAB>RUN_ID` for the newest run labelled LABEL before TONIGHT that can be
judged against (harness/run/lookup.py base_problem: some case ok, none timed on a contended
machine, not interrupted, no planned case missing), and `skip<TAB>RUN_ID<TAB>REASON` for each
newer night passed over, newest first. A night that could not be judged must not become the
next base: a contended base makes the next night "cannot judge" too, and a regression that
landed on it would be absorbed.

`failures` fails (exit 1) when tonight has failed cases (any status but ok and skipped: HUD
counts a model that stopped running as a failure) that the known-failures file does not
list; it prints GitHub annotations and appends the list to $GITHUB_STEP_SUMMARY. The file is
$KNOWN_FAILURES, default .ci/known-failures/SUITE.txt (absent: no known failures): one case
id or fnmatch pattern a line, `#` starts a comment. A listed case that passed tonight is a
notice to take it off the list.

Exit codes as compilebench's: 0 yes/ok, 1 failed cases, 2 bad input (a named known-failures
file that does not exist), 3 could not read the runs (a damaged store or run file).
"""

from __future__ import annotations

import fnmatch
import os
import sys
from pathlib import Path

from harness.model.errors import UserError
from harness.model.schema import load_run
from harness.run.lookup import FAILED_STATUSES, base_problem, list_runs, resolve_run

HERE = Path(__file__).resolve().parent


class KnownFailuresError(UserError):
    """A KNOWN_FAILURES path that names no file (exit 2)."""


def choose_base(out: str, label: str, tonight: str) -> list[str]:
    entries = [e for e in list_runs(out, need_health=True) if e.label == label]
    ids = [e.run_id for e in entries]
    before = entries[:ids.index(tonight)] if tonight in ids else entries
    lines = []
    for entry in reversed(before):
        problem = base_problem(entry.health)
        if problem is None:
            lines.append(f"base\t{entry.run_id}")
            break
        lines.append(f"skip\t{entry.run_id}\t{problem}")
    return lines


def known_failures(suite: str) -> tuple[Path, list[str]]:
    named = os.environ.get("KNOWN_FAILURES")
    path = Path(named) if named else HERE / "known-failures" / f"{suite}.txt"
    if not path.is_file():
        if named:
            raise KnownFailuresError(f"KNOWN_FAILURES={named}: no such file; point it at a list of case ids, or unset it")
        return path, []
    patterns = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return path, [p for p in patterns if p]


def check_failures(out: str, ref: str, suite: str) -> int:
    run = resolve_run(ref, out)
    path, known = known_failures(suite)
    failed = [r for r in run.records if r.status in FAILED_STATUSES]
    unexpected = [r for r in failed if not any(fnmatch.fnmatchcase(r.case_id, p) for p in known)]
    for rec in failed:
        if rec not in unexpected:
            print(f"::warning::{suite}: {rec.case_id} {rec.status} (a known failure, listed in {path})")
    for rec in run.records:
        if rec.status == "ok" and any(fnmatch.fnmatchcase(rec.case_id, p) for p in known):
            print(f"::notice::{suite}: {rec.case_id} is listed in {path} as a known failure but passed tonight; "
                  "take it off the list")
    if not unexpected:
        print(f"{suite}: {len(run.records) - len(failed)} case(s) ok or skipped, {len(failed)} known failure(s)")
        return 0
    lines = [f"- `{r.case_id}`: {r.status}: {(r.error or {}).get('message', '')}".rstrip(": ") for r in unexpected]
    print(f"::error::{suite}: {len(unexpected)} case(s) failed tonight (a case that stopped running is a "
          f"failure); fix them, or list their case ids in {path} as known failures")
    print("\n".join(lines))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as f:
            f.write(f"**nightly {suite}: {len(unexpected)} case(s) failed in {run.run_id}** "
                    f"(known failures: {path})\n\n" + "\n".join(lines) + "\n\n")
    return 1


def check_shard_file(file: str, label: str, index: str, count: str) -> int:
    run = load_run(file)
    shard = run.config.get("shard") or {}
    got = f"{shard.get('index')}/{shard.get('count')}"
    problems = []
    if not shard:
        problems.append("it is not a shard's run (no config.shard)")
    elif index and count and got != f"{index}/{count}":
        problems.append(f"it is shard {got}, not {index}/{count}")
    if run.label != label:
        problems.append(f"its label is {run.label!r}, not {label!r}")
    if problems:
        print(f"{file}: {'; '.join(problems)}")
        return 3
    print(f"{file}: shard {got}, {len(run.records)} record(s)")
    return 0


def merge_missing(file: str) -> str:
    shards = load_run(file).config.get("shards") or {}
    if not shards.get("allowed_missing"):
        return ""
    return (f"shard(s) {shards.get('missing_shards')} of {shards.get('count')}: "
            f"{len(shards.get('missing_cases') or [])} planned case(s) not run")


def main(argv: list[str]) -> int:
    usage = __doc__.split("\n\n")[1]
    try:
        if argv[:1] == ["base"] and len(argv) == 4:
            print("\n".join(choose_base(*argv[1:])))
            return 0
        if argv[:1] == ["failures"] and len(argv) == 4:
            return check_failures(*argv[1:])
        if argv[:1] == ["shard-file"] and len(argv) == 5:
            return check_shard_file(*argv[1:])
        if argv[:1] == ["merge-missing"] and len(argv) == 2:
            print(merge_missing(argv[1]))
            return 0
    except KnownFailuresError as exc:
        print(f"nightly_check: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a damaged store (sqlite3.DatabaseError, StoreError): cannot judge
        print(f"nightly_check: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    print(f"usage:\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
