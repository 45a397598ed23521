"""`compilebench store check` and `compilebench store rebuild`: the history store's health.

The store (OUT/history.sqlite) is a cache of the run files; `rebuild` makes it again from
OUT/runs/*.json (or the --runs given instead) and moves the old file aside, so a damaged store is one
command away from a sound one and nothing is ever deleted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.cli.common import EXIT_HARNESS, EXIT_OK, CliError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("store", help="check the history store, or rebuild it from the run files",
                       description="check: open OUT/history.sqlite with its quick check (--full: the full "
                                   "integrity check) and print its size; exit 3 when it is damaged. rebuild: build a "
                                   "fresh store from OUT/runs/*.json (or the --runs given instead), move the old file aside as "
                                   "history.sqlite.before-rebuild-<time> (never deleted) and put the new one in place.")
    p.add_argument("action", choices=("check", "rebuild"))
    p.add_argument("--out", default="results", help="results folder: the store is OUT/history.sqlite, the run "
                                                    "files OUT/runs/ (default: %(default)s)")
    p.add_argument("--db", help="the store file, when it is not OUT/history.sqlite (e.g. a `merge --ingest` target)")
    p.add_argument("--runs", action="append", default=[], metavar="PATH",
                   help="rebuild: run files or folders of them to ingest (repeatable; default OUT/runs; e.g. the "
                        "merged run files of a CI matrix kept elsewhere)")
    p.add_argument("--full", action="store_true", help="check: the full integrity check (cross-checks every index) "
                                                       "and every stored record's JSON parsed")
    p.add_argument("--allow-empty", action="store_true", help="rebuild: replace a store that holds runs (or cannot "
                   "be read) even when no run file was found (refused by default: exit 3)")
    p.set_defaults(func=cmd_store)


def cmd_store(args: argparse.Namespace) -> int:
    from harness.run.store import HistoryStore, rebuild_command, rebuild_store, recovery_hint

    db = Path(args.db) if args.db else Path(args.out) / "history.sqlite"
    if args.action == "check":
        if not db.is_file():  # a store the user pointed at that is not there: bad input, as for dashboard
            raise CliError(f"no history store at {db}; pass --out DIR or --db FILE of an existing one, or "
                           f"`{rebuild_command(db)}` builds one from the run files")
        with HistoryStore(db) as store:  # quick_check on open: a damaged file raises, exit 3
            problems = store.integrity_check() if args.full else []
            if args.full and not problems:  # damaged content the b-tree checks do not read
                problems = [f"record not JSON: {name}" for name in store.unparsable_records()]
            if problems:
                print(f"compilebench: error: history store {db} is damaged (integrity_check: "
                      f"{'; '.join(problems)[:300]}); {recovery_hint(db)}", file=sys.stderr)
                return EXIT_HARNESS
            runs, records = store.counts()
        print(f"history store {db}: ok ({'integrity' if args.full else 'quick'} check), {runs} run(s), "
              f"{records} record(s), {db.stat().st_size / 1e6:.1f} MB")
        return EXIT_OK
    sources = args.runs or [Path(args.out) / "runs"]
    result = rebuild_store(db, sources, allow_empty=args.allow_empty)
    for line in result.unreadable:
        print(f"warning: left out (not a readable run file): {line}")
    for line in result.lost:
        print(f"warning: lost (only in the old store, which could not give it back): {line}")
    for path in result.moved_aside:
        print(f"moved aside: {path}")
    print(f"history store rebuilt: {db} from {', '.join(map(str, sources))}: {result.runs} run(s), "
          f"{result.records} record(s) in {result.seconds:.1f}s"
          + (f"; {len(result.salvaged)} run(s) with no run file kept from the old store" if result.salvaged else "")
          + (f"; {len(result.unreadable)} file(s) left out" if result.unreadable else "")
          + (f"; {len(result.lost)} store-only run(s) lost" if result.lost else ""))
    return EXIT_OK
