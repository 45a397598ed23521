"""Compile traces per case (`--trace`): a TORCH_TRACE log, capped, and tlparse's HTML.

The runner points `TORCH_TRACE` at `<out>/traces/<run_id>/<case>/` in the worker's
environment, so torch opens the structured log before the worker imports anything. After
the worker exits, the log is capped (`--trace-max-mb`, cut at a line boundary so tlparse can
still read it; the cut is noted) and, when the `tlparse` executable is installed
(`pip install 'compilebench[trace]'`), turned into tlparse's HTML report next to it.

A trace never breaks a run: every problem (no log written, tlparse missing, tlparse failing
or timing out) becomes a note in the record's `metrics.trace` and in `notes`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_TRACE_MAX_MB = 64.0
TLPARSE_TIMEOUT_S = 300.0
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,-]+")


@dataclass(frozen=True)
class TraceSettings:
    """Where a run's traces go and how big one case's log may grow."""

    root: Path  # <out>/traces/<run_id>
    max_bytes: int = int(DEFAULT_TRACE_MAX_MB * (1 << 20))


def trace_settings(out_dir: str | Path, run_id: str, max_mb: float | None = None) -> TraceSettings:
    return TraceSettings(Path(out_dir).resolve() / "traces" / run_id,
                         int((max_mb if max_mb is not None else DEFAULT_TRACE_MAX_MB) * (1 << 20)))


def case_slug(case_id: str) -> str:
    """A folder name for a case id ('mlp/forward/inductor/cpu/...' -> 'mlp__forward__inductor__cpu__...')."""
    return _UNSAFE.sub("_", case_id.replace("/", "__"))[:200]


def trace_env(trace_dir: Path) -> dict[str, str]:
    """Environment for a worker that should write its structured trace into `trace_dir`."""
    trace_dir.mkdir(parents=True, exist_ok=True)
    return {"TORCH_TRACE": str(trace_dir)}


def cap_log(path: Path, max_bytes: int) -> int | None:
    """Cut `path` to at most `max_bytes`, at the last newline before the cap. Returns the
    original size when it was cut, else None."""
    size = path.stat().st_size
    if size <= max_bytes:
        return None
    with open(path, "r+b") as fh:
        fh.seek(max(max_bytes - (1 << 20), 0))
        window = fh.read(max_bytes - fh.tell())
        cut = max_bytes - len(window) + window.rfind(b"\n") + 1 if b"\n" in window else max_bytes
        fh.truncate(cut)
    return size


def tlparse_executable() -> str | None:
    return shutil.which("tlparse")


def run_tlparse(log: Path, out: Path, timeout_s: float = TLPARSE_TIMEOUT_S) -> tuple[Path | None, str | None]:
    """tlparse's HTML for one log: (index.html, None) or (None, why not)."""
    exe = tlparse_executable()
    if exe is None:
        return None, "tlparse is not installed: no HTML report (pip install 'compilebench[trace]' or pip install tlparse)"
    try:
        proc = subprocess.run([exe, str(log), "-o", str(out), "--overwrite", "--no-browser"], capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None, f"tlparse did not finish in {timeout_s:g}s; the raw log is kept"
    except OSError as exc:
        return None, f"tlparse could not run ({exc}); the raw log is kept"
    index = out / "index.html"
    if proc.returncode != 0 or not index.exists():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return None, f"tlparse failed (exit {proc.returncode}: {last}); the raw log is kept"
    return index, None


def _share(path: Path) -> None:
    """torch creates the log 0600; the report that links it is meant to be shared (umask decides)."""
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(path, 0o666 & ~umask)
    except OSError:
        pass


def finish_trace(trace_dir: Path, max_bytes: int, html: bool = True) -> dict[str, Any]:
    """Cap the logs in `trace_dir` and render them; the record's `metrics.trace` block."""
    logs = sorted(trace_dir.glob("*.log")) if trace_dir.is_dir() else []
    info: dict[str, Any] = {"dir": str(trace_dir), "logs": [], "html": None, "notes": []}
    if not logs:
        info["notes"].append("no TORCH_TRACE log was written (the worker may have failed before compiling)")
        return info
    budget = max_bytes
    for log in logs:
        _share(log)
        original = cap_log(log, max(budget, 0))
        kept = log.stat().st_size
        budget -= kept
        entry = {"file": str(log), "bytes": kept}
        if original is not None:
            entry["truncated_from_bytes"] = original
            info["notes"].append(f"trace {log.name} truncated from {original / 1e6:.1f} MB to {kept / 1e6:.1f} MB "
                                 f"(per-case cap {max_bytes / (1 << 20):g} MiB, --trace-max-mb)")
        info["logs"].append(entry)
    info["bytes"] = sum(e["bytes"] for e in info["logs"])
    info["truncated"] = any("truncated_from_bytes" in e for e in info["logs"])
    if html:
        main_log = max(logs, key=lambda p: p.stat().st_size)  # one per process; the worker's is the big one
        index, why = run_tlparse(main_log, trace_dir / "tlparse")
        info["html"] = str(index) if index else None
        if why:
            info["notes"].append(why)
    return info


def attach_trace(record: Any, trace_dir: Path, max_bytes: int, key: str = "trace") -> None:
    """Finish the case's trace and put it in the record; never raises (failures are notes)."""
    try:
        info = finish_trace(trace_dir, max_bytes)
    except Exception as exc:  # noqa: BLE001 - a trace must never break a run
        info = {"dir": str(trace_dir), "logs": [], "html": None, "notes": [f"trace post-processing failed: {exc}"]}
    record.metrics[key] = info
    record.notes.extend(f"{key}: {n}" for n in info["notes"])
