"""What checking the history store on open costs (harness/run/store.py: PRAGMA quick_check).

    python benchmarks/store_check.py [--runs 1000] [--cases 20] [--reps 7]

Builds a store of N SYNTHETIC runs (harness/testing/synthetic_history.py, with raw samples
in each record's JSON, as real runs have) in a temporary folder, then times opening it with
and without the check, alternating, and the full integrity_check for comparison. Target:
the checked open of a 1,000-run store well under a second.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    from harness.run.store import HistoryStore
    from harness.testing.synthetic_history import SyntheticSpec, synthetic_history

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "history.sqlite"
        started = time.perf_counter()
        with HistoryStore(db) as store:
            for run in synthetic_history(SyntheticSpec(cases=args.cases), args.runs):
                store.ingest(run)
        print(f"built {args.runs} runs x {args.cases} cases: {db.stat().st_size / 1e6:.1f} MB "
              f"in {time.perf_counter() - started:.1f}s")

        def open_close(check: bool) -> None:
            HistoryStore(db, check=check).close()

        checked, unchecked = [], []
        for _ in range(args.reps):
            checked.append(timed(lambda: open_close(True)))
            unchecked.append(timed(lambda: open_close(False)))
        with HistoryStore(db, check=False) as store:
            full = timed(store.integrity_check)
        med_c, med_u = statistics.median(checked), statistics.median(unchecked)
        print(f"open with quick_check: median {med_c * 1e3:.1f} ms (min {min(checked) * 1e3:.1f}, max "
              f"{max(checked) * 1e3:.1f}) over {args.reps}; without: {med_u * 1e3:.1f} ms; the check costs "
              f"{(med_c - med_u) * 1e3:.1f} ms; full integrity_check: {full * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
