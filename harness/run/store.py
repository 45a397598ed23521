"""History store: every run in one SQLite file, queried as tidy pandas DataFrames.

stdlib sqlite3 with numbered migrations (`PRAGMA user_version`), WAL journaling so readers
(the dashboard) never block an ingest, and idempotent ingest: the same run ingested twice
replaces its own rows. The full record JSON is kept next to the indexed columns so nothing
measured is ever lost to the table layout.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from harness.model.schema import Record, Run, run_from_dict

MIGRATIONS: list[str] = [
    # 1: runs and records
    """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        label TEXT,
        suite TEXT,
        schema_version INTEGER NOT NULL,
        host TEXT,
        torch_version TEXT,
        git_commit TEXT,
        environment_json TEXT NOT NULL,
        config_json TEXT NOT NULL
    );
    CREATE TABLE records (
        run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
        case_id TEXT NOT NULL,
        suite TEXT, workload TEXT, scenario TEXT, compiler TEXT, device TEXT, dtype TEXT,
        batch_size INTEGER, size TEXT,
        status TEXT NOT NULL,
        speedup REAL, speedup_ci_low REAL, speedup_ci_high REAL,
        latency_s REAL, throughput REAL, throughput_unit TEXT,
        compile_time_s REAL,
        eager_peak_memory_bytes INTEGER, compiled_peak_memory_bytes INTEGER, compression_ratio REAL,
        graph_breaks INTEGER, unique_graph_breaks INTEGER, graphs INTEGER, recompiles INTEGER,
        accuracy TEXT,
        record_json TEXT NOT NULL,
        PRIMARY KEY (run_id, case_id)
    );
    CREATE INDEX records_case ON records(case_id);
    CREATE INDEX runs_created ON runs(created_at);
    """,
]

RECORD_COLUMNS = (
    "run_id", "case_id", "suite", "workload", "scenario", "compiler", "device", "dtype", "batch_size", "size",
    "status", "speedup", "speedup_ci_low", "speedup_ci_high", "latency_s", "throughput", "throughput_unit",
    "compile_time_s", "eager_peak_memory_bytes", "compiled_peak_memory_bytes", "compression_ratio",
    "graph_breaks", "unique_graph_breaks", "graphs", "recompiles", "accuracy", "record_json",
)


BUSY_TIMEOUT_S = 60.0


def _enable_wal(conn: sqlite3.Connection, timeout_s: float = BUSY_TIMEOUT_S) -> None:
    """Switch the database to WAL, retrying while another process holds it: SQLite answers a
    journal-mode change on a database that another connection is opening or migrating with
    "database is locked" at once, without waiting for the busy timeout (seen when two writers
    create a fresh store at the same moment)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.01
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


class HistoryStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # generous busy timeout: two nightly jobs may ingest at the same moment
        self.conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        _enable_wal(self.conn)
        self.conn.execute("PRAGMA foreign_keys=ON")
        self.migrate()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    @property
    def version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    def migrate(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            current = self.version
            for number, script in enumerate(MIGRATIONS, start=1):
                if number > current:
                    for statement in filter(str.strip, script.split(";")):
                        self.conn.execute(statement)
                    self.conn.execute(f"PRAGMA user_version = {number}")
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def ingest(self, run: Run) -> int:
        """Insert or replace one run and all its records in one transaction."""
        env = run.environment
        rows = [record_row(run.run_id, r) for r in run.records]
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.execute("DELETE FROM records WHERE run_id = ?", (run.run_id,))
            self.conn.execute(
                "INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?)",
                (run.run_id, run.created_at, run.label, run.config.get("suite"), run.schema_version,
                 env.get("host"), env.get("torch_version"), env.get("git_commit"),
                 json.dumps(env, default=str), json.dumps(run.config, default=str)),
            )
            placeholders = ",".join("?" * len(RECORD_COLUMNS))
            self.conn.executemany(f"INSERT INTO records ({','.join(RECORD_COLUMNS)}) VALUES ({placeholders})", rows)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return len(rows)

    def run_ids(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT run_id FROM runs ORDER BY created_at, run_id")]

    def load_run(self, run_id: str) -> Run:
        row = self.conn.execute(
            "SELECT run_id, created_at, label, schema_version, environment_json, config_json FROM runs WHERE run_id = ?",
            (run_id,),
        ).fetchone()
        if row is None:
            from harness.model.schema import RunFileError

            raise RunFileError(f"run {run_id!r} is not in {self.path}; `compilebench show --db` lists stored runs")
        records = [json.loads(r[0]) for r in self.conn.execute(
            "SELECT record_json FROM records WHERE run_id = ? ORDER BY rowid", (run_id,))]
        data = {"schema_version": row[3], "run_id": row[0], "created_at": row[1], "label": row[2],
                "environment": json.loads(row[4]), "config": json.loads(row[5]), "records": records}
        return run_from_dict(data, f"{self.path}:{run_id}")

    def dataframe(self):
        """Tidy DataFrame: one row per (run, case) with the run's metadata joined in."""
        import pandas as pd

        query = (
            "SELECT r.*, runs.created_at, runs.label, runs.host, runs.torch_version, runs.git_commit "
            "FROM records r JOIN runs USING (run_id) ORDER BY runs.created_at, r.case_id"
        )
        df = pd.read_sql_query(query, self.conn)
        df["created_at"] = pd.to_datetime(df["created_at"], utc=True, format="ISO8601")
        return df.drop(columns=["record_json"])


def record_row(run_id: str, r: Record) -> tuple:
    m = r.metrics or {}
    acc = m.get("accuracy")
    c = r.case
    return (
        run_id, r.case_id, c.suite, c.workload, c.scenario, c.compiler, c.device, c.dtype, c.batch_size, c.size,
        r.status, m.get("speedup"), m.get("speedup_ci_low"), m.get("speedup_ci_high"), m.get("latency_s"),
        m.get("throughput"), m.get("throughput_unit"), m.get("compile_time_s"),
        (r.eager or {}).get("peak_memory_bytes"), (r.compiled or {}).get("peak_memory_bytes"), m.get("compression_ratio"),
        m.get("graph_breaks"), m.get("unique_graph_breaks"), m.get("graphs"), m.get("recompiles"),
        acc.get("status") if isinstance(acc, dict) else None,
        json.dumps(r.to_dict(), default=str),
    )


def load_history(path: str | Path):
    """pandas loader over a history database (the documented entry point)."""
    with HistoryStore(path) as store:
        return store.dataframe()
