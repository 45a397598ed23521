"""The history store under concurrent writers (two real processes) and re-ingest."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from pathlib import Path

from harness.model.schema import Record, Run, load_run
from harness.run.store import HistoryStore, UnstorableRunError

V1 = Path(__file__).resolve().parent / "data" / "run_v1_faults.json"
RUNS_PER_WRITER = 15


def _run(run_id: str) -> Run:
    base = load_run(V1)
    return Run(run_id=run_id, created_at=base.created_at, label=run_id, environment=base.environment,
               config=base.config, records=[Record.from_dict(r.to_dict()) for r in base.records])


def _writer(db: str, prefix: str, start, errors) -> None:
    try:
        start.wait(30)  # both processes open the fresh database (migration) at the same moment
        with HistoryStore(db) as store:
            for i in range(RUNS_PER_WRITER):
                store.ingest(_run(f"{prefix}-{i}"))
                store.ingest(_run("shared-run"))  # both writers also re-ingest one same run
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as data
        errors.put(f"{prefix}: {type(exc).__name__}: {exc}")
        raise


def test_two_processes_ingest_concurrently_without_loss(tmp_path):
    db = str(tmp_path / "history.sqlite")
    ctx = mp.get_context("spawn")
    start, errors = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(db, name, start, errors)) for name in ("a", "b")]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(240)
    assert errors.empty(), errors.get()
    assert [p.exitcode for p in procs] == [0, 0]
    records = len(load_run(V1).records)
    with HistoryStore(db) as store:
        ids = store.run_ids()
        assert len(ids) == 2 * RUNS_PER_WRITER + 1 and "shared-run" in ids
        count = store.conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        assert count == len(ids) * records  # the twice-ingested run holds one set of rows
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reingest_is_idempotent_and_a_failed_ingest_leaves_nothing(tmp_path, monkeypatch):
    db = tmp_path / "h.sqlite"
    run = _run("r1")
    with HistoryStore(db) as store:
        store.ingest(run)
        before = store.conn.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        store.ingest(run)
        assert store.conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] == before == len(run.records)
        assert store.load_run("r1").to_dict()["records"] == run.to_dict()["records"]

        broken = _run("r2")
        broken.records.append(broken.records[0])  # duplicate case id: the insert fails mid-way
        try:
            store.ingest(broken)
        except UnstorableRunError as exc:  # named, one line: that run's problem, not the store's
            assert "run r2 cannot go into the history store" in str(exc) and "a case twice" in str(exc)
        else:
            raise AssertionError("a duplicate case id must fail the ingest")
        assert store.run_ids() == ["r1"]  # rolled back: no half-ingested run
        assert store.conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] == before


def test_wal_switch_waits_out_a_locked_database_and_gives_up_on_other_errors():
    """Two writers creating a fresh store at once: SQLite may answer the journal-mode change
    with 'database is locked' at once, without its busy timeout (a CI failure, 2026-11-30);
    the store retries that, and only that."""
    import pytest

    from harness.run.store import _enable_wal

    class Conn:
        def __init__(self, failures: list[str]) -> None:
            self.failures, self.calls = failures, 0

        def execute(self, sql: str) -> None:
            self.calls += 1
            if self.failures:
                raise sqlite3.OperationalError(self.failures.pop(0))

    locked = Conn(["database is locked", "database is locked"])
    _enable_wal(locked)
    assert locked.calls == 3
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        _enable_wal(Conn(["disk I/O error"]))
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _enable_wal(Conn(["database is locked"] * 1000), timeout_s=0.05)
