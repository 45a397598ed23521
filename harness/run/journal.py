"""The run journal: every finished case is on disk before the next one starts.

A run writes `results/runs/<run_id>.journal.jsonl` next to its run file: one header line
(run id, environment, config, the planned cases, the options needed to go on) then one
line per finished case. Each line is a single `write` to a file opened with O_APPEND,
followed by fsync, so a SIGKILL of the parent (or of the machine) loses at most the case
in flight; a torn last line is detected and dropped on read. `compilebench run --resume
RUN_ID` reads the journal, keeps its records and runs only the missing cases, then writes
the same run file a full run would. The journal is deleted once that run file is written.

The journal is held under an exclusive `flock` while a run appends to it, so two
processes cannot resume (and double-run) the same run at once; the lock dies with its
process, so a SIGKILLed run can be resumed straight away.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.model.errors import UserError
from harness.model.jsonfile import json_safe
from harness.model.schema import Case, Record, RunFileError

JOURNAL_VERSION = 1
JOURNAL_SUFFIX = ".journal.jsonl"

# environment fields that change what is measured: a resume on a machine or software stack
# that differs in any of them would merge incomparable records into one run (pyperf refuses
# the same merge), so it is refused with the difference named.
RESUME_MUST_MATCH = ("host", "python_executable", "torch_version", "cpu_model", "packages", "devices")


class ResumeError(UserError, ValueError):
    """A run that cannot be resumed; the message names the run and what to do."""


def journal_path(out_dir: str | Path, run_id: str) -> Path:
    return Path(out_dir) / "runs" / f"{run_id}{JOURNAL_SUFFIX}"


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(json_safe(obj), allow_nan=False, default=str, separators=(",", ":")) + "\n").encode()


class Journal:
    """An open, locked journal. Use `Journal.create` for a new run, `Journal.reopen` to resume."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self._fd = fd
        self.torn_tail_dropped = False

    @classmethod
    def create(cls, path: str | Path, header: dict[str, Any]) -> Journal:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        journal = cls(path, fd)
        journal._lock()
        try:
            journal._write({"kind": "header", "journal_version": JOURNAL_VERSION, **header})
            _fsync_dir(path.parent)  # the new file's name survives a crash too
        except BaseException:  # disk full at the header: no empty journal left behind, no open fd
            journal.remove()
            raise
        return journal

    @classmethod
    def reopen(cls, path: str | Path) -> Journal:
        path = Path(path)
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        journal = cls(path, fd)
        journal._lock()
        journal.torn_tail_dropped = _drop_torn_tail(fd)
        return journal

    def read(self) -> JournalState:
        """The journal's contents, counting a torn tail that reopening cut off."""
        state = read_journal(self.path)
        state.torn_lines += int(self.torn_tail_dropped)
        return state

    def _lock(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise ResumeError(f"{self.path}: another compilebench process is running this run right now; "
                              "wait for it to finish (or stop it) before resuming") from None

    def _write(self, obj: dict[str, Any]) -> None:
        data = _line(obj)
        written = os.write(self._fd, data)  # one O_APPEND write: a line is never interleaved
        if written != len(data):
            raise OSError(f"{self.path}: short write ({written} of {len(data)} bytes); disk full?")
        os.fsync(self._fd)

    def append(self, record: Record) -> None:
        self._write({"kind": "record", "record": record.to_dict()})

    def recorded(self, cases: list[Case], fallback: list[Record]) -> list[Record]:
        """The journaled records in plan order. After an interrupt the run file is made to hold
        exactly what the journal holds: Ctrl-C can land between the journal append and the
        in-memory one, and the journal is what --resume trusts."""
        try:
            records = read_journal(self.path).records
        except RunFileError:
            return fallback
        return [records[c.case_id] for c in cases if c.case_id in records]

    def note_resume(self, entry: dict[str, Any]) -> None:
        """Journal a resume, so a run interrupted twice still lists both resumes."""
        self._write({"kind": "resume", **entry})

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # releases the flock
            self._fd = -1

    def remove(self) -> None:
        """Delete the journal once the complete run file has replaced it."""
        self.close()
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _drop_torn_tail(fd: int) -> bool:
    """Cut a last line that has no newline (the write SIGKILL interrupted) so the next
    append starts on a line of its own. Returns whether there was one."""
    size = os.fstat(fd).st_size
    if size == 0:
        return False
    if os.pread(fd, 1, size - 1) == b"\n":
        return False
    # the last newline, however long the torn line (a 1 MiB window used to cut a longer one,
    # and with it every line before it, to nothing)
    end, chunk = size, 1 << 20
    while end > 0:
        start = max(0, end - chunk)
        cut = os.pread(fd, end - start, start).rfind(b"\n")
        if cut >= 0:
            os.ftruncate(fd, start + cut + 1)
            break
        end = start
    else:
        os.ftruncate(fd, 0)  # no newline at all: the run died before its first line
    os.fsync(fd)
    return True


@dataclass
class JournalState:
    """What a journal holds: its header and the records of the cases that finished."""

    path: Path
    header: dict[str, Any]
    records: dict[str, Record] = field(default_factory=dict)
    resumes: list[dict[str, Any]] = field(default_factory=list)  # one entry per earlier resume
    torn_lines: int = 0
    # every record line in file order: an ab session journals a case once per side and round
    entries: list[Record] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.header["run_id"])

    def require(self, *keys: str) -> None:
        """The header fields a resume rebuilds the run from; a journal without them is damaged."""
        lacking = [k for k in keys if k not in self.header]
        if lacking:
            raise RunFileError(f"{self.path}: the journal header lacks {', '.join(lacking)}, so the run cannot be "
                               "resumed as it began; restore the journal, or run the cases again with a new command")

    def planned_cases(self) -> list[Case]:
        return [Case.from_dict(c) for c in self.header["plan"]]

    def missing(self) -> list[Case]:
        return [c for c in self.planned_cases() if c.case_id not in self.records]


def read_journal(path: str | Path) -> JournalState:
    """Parse a journal. A torn last line (SIGKILL mid-write) is dropped and counted; any
    other damage is a RunFileError naming the file and line."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise RunFileError(f"{path}: no such journal") from None
    except OSError as exc:
        raise RunFileError(f"{path}: cannot be read ({exc})") from None
    lines = raw.split(b"\n")
    torn = 0
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        lines.pop()  # no newline after it: the write in flight when the process died
        torn = 1
    if not lines:
        raise RunFileError(f"{path}: empty journal (the run died before its first line); start the run again")
    header = _parse_line(path, 1, lines[0])
    if header.get("kind") != "header" or not isinstance(header.get("plan"), list) or "run_id" not in header:
        raise RunFileError(f"{path}: line 1 is not a compilebench journal header; pass a *.journal.jsonl from results/runs/")
    version = header.get("journal_version")
    if not isinstance(version, int) or version > JOURNAL_VERSION:
        raise RunFileError(f"{path}: journal_version {version!r} is newer than this compilebench understands "
                           f"({JOURNAL_VERSION}); resume it with the compilebench that started it")
    state = JournalState(path=path, header=header, torn_lines=torn)
    lacking = [k for k, kind in (("options", dict), ("created_at", str)) if k in header and not isinstance(header[k], kind)]
    if lacking:
        raise RunFileError(f"{path}: the journal header's {', '.join(lacking)} is damaged; restore the journal, or "
                           "run the cases again with a new command")
    try:
        state.planned_cases()
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RunFileError(f"{path}: malformed plan in the header ({type(exc).__name__}: {exc})") from None
    for number, line in enumerate(lines[1:], start=2):
        entry = _parse_line(path, number, line)
        if entry.get("kind") == "resume":
            state.resumes.append({k: v for k, v in entry.items() if k != "kind"})
            continue
        if entry.get("kind") != "record":
            raise RunFileError(f"{path}: line {number} is not a record line")
        try:
            record = Record.from_dict(entry["record"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RunFileError(f"{path}: line {number}: malformed record ({type(exc).__name__}: {exc})") from None
        state.records[record.case_id] = record  # a case journaled twice: the later one wins
        state.entries.append(record)
    return state


def _parse_line(path: Path, number: int, line: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise RunFileError(f"{path}: line {number} is not valid JSON ({exc}); the journal is damaged: restore it, or "
                           "run the cases again with a new `compilebench run`") from None
    if not isinstance(obj, dict):
        raise RunFileError(f"{path}: line {number} is not a JSON object; the journal is damaged: restore it, or "
                           "run the cases again with a new `compilebench run`")
    return obj


def find_journal(ref: str, out_dir: str | Path) -> Path:
    """A journal by path, by run id, or by a unique run-id prefix, in <out_dir>/runs."""
    as_path = Path(ref)
    if as_path.name.endswith(JOURNAL_SUFFIX) and as_path.is_file():
        return as_path
    if as_path.suffix == ".json":  # the (interrupted) run file: its journal sits next to it
        ref = as_path.name[: -len(".json")]
        out_dir = as_path.parent.parent
    candidate = journal_path(out_dir, ref)
    if candidate.exists():
        return candidate
    runs_dir = Path(out_dir) / "runs"
    matches = sorted(runs_dir.glob(f"{ref}*{JOURNAL_SUFFIX}")) if runs_dir.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if (runs_dir / f"{ref}.json").exists():
        raise ResumeError(f"run {ref} has no journal in {runs_dir}: it finished (or predates journals); "
                          "nothing to resume — start a new run instead")
    hint = f" ({len(matches)} runs start with {ref!r}; give more of the id)" if matches else ""
    raise ResumeError(f"--resume {ref}: no journal for that run in {runs_dir}{hint}; "
                      "pass a run id from `compilebench show` (and the same --out as the run)")


def check_environment(header_env: dict[str, Any], current: dict[str, Any], run_id: str) -> list[str]:
    """Refuse a resume whose machine or stack differs; return notes on harmless differences."""
    for key in RESUME_MUST_MATCH:
        if header_env.get(key) != current.get(key):
            raise ResumeError(
                f"cannot resume run {run_id}: {key} differs ({header_env.get(key)!r} then, {current.get(key)!r} now); "
                "its records would not be comparable — start a new run"
            )
    notes = []
    if header_env.get("git_commit") != current.get("git_commit"):
        notes.append(f"compilebench commit changed from {header_env.get('git_commit')} to {current.get('git_commit')}")
    return notes


def journal_header(run: Any, cases: list[Case], opts: Any) -> dict[str, Any]:
    """Everything `resume` needs: the run's identity, environment and config, the planned
    cases in order, and the options the cases were run with."""
    from dataclasses import asdict

    return {
        "run_id": run.run_id,
        "created_at": run.created_at,
        "label": run.label,
        "schema_version": run.schema_version,
        "environment": run.environment,
        "config": run.config,
        "plan": [c.to_dict() for c in cases],
        "options": asdict(opts),
    }


def _normalised(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def check_workload_files(state: JournalState) -> dict[str, str]:
    """Each workload file the run was planned from is there and unchanged (journals from
    before 2026-12-03 kept no hashes: not checked). A changed file would mix two model
    definitions in one run, with nothing in its records to say so. A file gone from its
    absolute path (the checkout moved, a results folder copied to another machine) is looked
    for at the same relative path under the current folder, and taken only when its content
    is the same. Returns {path as planned: path to load} for the files found elsewhere."""
    hashes = (state.header.get("config") or {}).get("workload_file_sha256") or {}
    moved: dict[str, str] = {}
    for path, then in hashes.items():
        now = file_sha256(Path(path))
        if now is None:
            found = next((c for c in _relocations(Path(path)) if file_sha256(c) == then), None)
            if found is None:
                raise ResumeError(f"cannot resume run {state.run_id}: its workload file {path} is gone (and no file "
                                  "with its content at the same relative path here); put it back as it was, or "
                                  "start a new run")
            moved[path] = str(found)
        elif now != then:
            raise ResumeError(f"cannot resume run {state.run_id}: workload file {path} changed since the run began "
                              f"(sha256 {then[:12]} then, {now[:12]} now); restore it, or start a new run")
    return moved


def file_sha256(path: Path) -> str | None:
    """A file's SHA-256, or None when it cannot be read."""
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _relocations(path: Path) -> list[Path]:
    """The same file under the current folder: every tail of its path, longest first."""
    parts = path.parts[1:] if path.is_absolute() else path.parts
    return [Path.cwd().joinpath(*parts[i:]) for i in range(len(parts))]


def resume_config(state: JournalState, current_env: dict[str, Any], get_compiler: Any) -> dict[str, Any]:
    """The run's config for a resume, after checking that the machine and every compiler
    definition still match what the journaled cases ran with."""
    notes = check_environment(state.header.get("environment") or {}, current_env, state.run_id)
    config = dict(state.header.get("config") or {})
    for name, then in (config.get("compilers") or {}).items():
        now = _normalised(get_compiler(name).to_dict())
        if now != _normalised(then):
            raise ResumeError(f"cannot resume run {state.run_id}: compiler {name!r} is defined differently now "
                              f"({now} vs {then}); start a new run")
    config["interrupted"] = False
    history = list(state.resumes)
    history.append({
        "at": _now(),
        "cases_from_journal": len(state.records),
        "cases_to_run": len(state.missing()),
        "torn_lines_dropped": state.torn_lines,
        "notes": notes,
    })
    config["resumed"] = history
    return config


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
