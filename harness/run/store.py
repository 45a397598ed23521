"""History store: every run in one SQLite file, queried as tidy pandas DataFrames.

stdlib sqlite3 with numbered migrations (`PRAGMA user_version`), WAL journaling so readers
(the dashboard) never block an ingest, and idempotent ingest: the same run ingested twice
replaces its own rows. The full record JSON is kept next to the indexed columns so nothing
measured is ever lost to the table layout.

The store is a cache of the run files (OUT/runs/*.json are the source of truth), and it is
checked before it is trusted: every open runs `PRAGMA quick_check` (about 1 ms per MB;
benchmarks/store_check.py), and a damaged file ("file is not a database", a malformed page,
a truncated file) raises StoreCorruptError naming the file and the recovery,
`compilebench store rebuild --out DIR`, which rebuilds it from DIR/runs/*.json and moves the
damaged file aside, never deleting it (`rebuild_store`).
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from harness.model.errors import HarnessError
from harness.model.schema import Record, Run, run_from_dict

__all__ = ["HistoryStore", "StoreCorruptError", "StoreError", "RebuildResult", "rebuild_store", "recovery_hint",
           "rebuild_command", "run_from_rows",
           "load_history", "record_row", "MIGRATIONS", "RECORD_COLUMNS", "BUSY_TIMEOUT_S"]

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


class StoreError(HarnessError):
    """The history store cannot be used (cannot be opened or written); exit 3."""


class StoreCorruptError(StoreError):
    """The history file is damaged; the message names it and how to rebuild it."""


class UnstorableRunError(StoreError):
    """One run the store cannot hold (an integer beyond SQLite's 64 bits, a case twice): that
    run's problem, not the store's, so a rebuild reports and skips its file."""


# what SQLite says of a damaged file; anything else (locked, read-only, cannot open) is not damage
_CORRUPT_MARKERS = ("not a database", "malformed", "corrupt", "disk i/o error", "unsupported file format")


def rebuild_command(path: str | Path) -> str:
    """The command that rebuilds the store at `path` from its run files."""
    path = Path(path)
    if path.name == "history.sqlite":
        return f"compilebench store rebuild --out {path.parent}"
    return f"compilebench store rebuild --db {path} --runs DIR"


def recovery_hint(path: str | Path) -> str:
    """The command that rebuilds `path` from the run files, and what it does."""
    path = Path(path)
    source = f"{path.parent / 'runs'}/*.json" if path.name == "history.sqlite" else "the run files in DIR"
    return f"`{rebuild_command(path)}` rebuilds it from {source} (the damaged file is moved aside, not deleted)"


def _store_error(path: Path, exc: sqlite3.Error) -> StoreError:
    text = str(exc)
    if any(marker in text.lower() for marker in _CORRUPT_MARKERS):
        return StoreCorruptError(f"history store {path} is damaged ({text}); {recovery_hint(path)}")
    return StoreError(f"history store {path}: {text} (check that the folder is writable and the disk not full)")


T = TypeVar("T")


def _guarded(method: Callable[..., T]) -> Callable[..., T]:
    """Damage found past the open-time check (a page the quick check does not read) is the
    same one-line StoreError, never a traceback."""
    @functools.wraps(method)
    def wrapper(self: HistoryStore, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError):
            raise  # our bug (e.g. a duplicate case id), not the file's state
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc) from exc
    return wrapper


class HistoryStore:
    def __init__(self, path: str | Path, check: bool = True):
        """Open (or create) the store. `check`: run `PRAGMA quick_check` first and refuse a
        damaged file with StoreCorruptError (rebuild_store opens its fresh file unchecked)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # generous busy timeout: two nightly jobs may ingest at the same moment
            self.conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise _store_error(self.path, exc) from exc
        try:
            _enable_wal(self.conn)
            if check:
                self.quick_check()
            self.conn.execute("PRAGMA foreign_keys=ON")
            self.migrate()
        except sqlite3.Error as exc:
            self.conn.close()
            raise _store_error(self.path, exc) from exc
        except BaseException:
            self.conn.close()
            raise

    def quick_check(self) -> None:
        """PRAGMA quick_check: every page's structure, without the index-vs-table cross check
        of integrity_check (O(N) not O(N log N)); raises StoreCorruptError on any problem."""
        problems = [row[0] for row in self.conn.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            raise StoreCorruptError(f"history store {self.path} is damaged (quick_check: {' '.join('; '.join(problems).split())[:300]}); "
                                    f"{recovery_hint(self.path)}")

    def integrity_check(self) -> list[str]:
        """The full check (slower: also cross-checks every index); [] when the file is sound."""
        problems = [row[0] for row in self.conn.execute("PRAGMA integrity_check(20)")]
        return [] if problems == ["ok"] else problems

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

    @_guarded
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
        except (OverflowError, sqlite3.IntegrityError) as exc:
            self.conn.execute("ROLLBACK")
            raise UnstorableRunError(f"run {run.run_id} cannot go into the history store {self.path} "
                                     f"({type(exc).__name__}: {exc}): an integer beyond 64 bits or a case twice in "
                                     "one run; its run file is not changed") from exc
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return len(rows)

    @_guarded
    def run_ids(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT run_id FROM runs ORDER BY created_at, run_id")]

    @_guarded
    def load_run(self, run_id: str) -> Run:
        run = run_from_rows(self.conn, run_id, self.path)
        if run is None:
            from harness.model.schema import RunFileError

            raise RunFileError(f"run {run_id!r} is not in {self.path}; `compilebench show --out "
                               f"{self.path.parent}` lists the stored runs")
        return run

    @_guarded
    def counts(self) -> tuple[int, int]:
        """(runs, records) in the store."""
        return (int(self.conn.execute("SELECT count(*) FROM runs").fetchone()[0]),
                int(self.conn.execute("SELECT count(*) FROM records").fetchone()[0]))

    @_guarded
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

    @_guarded
    def unparsable_records(self, limit: int = 5) -> list[str]:
        """'run_id/case_id' of stored rows whose JSON does not parse (a damaged overflow page
        that PRAGMA integrity_check does not see: the bytes are well-formed b-tree content)."""
        bad: list[str] = []
        for table, key, columns in (("runs", "run_id", ("environment_json", "config_json")),
                                    ("records", "run_id || '/' || case_id", ("record_json",))):
            for name, *texts in self.conn.execute(f"SELECT {key}, {', '.join(columns)} FROM {table}"):
                try:
                    for text in texts:
                        json.loads(text)
                except (ValueError, TypeError):
                    bad.append(str(name))
                    if len(bad) >= limit:
                        return bad
        return bad


def _parse(text: str, path: Path, what: str) -> Any:
    """json.loads of a stored column: a row that does not parse is a damaged file, not our bug."""
    try:
        return json.loads(text)
    except (ValueError, TypeError) as exc:
        raise StoreCorruptError(f"history store {path} is damaged ({what} is not JSON: {exc}); "
                                f"{recovery_hint(path)}") from exc


def run_from_rows(conn: sqlite3.Connection, run_id: str, path: Path) -> Run | None:
    """The run `run_id` as stored (None: not in the store); damaged rows raise StoreCorruptError."""
    row = conn.execute(
        "SELECT run_id, created_at, label, schema_version, environment_json, config_json FROM runs WHERE run_id = ?",
        (run_id,),
    ).fetchone()
    if row is None:
        return None
    records = [_parse(r[0], path, f"a record of run {run_id}") for r in conn.execute(
        "SELECT record_json FROM records WHERE run_id = ? ORDER BY rowid", (run_id,))]
    data = {"schema_version": row[3], "run_id": row[0], "created_at": row[1], "label": row[2],
            "environment": _parse(row[4], path, f"run {run_id}'s environment"),
            "config": _parse(row[5], path, f"run {run_id}'s config"), "records": records}
    return run_from_dict(data, f"{path}:{run_id}")


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


# ---------------------------------------------------------------- rebuild from the run files

SIDECARS = ("-wal", "-shm", "-journal")  # SQLite's files next to the database: they belong to it


@dataclass
class RebuildResult:
    path: Path
    runs: int = 0
    records: int = 0
    moved_aside: list[Path] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)  # "file: why", for run files that could not be loaded
    salvaged: list[str] = field(default_factory=list)  # run ids read back from the old store (no run file)
    lost: list[str] = field(default_factory=list)  # "run id: why", store-only runs the old store could not give back
    seconds: float = 0.0


def run_files(sources: Iterable[str | Path]) -> list[Path]:
    """Run files named by `sources`: files as given, folders by their *.json (journals and
    other files are left out)."""
    out: list[Path] = []
    for source in sources:
        path = Path(source)
        out.extend(sorted(path.glob("*.json")) if path.is_dir() else [path])
    return out


def _old_store_runs(db: Path, skip: set[str], result: RebuildResult) -> tuple[list[Run], int | None]:
    """(runs the old store holds that no run file gave, how many runs it holds; None when that
    cannot be read). Read-only and row by row, so a damaged file still gives back what it can."""
    if not db.is_file():
        return [], 0
    try:
        # no -wal: everything is in the main file, and immutable leaves no -shm/-wal behind it
        mode = "mode=ro" if db.with_name(db.name + "-wal").exists() else "immutable=1"
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?{mode}", uri=True, timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error:
        return [], None
    try:
        try:
            ids = [row[0] for row in conn.execute("SELECT run_id FROM runs ORDER BY created_at, run_id")]
        except sqlite3.Error:
            return [], None
        runs = []
        for run_id in ids:
            if run_id in skip:
                continue
            try:
                run = run_from_rows(conn, run_id, db)
            except (sqlite3.Error, HarnessError, ValueError, TypeError, KeyError) as exc:
                result.lost.append(f"{run_id}: {' '.join(str(exc).split())[:200]}")
                continue
            if run is not None:
                runs.append(run)
        return runs, len(ids)
    finally:
        conn.close()


def _check_sources(db: Path, sources: Sequence[str | Path]) -> None:
    missing = [str(s) for s in sources if not Path(s).exists()]
    if missing:
        raise StoreError(f"cannot rebuild {db}: {', '.join(missing)} does not exist (the run files are what the "
                         "store is rebuilt from); pass the folder that holds them with --runs DIR")


def rebuild_store(db: str | Path, sources: Sequence[str | Path], allow_empty: bool = False) -> RebuildResult:
    """Build a fresh store from the run files in `sources` (folders or files) plus the runs the
    old store holds that no run file gives (read back from its JSON where the file still
    reads), then move the old file (damaged or not) and its -wal/-shm aside as
    `<name>.before-rebuild-<UTC time>` and put the new one in its place. Nothing is deleted;
    an unreadable run file is reported and left out, the others go in.

    Refused (StoreError, exit 3, the old file left in place) when a source does not exist, or
    when the new store would hold no run while the old one holds some or cannot be read
    (`allow_empty` permits it)."""
    from harness.model.schema import RunFileError, load_run

    started = time.monotonic()
    db = Path(db)
    _check_sources(db, sources)
    result = RebuildResult(db)
    db.parent.mkdir(parents=True, exist_ok=True)
    fresh = db.with_name(db.name + ".rebuilding")
    for leftover in [fresh, *(fresh.with_name(fresh.name + s) for s in SIDECARS)]:
        leftover.unlink(missing_ok=True)  # our own half-built file from an interrupted rebuild
    try:
        with HistoryStore(fresh, check=False) as store:
            seen: set[str] = set()
            for path in run_files(sources):
                try:
                    run = load_run(path)
                    records = store.ingest(run)
                except (RunFileError, OSError) as exc:
                    result.unreadable.append(f"{path}: {exc}")
                    continue
                except UnstorableRunError as exc:
                    # a file the store cannot hold (a case twice, an integer beyond 64 bits):
                    # reported and skipped like an unreadable one, so it cannot block the recovery
                    result.unreadable.append(f"{path}: {exc}")
                    continue
                result.records += records
                result.runs += 1
                seen.add(run.run_id)
            salvaged, old_count = _old_store_runs(db, seen, result)
            for run in salvaged:  # a run only the store held (CI keeps history.sqlite alone): not lost
                result.records += store.ingest(run)
                result.runs += 1
                result.salvaged.append(run.run_id)
            if result.runs == 0 and old_count != 0 and not allow_empty:
                held = "holds runs" if old_count else "cannot be read"
                raise StoreError(f"refusing to replace {db} with an empty store: no run file in "
                                 f"{', '.join(map(str, sources))} and the old store {held}; pass --runs DIR with "
                                 "the run files, or --allow-empty to replace it anyway (it is moved aside)")
            store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # everything in the main file before the rename
    except BaseException:  # disk full, read-only: the old store stays in place, no half-built file next to it
        for leftover in [fresh, *(fresh.with_name(fresh.name + s) for s in SIDECARS)]:
            leftover.unlink(missing_ok=True)
        raise
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for suffix in ("", *SIDECARS):
        old = db.with_name(db.name + suffix)
        if old.exists():
            aside = old.with_name(f"{db.name}.before-rebuild-{stamp}{suffix}")
            old.rename(aside)
            result.moved_aside.append(aside)
    fresh.rename(db)
    for suffix in SIDECARS:
        fresh.with_name(fresh.name + suffix).unlink(missing_ok=True)  # empty after the checkpoint and close
    result.seconds = time.monotonic() - started
    return result
