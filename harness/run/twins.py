"""Eager figures from a compiled twin: an `eager` case that a compiled case already measures.

Every compiled case measures eager and compiled interleaved in its own process (its eager
block, speedup and eager throughput are that process's). A planned `eager` case of the same
workload, scenario, device, dtype, batch size, size and options re-measures eager in another
process; where that adds nothing, its record is derived from the twin's instead, so eager and
compiled latency of a report row come from one process and a GPU suite saves a worker per
workload and scenario. Where it does add something, the `eager` case keeps its own process:

- on a device whose memory figure is not the device allocator's peak (the CPU: the process's
  RSS high-water mark over the timed rounds, one read shared by both variants, so inside a
  compiled process the eager figure is the compiled peak, the compile's residue included:
  mlp-classic forward tiny 373.1 MiB there against 298.4 MiB in an eager case's own process,
  25% higher forked, 375.1 against 297.5 MiB, 26%, spawned; docs/RESULTS.md "Eager figures";
  MPS: a sampled lower bound);
- for a scenario whose compiled variant holds state of its own (train steps:
  `harness.model.scenarios.compiled_holds_state`), which the eager peak in the twin includes;
  except where the compiled variant builds that state only after the eager first call
  (decode's second static KV cache: `compiled_state_after_first_call`,
  `Prepared.build_compiled_state`): there the eager peak comes from the twin's eager first
  call (the worker's `eager_first_call_memory`, `compiled_state_deferred` true), when the two
  processes still hold the same bytes, plus the first-call output the worker keeps, which the
  eager case's own later reads hold; any later read in the twin includes that state;
- with `--no-eager-from-twin` (`--shard` keeps a derived case in its twin's shard:
  harness/run/shard.py select_shard `attach`);
- when the twin ends without a usable eager block (failed, crashed, timed out, skipped): the
  eager case then runs in its own process after all, so no figure is lost.

The twin is `inductor` when planned, else the first compiled config in plan order whose
process measures eager as the eager case's would (`_default_twin_ok`: not a regional or
in-place config, whose eager variant runs through the compiled wrappers under force_eager,
nor freezing, whose frozen graph holds weights of its own). One by
one, the runner runs a derived case right after its twin (`TwinPlan.order`); with `--gpus`
the pool holds it until its twin is back (multigpu.GpuPool `held`). The
evidence (H200, one process per case) and the rule: docs/RESULTS.md, "Eager figures".
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.measure.worker import EAGER_FIRST_CALL_MEMORY_KEY, MEMORY_ROUNDS_KEY, WARMUP_KEY
from harness.model.payloads import CompileStats, Speedup
from harness.model.schema import Case, Record

# memory figures that are a per-process device allocator peak (CUDA, ROCm, XPU): the eager
# variant's peak in a compiled process equals its own process's where the compiled variant
# shares the weights and holds nothing of its own (the H200 table in docs/RESULTS.md)
DERIVABLE_MEMORY_KINDS = frozenset({"device_allocator"})
# test-only: "1" lets CPU cases derive too, so the whole path runs end to end on a CPU box
TEST_ON_CPU_ENV = "COMPILEBENCH_TEST_EAGER_FROM_TWIN_ON_CPU"
PREFERRED_TWIN = "inductor"
DERIVED_START = "derived"  # record.worker["start"] of a derived record
FALLBACK_NOTE = "eager case run in its own process"  # the note of a planned derivation that could not be
EAGER_VARIANT = "eager"  # the eager variant's name in a worker's per-variant figures (harness/measure/worker.py)

# metrics of the twin that describe its compiled variant, never the eager one
_COMPILED_ONLY = frozenset(f.name for group in (CompileStats, Speedup) for f in group.declared()) | {
    "phase_s", "eager_throughput", "latency_s", "throughput", "accuracy", "quiet_wait_s",
}
_COMPILED_ONLY_PREFIXES = ("compile", "warm_", "trace", "graph_break", "outside_graphs", "cache", "ops_per_graph",
                           "structured_logging", "isa_probe", "cpu_vec_isa")  # the ISA probe: Inductor's, CPU only
# notes a compiled case adds after the scenario's own (harness/measure/worker.py, compiler/effects.py) and the
# runner adds about its compile (run/traces.py: "trace: ...", "warm_trace: ..."; the cache folder's)
_COMPILED_NOTE_PREFIXES = ("CUDA graphs were skipped", "mode=", "regional:", "compiled in place",
                           "graph-break cost pass", "warm compile", "trace: ", "warm_trace: ",
                           "part of this case's Inductor cache")


def group_key(case: Case) -> tuple[Any, ...]:
    """Everything of a case but its compiler: an eager case and its twins share it."""
    return (case.workload, case.scenario, case.device, case.dtype, case.batch_size, case.size, case.options)


def device_memory_kind(device: str) -> str:
    from harness.measure.devices import parse_device

    return parse_device(device).memory_kind


def _default_is_eager(compiler: str) -> bool:
    from compiler import get_compiler

    return get_compiler(compiler).is_eager


def _default_twin_ok(compiler: str) -> bool:
    """Whether a compiled config's process measures eager as an eager case's would. Not
    regional or in-place configs: they compile the very module the eager variant calls,
    which then runs under force_eager through the compiled wrappers (8 compiled Linear
    blocks under force_eager took 2.1x the plain module's time on CPU). Not freezing: the
    frozen graph holds weights of its own (a 32 MiB MLP on CPU kept 37.7 MiB more resident
    after a compile with freezing than without), which the eager peak would include."""
    from compiler import get_compiler

    config = get_compiler(compiler)
    return not (config.regional or config.inplace or config.options_dict().get("freezing"))


def _default_state_after_first_call(scenario: str) -> bool:
    from harness.model.scenarios import compiled_state_after_first_call

    return compiled_state_after_first_call(scenario)


def _default_stateful(scenario: str) -> bool:
    from harness.model.scenarios import compiled_holds_state, get_scenario

    try:
        get_scenario(scenario)  # imports the built-in scenario modules (their declarations)
    except ValueError:
        return True
    return compiled_holds_state(scenario)


@dataclass
class TwinPlan:
    """Which eager cases are derived from which twin (`sources`: eager case id -> twin case
    id), why derivation is off when it is (`off`), and what happened (`fell_back`)."""

    sources: dict[str, str] = field(default_factory=dict)
    # eager case ids whose peak memory comes from the twin's eager first call (a stateful
    # scenario whose compiled state is built after that call: see the module docstring)
    first_call_peak: set[str] = field(default_factory=set)
    off: str | None = None
    fell_back: dict[str, str] = field(default_factory=dict)  # eager case id -> why it ran itself

    def order(self, cases: Sequence[Case]) -> list[Case]:
        """The run order: each derived eager case right after its twin (its record is then in
        hand), every other case in plan order. The run file still lists plan order."""
        after: dict[str, list[Case]] = {}
        for case in cases:
            if case.case_id in self.sources:
                after.setdefault(self.sources[case.case_id], []).append(case)
        out: list[Case] = []
        for case in cases:
            if case.case_id in self.sources:
                continue
            out.append(case)
            out.extend(after.get(case.case_id, []))
        return out

    def take(self, case: Case, finished: Mapping[str, Record], clock: Callable[[], float] = time.monotonic
             ) -> Record | None:
        """The derived record of `case`, or None when it must run in its own process (not
        planned for derivation, or its twin gave no usable eager block: noted in fell_back)."""
        twin_id = self.sources.get(case.case_id)
        if twin_id is None:
            return None
        started = clock()
        twin = finished.get(twin_id)
        first_call = case.case_id in self.first_call_peak
        why = unusable(twin, first_call_peak=first_call)
        if why is not None:
            self.fell_back[case.case_id] = f"twin {twin_id} {why}"
            return None
        assert twin is not None
        try:
            return derive(case, twin, wall_s=clock() - started, first_call_peak=first_call)
        except Exception as exc:  # noqa: BLE001 - a twin record the derivation cannot read: the case runs itself
            self.fell_back[case.case_id] = f"twin {twin_id} could not be derived from ({type(exc).__name__}: {exc})"[:300]
            return None

    def fallback_note(self, case: Case) -> str | None:
        why = self.fell_back.get(case.case_id)
        return None if why is None else f"{FALLBACK_NOTE}: {why}"

    def config(self, records: Sequence[Record] = ()) -> dict[str, Any]:
        """The run file's `config.eager_from_twin`: the plan, and from the records (a resumed
        run's earlier ones included) how many were derived and which ran after all, and why."""
        by_id = {r.case_id: r for r in records}
        own: dict[str, str] = {}
        for eager_id in self.sources:
            record = by_id.get(eager_id)
            if record is None or is_derived(record):
                continue
            notes = [n for n in record.notes if n.startswith(FALLBACK_NOTE)]
            own[eager_id] = notes[0][len(FALLBACK_NOTE) + 2:] if notes else self.fell_back.get(eager_id, "")
        return {"enabled": self.off is None, "off": self.off, "pairs": dict(self.sources),
                "derived": sum(1 for r in records if is_derived(r)), "ran_own_process": own}


def plan_twins(cases: Sequence[Case], *, enabled: bool = True,
               memory_kind: Callable[[str], str] = device_memory_kind,
               is_eager: Callable[[str], bool] = _default_is_eager,
               stateful: Callable[[str], bool] = _default_stateful,
               env: Mapping[str, str] | None = None,
               twin_ok: Callable[[str], bool] = _default_twin_ok,
               state_after_first_call: Callable[[str], bool] = _default_state_after_first_call) -> TwinPlan:
    """The derivations this plan allows (the module docstring has the rule)."""
    if not enabled:
        return TwinPlan(off="--no-eager-from-twin")
    on_cpu = (os.environ if env is None else env).get(TEST_ON_CPU_ENV) == "1"
    twins: dict[tuple[Any, ...], Case] = {}
    for case in cases:
        if is_eager(case.compiler) or not twin_ok(case.compiler):
            continue
        key = group_key(case)
        if key not in twins or (case.compiler == PREFERRED_TWIN and twins[key].compiler != PREFERRED_TWIN):
            twins[key] = case
    sources: dict[str, str] = {}
    first_call: set[str] = set()
    for case in cases:
        twin = twins.get(group_key(case))
        if twin is None or not is_eager(case.compiler):
            continue
        # the first-call read exists on allocator devices only (the worker's eager_first_call)
        kind = memory_kind(case.device)
        deferred = stateful(case.scenario) and state_after_first_call(case.scenario)
        if stateful(case.scenario) and not (deferred and kind in DERIVABLE_MEMORY_KINDS):
            continue
        if kind in DERIVABLE_MEMORY_KINDS or (on_cpu and kind == "process_rss"):
            sources[case.case_id] = twin.case_id
            if deferred:
                first_call.add(case.case_id)
    return TwinPlan(sources=sources, first_call_peak=first_call)


def unusable(twin: Record | None, first_call_peak: bool = False) -> str | None:
    """Why a twin's record cannot give the eager figures (None: it can); `first_call_peak`:
    the peak must come from its eager first call's read."""
    if twin is None:
        return "has no record (not run)"
    if twin.status != "ok":
        return f"ended {twin.status}"
    eager = twin.eager
    if eager is None or not eager.samples_s or not eager.median:  # a zero median gives no latency either
        return "has no eager block"
    if eager.peak_memory_bytes is None:
        return "has no eager peak memory"
    if first_call_peak and _first_call_memory(twin) is None:
        return ("has no eager first-call peak read before its compiled state was built, with the bytes of "
                "the output it keeps (a worker from before 2026-12-03, no allocator, or a scenario that built "
                "that state at prepare)")
    return None


def _first_call_memory(twin: Record) -> tuple[int, int] | None:
    """The eager case's peak and rise as the twin's eager first call gives them, when its
    worker read them: that call's peak plus the output the worker keeps from it, which every
    later read holds and an eager case's own rounds therefore see (H200, 2026-12-02: the first
    call alone read exactly that much lower, 257,024 B for llama-3.1-8b decode, 512,512 B for
    gemma-2b: one [1, vocab] logits row and the token ids, docs/RESULTS.md Eager figures). The
    rise is the first call's as it is: a later read's baseline holds that output too."""
    read = (twin.metrics or {}).get(EAGER_FIRST_CALL_MEMORY_KEY)
    if not isinstance(read, Mapping) or read.get("compiled_state_deferred") is not True:
        return None
    peak, delta, held = read.get("peak_bytes"), read.get("delta_bytes"), read.get("held_output_bytes")
    if not all(isinstance(v, int) for v in (peak, delta, held)):
        return None
    return peak + held, delta


def is_derived(record: Record) -> bool:
    source = (record.metrics or {}).get("eager_source")
    return isinstance(source, Mapping) and bool(source.get("from_case"))


def derive(case: Case, twin: Record, wall_s: float = 0.0, first_call_peak: bool = False) -> Record:
    """The eager case's record from its twin's: the twin's eager block and the figures the
    eager case reports (latency, throughput, the scenario's eager_* figures unprefixed, the
    process's machine probe and contention), the case's own identity, and where it came from.
    With `first_call_peak` the block's peak memory is the twin's eager first call's, read
    before its compile, plus the output kept from it (`memory_source` "first_call")."""
    eager = twin.eager
    assert eager is not None and eager.median
    if first_call_peak:
        read = _first_call_memory(twin)
        if read is None:
            raise ValueError("no eager first-call peak")
        eager = eager.with_fields(peak_memory_bytes=read[0], peak_memory_delta_bytes=read[1], memory_source="first_call")
    metrics = _eager_metrics(twin.metrics or {})
    units = metrics.get("units_per_call")
    metrics["latency_s"] = eager.median
    metrics["throughput"] = (float(units) / eager.median) if units else None
    metrics["eager_source"] = {"from_case": twin.case_id, "twin_pid": (twin.worker or {}).get("pid"),
                               "twin_wall_s": (twin.worker or {}).get("wall_s")}
    if first_call_peak:  # the peak is the first call's: the twin's rounds held the compiled state, not this case's
        metrics.pop(MEMORY_ROUNDS_KEY, None)
    elif isinstance(metrics.get(MEMORY_ROUNDS_KEY), Mapping):
        metrics[MEMORY_ROUNDS_KEY] = eager_rounds(metrics[MEMORY_ROUNDS_KEY], twin.case_id)
    if isinstance(metrics.get(WARMUP_KEY), Mapping):
        metrics[WARMUP_KEY] = eager_warmup(metrics[WARMUP_KEY], twin.case_id)
    note = (f"eager figures from {twin.case_id}: its eager block, measured interleaved with the compiled variant "
            "in that case's process; not run in a process of its own (docs/RESULTS.md, Eager figures)")
    if first_call_peak:
        note += ("; peak memory from that process's eager first call, before its compile, plus the output "
                 "kept from that call (held at every later read)")
    notes = [note] + [n for n in twin.notes if not n.startswith(_COMPILED_NOTE_PREFIXES)]
    return Record(case=case, status="ok", eager=eager, compiled=None, metrics=metrics, notes=notes,
                  worker={"start": DERIVED_START, "from_case": twin.case_id, "wall_s": round(wall_s, 6)})


def eager_rounds(rounds: Mapping[str, Any], twin_id: str) -> dict[str, Any]:
    """A derived record's `memory_rounds`: the twin's reads of its eager variant only (the
    rounds the copied eager peak came from), stamped `from_case` so no reader takes them for
    rounds the eager case ran itself; the compiled variant's reads are dropped."""
    return _eager_variant_only(rounds, ("reads", "spent_s"), twin_id)


def eager_warmup(warmup: Mapping[str, Any], twin_id: str) -> dict[str, Any]:
    """A derived record's `warmup`: the twin's rounds (chosen from both variants' first round,
    as that process made them) and its eager variant's calls only, stamped `from_case`."""
    return _eager_variant_only(warmup, ("calls_s",), twin_id)


def _eager_variant_only(block: Mapping[str, Any], per_variant: Sequence[str], twin_id: str) -> dict[str, Any]:
    """`block` with each per-variant entry of `per_variant` cut to the eager variant's, plus `from_case`."""
    out = {k: v for k, v in block.items() if k not in per_variant}
    for key in per_variant:
        values = block.get(key)
        if isinstance(values, Mapping):
            out[key] = {name: v for name, v in values.items() if name == EAGER_VARIANT}
    out["from_case"] = twin_id
    return out


def _eager_metrics(twin: Mapping[str, Any]) -> dict[str, Any]:
    """The twin's metrics as the eager case has them: compiled-only figures dropped, each
    scenario figure of the measured (compiled) variant replaced by its `eager_` twin."""
    out: dict[str, Any] = {}
    for key, value in twin.items():
        if key in _COMPILED_ONLY or key.startswith(_COMPILED_ONLY_PREFIXES) or key.startswith("eager_"):
            continue
        if "speedup" in key or "compiled" in key:
            continue
        out[key] = value
    for key, value in twin.items():
        base = key[len("eager_"):]
        if key == EAGER_FIRST_CALL_MEMORY_KEY:
            out[key] = value  # the eager variant's own read: kept under its name
        elif key.startswith("eager_") and key not in _COMPILED_ONLY and "compiled" not in base:
            out[base] = value
    return out
