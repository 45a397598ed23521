"""The result contract: Case, Record, Run and the versioned run-file format.

Run files are JSON only (never pickle) and carry `schema_version`. `load_run` dispatches on
that version to a loader per version, so files written by older compilebench keep loading;
a file from a newer schema is refused with a clear message. See docs/RESULTS.md.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.model.errors import UserError
from harness.model.payloads import TEXT as _TEXT
from harness.model.payloads import ErrorInfo, Metrics, Timing
from harness.model.payloads import expect as _expect

SCHEMA_VERSION = 1

STATUSES = ("ok", "fail_accuracy", "fail_compile", "fail_run", "oom", "timeout", "crashed", "skipped")
# a run environment's fields that name its torch build: two runs differ in torch when any differs
TORCH_FIELDS = ("torch_version", "torch_git", "torch_cuda", "torch_hip")


def torch_builds_differ(base: Sequence[Mapping[str, Any]], head: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the environments of two sides (or of one side's runs) hold more than one torch build."""
    builds = {tuple(repr(env.get(name)) for name in TORCH_FIELDS) for env in (*base, *head)}
    return len(builds) > 1


class RunFileError(UserError, ValueError):
    """A run file that cannot be loaded; the message names the file and the fix."""


_CASE_STR_FIELDS = ("workload", "scenario", "compiler", "device", "dtype", "size")
_ENV_TEXT_FIELDS = ("host", "torch_version", "git_commit")
# the record's own containers; what is inside error/eager/compiled/metrics is checked by
# their types in harness.model.payloads (the field declarations are the type table)
_RECORD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "error": (dict, type(None)), "eager": (dict, type(None)), "compiled": (dict, type(None)), "metrics": dict,
    "graph_break_reasons": list, "recompile_reasons": list, "notes": list, "logs": dict, "worker": dict,
}


@dataclass(frozen=True, order=True)
class Case:
    """One measurement: workload x scenario x compiler x device x dtype x batch x size.
    `suite` says where the case came from but is not part of its identity, so the same
    case compares across suites and runs."""

    workload: str
    scenario: str
    compiler: str
    device: str
    dtype: str
    batch_size: int
    size: str
    suite: str = ""
    options: tuple[tuple[str, Any], ...] = ()  # workload options (prompt length, ...)

    @property
    def case_id(self) -> str:
        base = f"{self.workload}/{self.scenario}/{self.compiler}/{self.device}/{self.dtype}/bs{self.batch_size}/{self.size}"
        if self.options:
            base += "/" + ",".join(f"{k}={v}" for k, v in self.options)
        return base

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["options"] = dict(self.options)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Case:
        data = dict(_expect(data, dict, "case"))
        for name in _CASE_STR_FIELDS:
            _expect(data[name], str, f"case.{name}")
        _expect(data.get("suite", ""), str, "case.suite")
        options = _expect(data.get("options") or {}, dict, "case.options")
        data["options"] = tuple(sorted(options.items()))
        data["batch_size"] = int(_expect(data["batch_size"], (int, str), "case.batch_size"))
        return cls(**data)


def error_info(kind: str, message: str, phase: str = "unknown", traceback: str = "") -> ErrorInfo:
    """The error block of a failed record, one shape for every producer (worker, runner,
    launchers): `kind` is the exception class or a name for the failure (Timeout, Crash,
    AccuracyError), `phase` where it happened ("unknown" when the parent saw only the end)."""
    return ErrorInfo(type=kind, message=message, traceback=traceback, phase=phase)


# Record fields held as typed payloads, and how a dict given for one becomes its type. A
# producer may hand over a dict (older code, plugins, tests): it is converted on
# assignment, so a Record always holds the types and writes the v1 dicts.
_PAYLOADS: dict[str, Callable[[Any, str], Any]] = {
    "error": ErrorInfo.from_dict, "eager": Timing.from_dict, "compiled": Timing.from_dict, "metrics": Metrics.from_dict,
}


@dataclass
class Record:
    """Everything measured for one case. Raw samples are kept; failures are data."""

    case: Case
    status: str
    error: ErrorInfo | None = None
    eager: Timing | None = None
    compiled: Timing | None = None
    metrics: Metrics = field(default_factory=Metrics)
    graph_break_reasons: list[dict[str, Any]] = field(default_factory=list)
    recompile_reasons: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    worker: dict[str, Any] = field(default_factory=dict)

    def __setattr__(self, name: str, value: Any) -> None:
        convert = _PAYLOADS.get(name)
        if convert is not None and value is not None and not isinstance(value, (ErrorInfo, Timing, Metrics)):
            value = convert(value, f"record.{name}")
        super().__setattr__(name, value)

    @classmethod
    def failure(cls, case: Case, status: str, kind: str, message: str, *, phase: str = "unknown",
                traceback: str = "", **fields: Any) -> Record:
        """A record for a case that produced no measurement (timeout, crash, skip)."""
        return cls(case, status, error=error_info(kind, message, phase=phase, traceback=traceback), **fields)

    @property
    def case_id(self) -> str:
        return self.case.case_id

    def to_dict(self) -> dict[str, Any]:
        """The v1 record object: payloads back to plain dicts, copied (a caller may edit it)."""
        return copy.deepcopy({
            "case": self.case.to_dict(),
            "status": self.status,
            "error": self.error.to_dict() if self.error is not None else None,
            "eager": self.eager.to_dict() if self.eager is not None else None,
            "compiled": self.compiled.to_dict() if self.compiled is not None else None,
            "metrics": dict(self.metrics),
            "graph_break_reasons": self.graph_break_reasons,
            "recompile_reasons": self.recompile_reasons,
            "notes": self.notes,
            "logs": self.logs,
            "worker": self.worker,
            "case_id": self.case_id,
        })

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        data = dict(_expect(data, dict, "record"))
        data.pop("case_id", None)
        data["case"] = Case.from_dict(data["case"])
        if not isinstance(data["status"], str) or data["status"] not in STATUSES:
            raise ValueError(f"unknown status {data['status']!r}")
        for name, types in _RECORD_FIELDS.items():
            if name in data:
                _expect(data[name], types, f"record.{name}")
        _check_record_lists(data)
        return cls(**data)


def _check_record_lists(data: dict[str, Any]) -> None:
    """Types inside the record's lists and logs (the payloads check their own on conversion)."""
    for name in ("graph_break_reasons", "recompile_reasons"):
        for item in data.get(name) or []:
            _expect(item, dict, f"record.{name}[]")
    for note in data.get("notes") or []:
        _expect(note, str, "record.notes[]")
    for stream, text in (data.get("logs") or {}).items():
        _expect(text, str, f"record.logs.{stream}")


@dataclass
class Run:
    run_id: str
    created_at: str
    label: str
    environment: dict[str, Any]
    config: dict[str, Any]
    records: list[Record] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "label": self.label,
            "environment": self.environment,
            "config": self.config,
            "records": [r.to_dict() for r in self.records],
        }

    def record_map(self) -> dict[str, Record]:
        return {r.case_id: r for r in self.records}


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """Write JSON so a reader never sees half a file. NaN/Inf are refused (they are not
    JSON); producers store None instead. Serialised first, so a bad value leaves no file."""
    return write_text_atomic(path, json.dumps(data, indent=1, sort_keys=False, allow_nan=False, default=str))


def _readable(path: str) -> None:
    """mkstemp creates 0600 files; results and reports are meant to be shared (umask decides)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def save_run(run: Run, path: str | Path) -> Path:
    return write_json_atomic(path, run.to_dict())


def _load_v1(data: dict[str, Any]) -> Run:
    environment = _expect(data.get("environment") or {}, dict, "environment")
    for name in _ENV_TEXT_FIELDS:
        _expect(environment.get(name), _TEXT, f"environment.{name}")
    _expect((data.get("config") or {}).get("suite") if isinstance(data.get("config"), dict) else None, _TEXT,
            "config.suite")
    return Run(
        run_id=_expect(data["run_id"], str, "run_id"),
        created_at=str(data["created_at"]),
        label=str(data.get("label") or ""),
        environment=dict(_expect(data.get("environment") or {}, dict, "environment")),
        config=dict(_expect(data.get("config") or {}, dict, "config")),
        records=[Record.from_dict(r) for r in _expect(data.get("records") or [], list, "records")],
        schema_version=1,
    )


# The loader of the current version. Older versions do not get loaders of their own: each
# gets an upgrader in UPGRADERS turning a version-n dict into a version-(n+1) dict, so a
# file of any old version climbs the chain to the current loader. When v2 arrives: add
# `_load_v2`, point LOADERS at it, and add UPGRADERS[1] (v1 dict -> v2 dict); the
# committed v1 files under tests/data/ keep proving that chain.
LOADERS: dict[int, Callable[[dict[str, Any]], Run]] = {1: _load_v1}
UPGRADERS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def _upgrade(data: dict[str, Any], version: int) -> tuple[dict[str, Any], int]:
    while version not in LOADERS and version in UPGRADERS:
        data = UPGRADERS[version](data)
        version += 1
    return data, version


def run_from_dict(data: Any, source: str = "<data>") -> Run:
    if not isinstance(data, dict):
        raise RunFileError(f"{source}: not a compilebench run file (top level is {type(data).__name__}, expected an object)")
    if "schema_version" not in data:
        raise RunFileError(f"{source}: not a compilebench run file (no schema_version); pass a file from results/runs/")
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise RunFileError(f"{source}: schema_version {version!r} is not an integer")
    if version > SCHEMA_VERSION:
        raise RunFileError(
            f"{source}: schema_version {version} is newer than this compilebench understands "
            f"({SCHEMA_VERSION}); upgrade compilebench to read it"
        )
    try:
        data, version = _upgrade(data, version)
        loader = LOADERS.get(version)
        if loader is None:
            supported = sorted({*LOADERS, *UPGRADERS})
            raise RunFileError(f"{source}: schema_version {version} has no loader; supported: {supported}")
        return loader(data)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        if isinstance(exc, RunFileError):
            raise
        raise RunFileError(f"{source}: malformed run file ({type(exc).__name__}: {exc}); re-run or restore the file") from None


def load_run(path: str | Path) -> Run:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RunFileError(f"{path}: no such run file; `compilebench show` lists runs in results/runs/") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RunFileError(f"{path}: cannot be read ({exc})") from None
    if not text.strip():
        raise RunFileError(f"{path}: empty file; it is not a run file (an interrupted write?), re-run the suite")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunFileError(f"{path}: not valid JSON (truncated?) at line {exc.lineno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer over 4300 digits, nesting too deep
        raise RunFileError(f"{path}: not a run file ({type(exc).__name__}: {str(exc)[:200]})") from None
    return run_from_dict(data, str(path))


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Temp file in the same folder, fsync, rename: readers see the old file or the new one,
    never half of one (run files, reports, markdown)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        exc.filename = str(path)  # the error line names the file the user asked for, not our temp name
        raise
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        _readable(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename in (None, tmp):
            exc.filename = str(path)  # a disk-full write names no file: name the one being written
        raise
    return path
