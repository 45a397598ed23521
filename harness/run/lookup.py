"""Finding a run by name: the one place where every command's RUN argument is resolved.

A RUN is any of (RUN_SPELLINGS, shown in `--help`):

- a path to a run file (`results/runs/ID.json`, `merged.json`);
- a run id, or a unique prefix of one, found in `OUT/runs/` or in the history store
  `OUT/history.sqlite`;
- `latest` (the newest run) or `latest~N` (N runs before the newest), counted over the run
  files and the store together, oldest to newest by `created_at`;
- either of those narrowed by a filter after a colon: `latest~1:suite=cpu,label=nightly`
  (keys `suite` and `label`), so a nightly that runs two suites compares each with its own
  previous night; the bare word `judgeable` keeps only runs a later night can be judged
  against (`latest:label=nightly-cpu,judgeable`; `base_problem` says what disqualifies one:
  no case ok, a case timed on a contended machine, interrupted, planned cases missing).

The store keeps each run's environment, config and every record's full JSON (store.py), so
a run that exists only in the store (the case in CI, where only `history.sqlite` survives
from one night to the next) loads into the same `Run` its run file held. A run present in
both is read from its file: the run files are the source of truth, and a name that is a run
file's (OUT/runs/NAME.json, or a run file whose id is NAME) is answered without opening the
store, so a damaged store does not hide a run whose file is sound.

Anything that names no run is a RunLookupError (a UserError: one line, exit 2).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.measure.contention import is_contended
from harness.model.schema import STATUSES, Run, RunFileError, load_run

__all__ = ["FAILED_STATUSES", "RUN_SPELLINGS", "RunEntry", "RunHealth", "RunLookupError", "base_problem", "find_run", "list_runs",
           "resolve_run"]

RUN_SPELLINGS = ("a run file, a run id (or unique prefix) in OUT/runs or OUT/history.sqlite, 'latest', "
                 "'latest~N' (N runs before the newest), optionally filtered: latest~1:suite=cpu,label=nightly "
                 "(add ',judgeable' for runs a later night can be judged against)")

_LATEST_RE = re.compile(r"^latest(?:~(\d+))?$")
_STAMP_RE = re.compile(r"^(\d{8}-\d{6})-")
FILTER_KEYS = ("suite", "label")
JUDGEABLE = "judgeable"  # the filter word: a run that can serve as a comparison's base
FAILED_STATUSES = frozenset(s for s in STATUSES if s not in ("ok", "skipped"))


class RunLookupError(RunFileError):
    """A RUN argument that names no run (or several); the message says what exists."""


@dataclass(frozen=True)
class RunHealth:
    """What decides whether a run can be the base of a comparison: its record counts."""

    records: int
    ok: int
    contended: int  # ok records the worker marked contended: their timings measure the run queue
    failed: int = 0
    interrupted: bool = False
    missing_cases: int = 0  # planned cases a merge of shards did not get (--allow-missing)

    @classmethod
    def of_dict(cls, data: Mapping) -> RunHealth:
        """From a run file's JSON (its `records` and `config`)."""
        records = [r for r in data.get("records") or [] if isinstance(r, Mapping)]
        ok = [r for r in records if r.get("status") == "ok"]
        config = data.get("config") or {}
        return cls(len(records), len(ok), sum(1 for r in ok if is_contended(r.get("metrics"))),
                   sum(1 for r in records if r.get("status") in FAILED_STATUSES), bool(config.get("interrupted")),
                   len((config.get("shards") or {}).get("missing_cases") or []))


def base_problem(health: RunHealth | None) -> str | None:
    """Why a run cannot be the base a later run is judged against, or None when it can. A
    base whose cases all failed or were skipped compares nothing; a contended base makes
    every comparison with it `cannot judge` (and absorbs a regression landing that night);
    an interrupted or incomplete one hides the cases it lacks."""
    if health is None:
        return "not read"
    if not health.records:
        return "no records"
    if health.ok == 0:
        return f"no case ok ({health.failed} failed, {health.records - health.failed} skipped)"
    if health.contended:
        return f"machine contended: {health.contended} of {health.ok} ok case(s) timed on a contended machine"
    if health.interrupted:
        return "interrupted: a partial run"
    if health.missing_cases:
        return f"incomplete: {health.missing_cases} planned case(s) missing (shards merged with --allow-missing)"
    return None


@dataclass(frozen=True)
class RunEntry:
    """One known run: where it lives and what `latest` orders and filters it by."""

    run_id: str
    created_at: _dt.datetime
    path: Path | None = None  # its run file, when there is one
    in_store: bool = False
    label: str | None = None
    suite: str | None = None
    health: RunHealth | None = None  # filled by list_runs(need_health=True)
    # a file named as `run` names its run files that could not be read (truncated, not JSON):
    # listed, so that a filtered `latest` cannot skip past it unawares
    unreadable: bool = False

    def load(self, db: Path) -> Run:
        if self.path is not None:
            return load_run(self.path)
        return _load_from_store(db, self.run_id)


def resolve_run(ref: str, out_dir: str | Path = "results", db: str | Path | None = None) -> Run:
    """The run a RUN argument names (see the module docstring for the spellings)."""
    path = Path(ref)
    if path.is_file() or path.suffix == ".json":
        return load_run(path)
    db_path = Path(db) if db is not None else Path(out_dir) / "history.sqlite"
    return find_run(ref, out_dir, db_path).load(db_path)


def find_run(ref: str, out_dir: str | Path = "results", db: str | Path | None = None) -> RunEntry:
    """The entry a run id, prefix or `latest[~N][:filter]` names, without loading the run."""
    db_path = Path(db) if db is not None else Path(out_dir) / "history.sqlite"
    name, _, filter_text = ref.partition(":")
    filters = _parse_filters(ref, filter_text)
    if not filters and not _LATEST_RE.match(name):
        on_file = _run_file_match(Path(out_dir) / "runs", name)
        if on_file is not None:  # the source of truth answers without the store (which may be damaged)
            return on_file
    where = _where(out_dir, db_path)
    listed = list_runs(out_dir, db_path, need_meta=bool(filters), need_health=JUDGEABLE in filters)
    entries = [e for e in listed if not e.unreadable and _matches(e, filters)]
    latest = _LATEST_RE.match(name)
    if latest:
        back = int(latest.group(1) or 0)
        if back >= len(entries):
            narrowed = f" matching {filter_text}" if filters else ""
            raise RunLookupError(f"{ref}: there are only {len(entries)} run(s){narrowed} in {where}; "
                                 "run `compilebench run` first or name a run file")
        chosen = entries[-1 - back]
        _refuse_unreadable_after(ref, filter_text, chosen, listed)
        return chosen
    # a run file's name works too (`show` lists them; `merge -o nightly.json` is not named by its id)
    exact = [e for e in entries if e.run_id == name] or [e for e in entries if e.path is not None and e.path.stem == name]
    if exact:
        return exact[0]
    prefixed = [e for e in entries if e.run_id.startswith(name)] if name else []
    if len(prefixed) == 1:
        return prefixed[0]
    if len(prefixed) > 1:
        raise RunLookupError(f"{ref}: {len(prefixed)} runs start with this ({prefixed[0].run_id}, "
                             f"{prefixed[1].run_id}, ...); give more of the run id")
    raise RunLookupError(f"{ref}: no such run file or run id in {where}; pass a path, a run id (or its start), "
                         "or latest / latest~N[:suite=X,label=Y,judgeable]")


def list_runs(out_dir: str | Path = "results", db: str | Path | None = None, *,
              need_meta: bool = False, need_health: bool = False) -> list[RunEntry]:
    """Every run in `out_dir/runs/*.json` and the history store, oldest first (by created_at,
    then run id), one entry per run id. `need_meta`: fill label/suite for run files too
    (reads each file); the store's entries always have them. `need_health`: fill each
    entry's RunHealth (a run file's from the file, the source of truth)."""
    db_path = Path(db) if db is not None else Path(out_dir) / "history.sqlite"
    by_id: dict[str, RunEntry] = {e.run_id: e for e in _store_entries(db_path, need_health)}
    for entry in _file_entries(Path(out_dir) / "runs", need_meta or need_health, need_health):
        stored = by_id.get(entry.run_id)
        if stored is not None and entry.label is None:  # same run: the store already knows its label/suite
            entry = RunEntry(entry.run_id, stored.created_at, entry.path, True, stored.label, stored.suite,
                             stored.health)
        by_id[entry.run_id] = entry
    return sorted(by_id.values(), key=lambda e: (e.created_at, e.run_id))


def _where(out_dir: str | Path, db: Path) -> str:
    return f"{Path(out_dir) / 'runs'} and {db}" if db.is_file() else f"{Path(out_dir) / 'runs'} (no history store at {db})"


def _refuse_unreadable_after(ref: str, filter_text: str, chosen: RunEntry, listed: Sequence[RunEntry]) -> None:
    """A filtered `latest` cannot tell whether a run file it cannot read matches: one newer than
    the run it would pick might be the one meant (a night's truncated file), so it says so
    instead of comparing an older night unawares."""
    newer = [e for e in listed if e.unreadable and (e.created_at, e.run_id) > (chosen.created_at, chosen.run_id)]
    if newer:
        raise RunLookupError(f"{ref}: {newer[-1].path} cannot be read (truncated, or not a run file), so whether it "
                             f"matches {filter_text} is unknown, and it is newer than {chosen.run_id}; repair or "
                             "remove it, or name the run you mean")


def _parse_filters(ref: str, text: str) -> dict[str, str]:
    filters: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part == JUDGEABLE:
            filters[JUDGEABLE] = "yes"
            continue
        key, sep, value = part.partition("=")
        if not sep or key not in FILTER_KEYS or not value:
            raise RunLookupError(f"{ref}: filter {part!r} is not KEY=VALUE with KEY one of {', '.join(FILTER_KEYS)}, "
                                 f"nor {JUDGEABLE!r} (e.g. latest~1:suite=cpu,label=nightly,judgeable)")
        filters[key] = value
    return filters


def _matches(entry: RunEntry, filters: Mapping[str, str]) -> bool:
    return all(base_problem(entry.health) is None if key == JUDGEABLE else getattr(entry, key) == value
               for key, value in filters.items())


def _utc(text: str) -> _dt.datetime:
    try:
        stamp = _dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=_dt.timezone.utc)


def _file_entries(runs_dir: Path, need_meta: bool, need_health: bool = False) -> list[RunEntry]:
    """Run files. A file named by its run id (as `run` writes it) is known from its name, whose
    UTC stamp is the run's start; any other file (`merge -o nightly.json`) is read for its id."""
    if not runs_dir.is_dir():
        return []
    entries = [_file_entry(path, need_meta, need_health) for path in sorted(runs_dir.glob("*.json"))]
    return [e for e in entries if e is not None]


def _file_entry(path: Path, need_meta: bool, need_health: bool = False) -> RunEntry | None:
    stamp = _STAMP_RE.match(path.stem)
    if stamp and not need_meta:
        created = _dt.datetime.strptime(stamp.group(1), "%Y%m%d-%H%M%S").replace(tzinfo=_dt.timezone.utc)
        return RunEntry(path.stem, created, path)
    head = _read_head(path)
    if head is None:
        if stamp is None:  # some other JSON file: not a run
            return None
        created = _dt.datetime.strptime(stamp.group(1), "%Y%m%d-%H%M%S").replace(tzinfo=_dt.timezone.utc)
        return RunEntry(path.stem, created, path, unreadable=True)
    return RunEntry(str(head.get("run_id") or path.stem), _utc(head.get("created_at", "")), path,
                    label=head.get("label") or "", suite=(head.get("config") or {}).get("suite"),
                    health=RunHealth.of_dict(head) if need_health else None)


def _run_file_match(runs_dir: Path, name: str) -> RunEntry | None:
    """The run file `name` names exactly: OUT/runs/NAME.json, or a file there whose run id is
    NAME; None when only the store (or a prefix) could tell."""
    if not name or "/" in name:
        return None
    direct = runs_dir / f"{name}.json"
    if direct.is_file():
        return _file_entry(direct, need_meta=False) or RunEntry(name, _utc(""), direct)
    return next((e for e in _file_entries(runs_dir, need_meta=False) if e.run_id == name), None)


def _read_head(path: Path) -> dict | None:
    """A run file's top-level fields; None for a file that is not a run (skipped by `latest`,
    reported by load_run when named directly)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "records" in data else None


# per run: records, ok, ok and contended, failed; SQLite's JSON functions read the record JSON in place
_HEALTH_SQL = f"""
    SELECT run_id, COUNT(*), SUM(status = 'ok'),
           SUM(status = 'ok' AND json_extract(record_json, '$.metrics.contention.contended') = 1),
           SUM(status IN ({", ".join(f"'{s}'" for s in sorted(FAILED_STATUSES))}))
    FROM records GROUP BY run_id"""
_CONFIG_SQL = """SELECT run_id, json_extract(config_json, '$.interrupted'),
                        json_array_length(config_json, '$.shards.missing_cases') FROM runs"""


def _store_entries(db: Path, need_health: bool = False) -> list[RunEntry]:
    if not db.is_file():
        return []
    from harness.run.store import HistoryStore

    health: dict[str, RunHealth] = {}
    with HistoryStore(db) as store:
        rows = store.conn.execute("SELECT run_id, created_at, label, suite FROM runs").fetchall()
        if need_health:
            counts = {row[0]: row[1:] for row in store.conn.execute(_HEALTH_SQL)}
            for run_id, interrupted, missing in store.conn.execute(_CONFIG_SQL):
                n, ok, contended, failed = counts.get(run_id, (0, 0, 0, 0))
                health[run_id] = RunHealth(n, ok or 0, contended or 0, failed or 0, bool(interrupted), missing or 0)
    return [RunEntry(run_id, _utc(created), None, True, label or "", suite, health.get(run_id))
            for run_id, created, label, suite in rows]


def _load_from_store(db: Path, run_id: str) -> Run:
    from harness.run.store import HistoryStore

    with HistoryStore(db) as store:  # a damaged store raises sqlite3.DatabaseError: the CLI's exit 3
        return store.load_run(run_id)
