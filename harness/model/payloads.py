"""Typed payloads of a Record: the timing block per variant, its memory figures, the error
block, and the metrics groups.

A run file stores these as JSON objects (schema v1). They become these types when a record
is loaded or built (schema.Record converts) and dicts again only when it is written, so
the rest of the harness reads attributes (`record.compiled.median`, `record.error.phase`).
Two promises keep older code and newer producers working:
- every payload is also a read-only Mapping with the v1 keys (`block["samples_s"]`,
  `.get`, `in`, iteration), so code written against the dicts still reads them;
- keys this version does not declare ride along in `extra`, and a loaded payload writes
  back the keys it was read with, in their order: a v1 file loads and saves unchanged.
The field declarations double as the load-time type checks (`check=` below): a damaged
file fails on load with the field's name, not later in a table or a compare.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

NUMBER = (int, float, type(None))
TEXT = (str, type(None))
OBJECT = (dict, type(None))
LIST = (list, type(None))

P = TypeVar("P", bound="Payload")


def expect(value: Any, types: type | tuple[type, ...], what: str) -> Any:
    """Type check for loaded data: a wrong type is a ValueError naming the field (the
    loader turns it into a RunFileError), never a TypeError/AttributeError later on."""
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise ValueError(f"{what} must be {_type_names(types)}, not a boolean")
    if not isinstance(value, types):
        raise ValueError(f"{what} must be {_type_names(types)}, not {type(value).__name__}")
    return value


def _type_names(types: type | tuple[type, ...]) -> str:
    names = {"NoneType": "null", "dict": "an object", "list": "a list", "str": "a string", "int": "an integer"}
    return " or ".join(names.get(t.__name__, t.__name__) for t in (types if isinstance(types, tuple) else (types,)))


def checked(types: tuple[type, ...], default: Any = None) -> Any:
    """A payload field whose loaded value must be one of `types` (None allowed where listed)."""
    return field(default=default, metadata={"check": types})


@dataclass(frozen=True, eq=False)
class Payload(Mapping[str, Any]):
    """Base of the typed payloads: attributes for code, Mapping access with the v1 keys."""

    # keys this version does not know (newer producers, plugins): carried, never dropped
    extra: Mapping[str, Any] = field(default_factory=dict, kw_only=True, repr=False)
    # the keys a loaded payload was read with, in order (None: built here, write them all)
    source_keys: tuple[str, ...] | None = field(default=None, kw_only=True, repr=False)

    BOOKKEEPING: ClassVar[tuple[str, ...]] = ("extra", "source_keys")

    @classmethod
    def declared(cls) -> tuple[dataclasses.Field, ...]:
        return tuple(f for f in dataclasses.fields(cls) if f.name not in cls.BOOKKEEPING)

    @classmethod
    def from_dict(cls: type[P], data: Mapping[str, Any], where: str = "") -> P:
        """The payload of a v1 object; `where` names it in type errors (record.eager, ...)."""
        if isinstance(data, cls):
            return data
        data = expect(data, (dict, Mapping), where or cls.__name__)
        names = {f.name for f in cls.declared()}
        for f in cls.declared():
            if f.name in data and "check" in f.metadata:
                expect(data[f.name], f.metadata["check"], f"{where}.{f.name}")
        known = {name: data[name] for name in names if name in data}
        extra = {k: v for k, v in data.items() if k not in names}
        return cls(**known, extra=extra, source_keys=tuple(data))

    def to_dict(self) -> dict[str, Any]:
        """The v1 object: the keys it was loaded with (in order), then anything added since."""
        values = {f.name: getattr(self, f.name) for f in self.declared()}
        if self.source_keys is not None:
            values = {k: v for k, v in values.items() if k in self.source_keys}
        values.update(self.extra)
        if self.source_keys is None:
            return values
        ordered = {k: values[k] for k in self.source_keys if k in values}
        ordered.update((k, v) for k, v in values.items() if k not in ordered)
        return ordered

    def with_fields(self: P, **changes: Any) -> P:
        """A copy with some keys changed or added (declared ones by attribute, others in extra)."""
        names = {f.name for f in self.declared()}
        extra = {**self.extra, **{k: v for k, v in changes.items() if k not in names}}
        known = {k: v for k, v in changes.items() if k in names}
        keys = self.source_keys
        if keys is not None:
            keys = keys + tuple(k for k in known if k not in keys)
        return dataclasses.replace(self, **known, extra=extra, source_keys=keys)

    def without(self: P, *keys: str) -> P:
        """A copy without some keys (they are not written back either)."""
        names = {f.name for f in self.declared()}
        kept = tuple(k for k in (self.source_keys if self.source_keys is not None else tuple(self)) if k not in keys)
        return dataclasses.replace(self, **{k: None for k in keys if k in names},
                                   extra={k: v for k, v in self.extra.items() if k not in keys}, source_keys=kept)

    # Mapping access with the v1 keys, for code written against the dicts
    def __getitem__(self, key: str) -> Any:
        data = self.to_dict()
        return data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __setitem__(self, key: str, value: Any) -> None:
        # the v1 dicts took item assignment; say how to do it now instead of a bare TypeError
        raise TypeError(f"{type(self).__name__} is frozen: assign a copy, e.g. "
                        f"record.compiled = record.compiled.with_fields({key}=...)")

    def __delitem__(self, key: str) -> None:
        raise TypeError(f"{type(self).__name__} is frozen: assign a copy, e.g. "
                        f"record.compiled = record.compiled.without({key!r})")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"


@dataclass(frozen=True, eq=False, repr=False)
class ErrorInfo(Payload):
    """Why a case has no (or no valid) measurement. `type` is the exception class or a name
    for the failure (Timeout, Crash, AccuracyError); `phase` is where it happened ("unknown"
    when the parent saw only the end)."""

    type: str | None = checked(TEXT)
    message: str | None = checked(TEXT)
    traceback: str | None = checked(TEXT)
    phase: str | None = checked(TEXT)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "record.error") -> ErrorInfo:
        return super().from_dict(data, where)


@dataclass(frozen=True, eq=False, repr=False)
class Memory(Payload):
    """Peak memory of a variant: bytes, the rise over the baseline before the calls, what
    was measured (allocator peak, host RSS high-water mark), and where it was read
    (`memory_source`: "rounds", in the measure phase's calls: a GPU's last warm-up call, the
    CPU's timed rounds; "pass", a pass of its own; None
    in files written before the field existed, which all came from a pass)."""

    peak_memory_bytes: int | None = checked(NUMBER)
    peak_memory_delta_bytes: int | None = checked(NUMBER)
    memory_kind: str | None = checked(TEXT)
    memory_source: str | None = checked(TEXT)


@dataclass(frozen=True, eq=False, repr=False)
class Timing(Payload):
    """One variant (eager or compiled): raw per-call samples, the first (compiling) call,
    the calls batched per sample, the summary statistics, and its peak memory. On disk the
    memory figures sit flat beside the samples (v1), here they are `memory`."""

    samples_s: list[float] | None = checked(LIST)
    first_call_s: float | None = checked(NUMBER)
    inner_loops: int | None = None
    summary: dict[str, Any] | None = checked(OBJECT)
    peak_memory_bytes: int | None = checked(NUMBER)
    peak_memory_delta_bytes: int | None = checked(NUMBER)
    memory_kind: str | None = None
    memory_source: str | None = checked(TEXT)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "record.timing") -> Timing:
        block = super().from_dict(data, where)
        for value in block.samples_s or []:
            expect(value, NUMBER, f"{where}.samples_s[]")
        return block

    @classmethod
    def measured(cls, samples_s: list[float], first_call_s: float | None, inner_loops: int, summary: dict[str, Any],
                 memory: Memory) -> Timing:
        return cls(samples_s=samples_s, first_call_s=first_call_s, inner_loops=inner_loops, summary=summary,
                   **{f.name: getattr(memory, f.name) for f in Memory.declared()})

    @property
    def memory(self) -> Memory:
        return Memory(**{f.name: getattr(self, f.name) for f in Memory.declared()})

    @property
    def median(self) -> float | None:
        return (self.summary or {}).get("median")


# ---- metrics groups: typed views over the flat v1 `metrics` object ----


@dataclass(frozen=True, eq=False, repr=False)
class Throughput(Payload):
    """What a call achieves: latency (median of the measured variant) and units per second."""

    latency_s: float | None = checked(NUMBER)
    throughput: float | None = checked(NUMBER)
    throughput_unit: str | None = checked(TEXT)
    units_per_call: float | None = None
    eager_throughput: float | None = checked(NUMBER)


@dataclass(frozen=True, eq=False, repr=False)
class Speedup(Payload):
    """Compiled against eager in the same process: ratio of medians with its CI, and memory."""

    speedup: float | None = checked(NUMBER)
    speedup_ci_low: float | None = checked(NUMBER)
    speedup_ci_high: float | None = checked(NUMBER)
    compression_ratio: float | None = checked(NUMBER)


@dataclass(frozen=True, eq=False, repr=False)
class CompileStats(Payload):
    """What the compiler did: cold compile time and its stages, graphs, breaks, recompiles."""

    compile_time_s: float | None = checked(NUMBER)
    compile_time_total_s: float | None = None
    compile_breakdown_s: dict[str, float] | None = None
    graph_breaks: int | None = checked(NUMBER)
    unique_graph_breaks: int | None = checked(NUMBER)
    graphs: int | None = checked(NUMBER)
    recompiles: int | None = checked(NUMBER)
    recompiles_during_warmup: int | None = None
    recompiles_steady_state: int | None = None
    frames_total: int | None = None
    frames_ok: int | None = None
    frames_fell_back: int | None = None
    calls_captured: int | None = None
    cudagraph_skips: int | None = None
    compiled_frames: int | None = None
    cache: dict[str, Any] | None = None
    autotune: dict[str, Any] | None = None


@dataclass(frozen=True, eq=False, repr=False)
class Accuracy(Payload):
    """Compiled vs eager outputs: pass/fail/skipped and why, plus the comparer's figures."""

    status: str | None = checked(TEXT)
    reason: str | None = None


METRIC_GROUPS: tuple[type[Payload], ...] = (Throughput, Speedup, CompileStats)


class Metrics(dict[str, Any]):
    """The flat v1 metrics object of a record, with typed views of its groups.

    It stays a dict on purpose: the worker, scenarios and launchers add keys as they learn
    them (phase times, scenario figures, probes), and readers use `metrics.get(...)`. The
    groups are frozen views built on read: `metrics.compile.graph_breaks`."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "record.metrics") -> Metrics:
        metrics = cls(expect(data, (dict, Mapping), where))
        for group in METRIC_GROUPS:
            group.from_dict(metrics, where)
        expect(metrics.get("accuracy"), OBJECT, f"{where}.accuracy")
        Accuracy.from_dict(metrics.get("accuracy") or {}, f"{where}.accuracy")
        return metrics

    def _group(self, group: type[P]) -> P:
        return group(**{f.name: self.get(f.name) for f in group.declared()})

    @property
    def throughput_group(self) -> Throughput:
        return self._group(Throughput)

    @property
    def speedup_group(self) -> Speedup:
        return self._group(Speedup)

    @property
    def compile(self) -> CompileStats:
        return self._group(CompileStats)

    @property
    def accuracy(self) -> Accuracy:
        return Accuracy.from_dict(self.get("accuracy") or {}, "record.metrics.accuracy")
