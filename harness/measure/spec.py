"""What a worker process is asked to do: one typed spec in (`WorkerSpec`), one JSON result out.

The manager side (harness/run/runner.py: `make_spec`, `run_task`) builds a WorkerSpec and
hands it to the one isolation path; the worker (harness/measure/worker.py `main`) reads it
back and runs its task. `task = "case"` measures one Case and writes a Record; any other
task names a function `module:function` inside the harness (a compile-lifecycle step, a
shape-sweep policy, ...) that takes `payload` and returns a JSON-able dict, its failures as
data. A new kind of measurement is a new task, never a new way of starting a process
(pyperf's shape: one manager, one worker, tasks).

Dicts exist only at the process boundary: `to_dict`/`from_dict` (the JSON keeps the v1 key
names, `limits.max_memory_bytes` included, so older readers of a spec file still work).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from compiler import CompilerConfig
from harness.model.schema import Case, write_json_atomic

CASE_TASK = "case"
# set by a fork server in a case it forks (harness/run/forkserver.py own_inherited_pages): JSON of
# the copy-on-write pages it made its own before the worker started; the record keeps it
OWNED_PAGES_ENV = "COMPILEBENCH_OWNED_PAGES"


class TaskError(ValueError):
    """A spec that names no task this worker can run."""


@dataclass(frozen=True)
class WorkerSpec:
    task: str = CASE_TASK
    case: Case | None = None
    compiler: CompilerConfig | None = None
    policy: Mapping[str, Any] = field(default_factory=dict)  # StopPolicy fields
    workload_modules: tuple[str, ...] = ()
    workload_files: tuple[str, ...] = ()
    isa_cache_dir: str | None = None
    seed: int = 0
    max_memory_bytes: int | None = None  # RLIMIT_AS of a CPU case (harness/run/isolation.py)
    warm_compile: bool = False  # the runner runs a second, compile-only process after a good case
    mode: str | None = None  # "warm_compile": that second process
    probe: bool = True  # the machine-speed probe, before and after the timed rounds
    preload: bool = True  # may start from a preloaded fork server (a cold-start row may not)
    payload: Mapping[str, Any] = field(default_factory=dict)  # a non-case task's input

    @property
    def compile_only(self) -> bool:
        return self.mode == "warm_compile"

    def with_mode(self, mode: str | None) -> WorkerSpec:
        return replace(self, mode=mode)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task": self.task, "case": self.case.to_dict() if self.case else None,
            "compiler": self.compiler.to_dict() if self.compiler else None, "policy": dict(self.policy),
            "workload_modules": list(self.workload_modules), "workload_files": list(self.workload_files),
            "isa_cache_dir": self.isa_cache_dir, "seed": self.seed, "limits": {"max_memory_bytes": self.max_memory_bytes},
            "warm_compile": self.warm_compile, "probe": self.probe, "preload": self.preload, "payload": dict(self.payload),
        }
        if self.mode is not None:
            out["mode"] = self.mode
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerSpec:
        known = {f.name for f in fields(cls)}
        kw: dict[str, Any] = {k: v for k, v in data.items() if k in known and v is not None}
        if isinstance(kw.get("case"), Mapping):
            kw["case"] = Case.from_dict(dict(kw["case"]))
        if isinstance(kw.get("compiler"), Mapping):
            kw["compiler"] = CompilerConfig.from_dict(dict(kw["compiler"]))
        for key in ("workload_modules", "workload_files"):
            kw[key] = tuple(kw.get(key, ()))
        limit = (data.get("limits") or {}).get("max_memory_bytes")
        if limit:
            kw["max_memory_bytes"] = int(limit)
        return cls(**kw)

    @classmethod
    def coerce(cls, spec: WorkerSpec | Mapping[str, Any]) -> WorkerSpec:
        return spec if isinstance(spec, WorkerSpec) else cls.from_dict(spec)

    def write(self, path: str | Path) -> Path:
        return write_json_atomic(path, self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> WorkerSpec:
        return cls.from_dict(json.loads(Path(path).read_text()))


def task_function(name: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The function a non-case task names (`harness.experiments.shapes:run_policy_task`); only
    the harness's own modules, imported by name so the worker's layer imports nothing above it."""
    module, _, func = name.partition(":")
    if not module.startswith("harness.") or not func:
        raise TaskError(f"worker task {name!r} is not 'harness.<module>:<function>'")
    return getattr(importlib.import_module(module), func)
