"""A stand-in for `compilebench run` in the nightly rehearsal's fast tests: writes a SYNTHETIC
run (harness/testing/synthetic.py: log-normal samples of a known median) instead of measuring,
honours --label, --out, --no-ingest, --shard (auto too), and delegates every other command to
the real CLI. FAKE_SLOWDOWN=0.5 makes the compiled code of every case 50% slower (an injected
regression); FAKE_SEED varies the noise. Faults, for the workflow's failure paths:
FAKE_FAIL=N (the first N cases fail_run, exit 1 as `run` does), FAKE_CONTENDED=1 (every case
timed on a contended machine), FAKE_EXIT=C (exit C writing nothing: a run that never started),
FAKE_BROKEN_SHARD=I (shard I exits 1 writing nothing: its tox env did not install),
FAKE_SHARD=I/N (write shard I/N whatever --shard says). Nothing here is a measurement.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import sys
from pathlib import Path

from harness.cli.main import main as cli_main
from harness.model.schema import error_info, save_run
from harness.run.runner import new_run_id
from harness.run.shard import apply_shard
from harness.run.store import HistoryStore
from harness.testing.synthetic import synthetic_run


def fake_run(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--label", default="")
    p.add_argument("--out", default="results")
    p.add_argument("--no-ingest", action="store_true")
    p.add_argument("--shard")
    p.add_argument("--shard-costs")
    args, _ = p.parse_known_args(argv)
    if os.environ.get("FAKE_EXIT"):
        print(f"FAKE: exit {os.environ['FAKE_EXIT']} before writing anything", file=sys.stderr)
        return int(os.environ["FAKE_EXIT"])
    seed = int(os.environ.get("FAKE_SEED", "0"))
    run = synthetic_run(4, seed, slowdown=float(os.environ.get("FAKE_SLOWDOWN", "0")),
                        run_id=new_run_id(args.label))
    config: dict = {"suite": None, "synthetic": True}
    records = run.records
    shard = os.environ.get("FAKE_SHARD") or args.shard
    if shard:
        cases, config["shard"] = apply_shard([r.case for r in records], shard, "none", Path(args.out))
        if str(config["shard"]["index"]) == os.environ.get("FAKE_BROKEN_SHARD"):
            print("FAKE: tox: could not install the bench-gpu env (exit 1)", file=sys.stderr)
            return 1
        records = [r for r in records if r.case in cases]
    for i, rec in enumerate(records):
        if i < int(os.environ.get("FAKE_FAIL", "0")):
            rec.status, rec.error = "fail_run", error_info("Synthetic", "synthetic failure", phase="run")
        if os.environ.get("FAKE_CONTENDED"):
            rec.metrics["contention"] = {"contended": True, "cpu_wait_fraction": 0.5, "threshold": 0.15}
    created = dt.datetime.now(dt.timezone.utc).isoformat()
    run = dataclasses.replace(run, label=args.label, created_at=created, config=config, records=records)
    path = save_run(run, Path(args.out) / "runs" / f"{run.run_id}.json")
    if not args.no_ingest:
        with HistoryStore(Path(args.out) / "history.sqlite") as store:
            store.ingest(run)
    print(f"SYNTHETIC run of {len(records)} case(s): {path}")
    return 1 if any(r.status != "ok" for r in records) else 0


if __name__ == "__main__":
    argv = sys.argv[1:]
    sys.exit(fake_run(argv[1:]) if argv[:1] == ["run"] else cli_main(argv))
