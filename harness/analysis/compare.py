"""Compare two sets of runs case by case and decide, per metric, whether head regressed.

A verdict needs two things (a gate that cries wolf gets switched off, one that misses 5%
lets it ship):
  * significance from the raw samples: a two-sided Mann-Whitney U test (scipy) AND a
    bootstrap confidence interval on the ratio of medians (head / base) that excludes 1;
  * an effect beyond the metric's threshold (harness/analysis/thresholds.py).

What a "sample" is depends on how many processes measured the case. One process per side
(a plain `run`): the raw per-call samples, which capture in-process noise only; the
threshold absorbs the process-to-process part, and `compilebench noise` measures it. Four
or more processes per side (`compilebench ab`, 8 rounds by default, or folders of repeated runs): one
median per process, so the test sees the process-to-process noise itself.

Speedup is judged on paired per-round ratios eager_i / compiled_i: the worker interleaves
eager and compiled round by round, so machine drift (a noisy neighbour, clock changes) hits
both halves of a pair alike and cancels in the ratio.

Latency has two controls. The machine-speed probe (harness/measure/probe.py: fixed kernels
timed in every worker between the case's rounds) says how fast the machine was in each
process: when it moved, each process's samples are divided by its probe score, so the
machine's drift is normalised out and the verdict says so (`machine drift` when nothing is
left). Eager, in the same processes, says whether the change is the compiled code's alone:
probe steady (or normalised) and eager moved with latency -> `slower (eager too)`, a real
change in torch or the model, which fails the gate unless `whole_model = "warn"`. With no
usable probe (none recorded, too few samples, or a torch-bound probe across two torch
builds, which would divide the torch change under test out) the same is `slower (eager
too; no probe)`: machine and torch look alike there, so it warns instead of failing.

This module judges cases and whole runs; the pieces it builds on are their own modules:
verdicts.py (the vocabulary), metrics.py (the metric table and sample extraction),
significance.py (the statistics), probe_norm.py (machine-probe normalisation),
judge_metric.py (one metric of one case) and comparison.py (the result types). Their public
names stay importable from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.analysis.comparison import CaseResult, Comparison, GateDecision, MetricResult
from harness.analysis.judge_metric import PendingTest, judge_metric, resolve_pending
from harness.analysis.metrics import (
    METRICS,
    Metric,
    as_mapping,
    clean_samples,
    compile_time_value,
    judges_compile_cpu_seconds,
    scalar_value,
    timing_samples,
)
from harness.analysis.probe_norm import (
    MachineProbe,
    machine_probe,
    probe_factors,
    probe_version_note,
    torch_bound_note,
)
from harness.analysis.significance import (
    BOOTSTRAP_RESAMPLES,
    MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST,
    bootstrap_ratio_cis,
    bootstrap_ratio_of_medians,
    median_change,
    minimum_detectable_change,
)
from harness.analysis.thresholds import (
    CONTENDED_WARN,
    DEFAULT_PROBE_MOVED,
    MISSING_WARN,
    STILL_FAILING_FAIL,
    WHOLE_MODEL_WARN,
    ThresholdConfig,
    Thresholds,
)
from harness.analysis.verdicts import DEFAULT_FAIL_ON, VERDICT_ORDER, Verdict, worst
from harness.measure.contention import contention_block
from harness.measure.probe import MIN_SAMPLES as MIN_PROBE_SAMPLES
from harness.model.schema import TORCH_FIELDS, Record, Run, RunFileError, torch_builds_differ

__all__ = [
    # this module's own
    "DRIFT_SHARE", "CONTENDED_METRICS", "HARDWARE_FIELDS", "TORCH_FIELDS", "COMPILER_FIELDS", "EnvironmentMismatchError", "NoiseTable",
    "compare_case", "compare_runs", "contention_text", "group_records", "environment_mismatches", "describe_side",
    "compile_overlap_mismatch",
    # re-exported: the verdicts and the split-out pieces, where callers always found them
    "Verdict", "VERDICT_ORDER", "DEFAULT_FAIL_ON", "GateDecision", "REGRESSION", "NOW_FAILING", "MISSING", "NOISY", "IMPROVEMENT",
    "NOW_PASSING", "NEW", "UNCHANGED", "STILL_FAILING", "NOT_APPLICABLE", "SLOWER_EAGER_TOO", "FASTER_EAGER_TOO",
    "MACHINE_DRIFT", "SLOWER_EAGER_TOO_NO_PROBE", "EAGER_FASTER", "EAGER_SLOWER",
    "Metric", "METRICS", "timing_samples", "scalar_value", "judges_compile_cpu_seconds", "compile_time_value",
    "MetricResult", "CaseResult", "Comparison", "probe_factors", "MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST",
    "BOOTSTRAP_RESAMPLES", "bootstrap_ratio_of_medians", "bootstrap_ratio_cis", "minimum_detectable_change",
]


# the verdict vocabulary lives in harness/analysis/verdicts.py; these names stay importable
# from here for the code and scripts that always took them from compare
REGRESSION, NOW_FAILING, MISSING, NOISY = Verdict.REGRESSION, Verdict.NOW_FAILING, Verdict.MISSING, Verdict.NOISY
IMPROVEMENT, NOW_PASSING, NEW, UNCHANGED = Verdict.IMPROVEMENT, Verdict.NOW_PASSING, Verdict.NEW, Verdict.UNCHANGED
STILL_FAILING, NOT_APPLICABLE = Verdict.STILL_FAILING, Verdict.NOT_APPLICABLE
SLOWER_EAGER_TOO, FASTER_EAGER_TOO = Verdict.SLOWER_EAGER_TOO, Verdict.FASTER_EAGER_TOO
MACHINE_DRIFT, SLOWER_EAGER_TOO_NO_PROBE = Verdict.MACHINE_DRIFT, Verdict.SLOWER_EAGER_TOO_NO_PROBE
EAGER_FASTER, EAGER_SLOWER = Verdict.EAGER_FASTER, Verdict.EAGER_SLOWER
DRIFT_SHARE = 0.5  # eager moving by this share of a latency change: a whole-model change
# what a contended machine invalidates: the timed samples (counts, accuracy, memory stay judged)
CONTENDED_METRICS = ("latency", "speedup")
# environment fields that make a comparison meaningless when they differ
HARDWARE_FIELDS = ("machine", "cpu_model", "device names")
# the torch build: a probe set that calls torch (probe_uses_torch) is trusted only when they agree
COMPILER_FIELDS = ("torch_version", "torch_git", "torch_cuda", "torch_hip", "packages.triton", "packages.pytorch-triton")


class EnvironmentMismatchError(RunFileError):
    """Base and head ran on different hardware or compiler versions (message names the field)."""


def _status(records: list[Record]) -> str:
    """The case's status on one side: ok only when every process measured it ok."""
    return next((r.status for r in records if r.status != "ok"), "ok")


def _ran(records: list[Record]) -> bool:
    """Whether any process of the side ran the case: `skipped` means it could not (no device,
    a missing dependency), which is neither a pass nor a failure."""
    return any(r.status != "skipped" for r in records)


def _flaky_base(base: list[Record]) -> list[Record] | None:
    """Base's ok processes when only some of them failed (a flaky crash, a killed server): the
    case passed in base, so head is judged against those instead of reading `now passing`,
    which would wave a real regression through. None when base failed in every process."""
    ok = [r for r in base if r.status == "ok"]
    return ok if ok and len(ok) < len(base) else None


def _error_text(records: list[Record]) -> str:
    err = next((r.error for r in records if r.status != "ok" and r.error), None) or {}
    return f"{err.get('type', '')}: {err.get('message', '')}" if err else ""


def still_failing_error(base: list[Record], head: list[Record]) -> str:
    """A still-failing case's error line: head's, and base's too where it differs (a case that
    fails another way now may be this change's doing, though the gate passes it)."""
    now, before = _error_text(head), _error_text(base)
    text = now if not before or before == now else f"{now} (base failed otherwise: {before})"
    return text[:300]


def _judge_case(case_id: str, base: list[Record], head: list[Record], thresholds: Thresholds,
                metrics: Sequence[str] | None, torch_differs: bool = False) -> tuple[CaseResult, list[PendingTest]]:
    ref = (head or base)[0].case
    result = CaseResult(case_id, ref.workload, ref.suite, Verdict.UNCHANGED, None, None)
    if not base:
        result.verdict, result.status_head = Verdict.NEW, _status(head)
        return result, []
    if not head:
        result.verdict, result.status_base = Verdict.MISSING, _status(base)
        if thresholds.missing == MISSING_WARN:
            result.warn_only = True
            result.flags.append('measured in base, not in head: warn only (missing = "warn"), the gate does not fail on it')
        return result, []
    result.status_base, result.status_head = _status(base), _status(head)
    flaky = _flaky_base(base)
    head_ok = [r for r in head if r.status == "ok"]
    if flaky is not None and not head_ok:
        result.status_base = "ok"  # passed in some base processes, in no head one: a new failure
    elif flaky is not None:
        # passed in some processes of both sides (flaky in head too, or not): the ones that
        # passed are judged against each other, and the failures on each side are named
        result.flags.append(_not_passed_flag("base", base, flaky))
        if len(head_ok) < len(head):
            result.flags.append(_not_passed_flag("head", head, head_ok))
        base, head = flaky, head_ok
        result.status_base = result.status_head = "ok"
    if not _ran(base):
        return _skipped_in_base(result, head, thresholds)
    if result.status_base == "ok" and result.status_head != "ok" and thresholds.enabled("status"):
        return _now_failing(result, head), []
    if result.status_base != "ok":
        result.verdict = Verdict.STILL_FAILING if result.status_head != "ok" else Verdict.NOW_PASSING
        if result.verdict == Verdict.STILL_FAILING:  # what it fails with now, and whether that changed
            result.error = still_failing_error(base, head)
            if thresholds.still_failing == STILL_FAILING_FAIL:
                result.fails_by_policy = True
                result.flags.append('failed in base and in head: fails the gate (still_failing = "fail")')
        return result, []
    if result.status_head != "ok":  # status gating switched off: nothing to measure
        return result, []
    result.contention = _contention(base, head)
    result.processes = (len(base), len(head))
    probe = machine_probe(base, head, thresholds, torch_differs)
    result.probe_change = probe.change if probe else None
    version_note = probe_version_note(base, head) if probe is None else None
    if probe is None:
        result.probe_caveat = version_note or (
            f"no usable machine probe (none recorded, probe off, or under {MIN_PROBE_SAMPLES} samples per kernel)")
    elif probe.torch_bound:
        result.probe_caveat = torch_bound_note(probe)
    pending = []
    for name in metrics or METRICS:
        if not thresholds.enabled(name):
            continue
        mr, p = judge_metric(METRICS[name], base, head, thresholds, probe)
        if mr is not None:
            if version_note and name == "latency":
                mr.note = f"{mr.note}; {version_note}"
            result.metrics.append(mr)
        if p is not None:
            pending.append(p)
    result.eager_change = _eager_change(base, head, probe)
    from harness.run.twins import is_derived

    sides = [side for side, records in (("base", base), ("head", head)) if any(map(is_derived, records))]
    if len(sides) == 1:  # a figure's source changed, not necessarily the code (docs/RESULTS.md, Eager figures)
        result.flags.append(f"eager figures derived from a compiled twin's process in {sides[0]}, from the case's own "
                            "process in the other side: peak memory and latency compare across that change")
    return result, pending


def _not_passed_flag(side: str, records: list[Record], passed: list[Record]) -> str:
    failed = sorted({r.status for r in records if r.status != "ok"})
    return (f"{len(records) - len(passed)} of {len(records)} {side} processes did not pass ({', '.join(failed)}): "
            f"judged on the {len(passed)} that did")


def _now_failing(result: CaseResult, head: list[Record]) -> CaseResult:
    result.verdict = Verdict.NOW_FAILING
    # a failure's error first; a skip's reason (the device or dependency it lacked) otherwise
    err = (next((r.error for r in head if r.status not in ("ok", "skipped") and r.error), None)
           or next((r.error for r in head if r.status != "ok" and r.error), None) or {})
    result.error = f"{err.get('type', '')}: {err.get('message', '')}"[:300]
    return result


def _skipped_in_base(result: CaseResult, head: list[Record],
                     thresholds: Thresholds) -> tuple[CaseResult, list[PendingTest]]:
    """A case base skipped in every process never ran there: measured in head it is new, failing
    in head it is a failure this change brought (not `still failing`), skipped in both it is n/a."""
    if not _ran(head):
        result.verdict = Verdict.NOT_APPLICABLE
        result.flags.append("skipped in base and in head: nothing ran to compare")
    elif all(r.status in ("ok", "skipped") for r in head):  # nothing failed: ran ok where it ran
        result.verdict = Verdict.NEW
        result.flags.append("skipped in base: measured in head only")
    elif thresholds.enabled("status"):
        _now_failing(result, head)
    return result, []


def _eager_change(base: list[Record], head: list[Record], probe: MachineProbe | None) -> float | None:
    """How much eager moved between base and head, measured like latency (same processes,
    same probe normalisation). In a compiled case eager is the control that tells a
    compiled-only change from a whole-model one; in an eager-only case (`-c eager`, no
    compiled block) eager is what latency measured, so any change there is eager's."""
    compiled_case = any(clean_samples(r.compiled).size for r in base + head)
    factors = (probe.factors("base"), probe.factors("head")) if probe and probe.normalise else (None, None)

    def side(records: list[Record], scale: list[float] | None) -> list[Any]:
        # the processes latency judged: a process without samples (eager, or compiled in a
        # compiled case) is left out, as there, rather than taking the whole control away
        out = []
        for i, r in enumerate(records):
            eager = clean_samples(r.eager)
            if eager.size >= 2 and (not compiled_case or clean_samples(r.compiled).size):
                out.append(eager / scale[i] if scale else eager)
        return out

    b, h = side(base, factors[0]), side(head, factors[1])
    return median_change(b, h) if b and h else None


def _attribute_latency(result: CaseResult, probe_moved_at: float) -> None:
    """Name what moved. A latency change beyond the threshold that the probe, having moved
    by `probe_moved_at` or more, normalised away is `machine drift`. A latency verdict whose
    size eager matched (same direction, at least half as large) is a whole-model change:
    `slower (eager too)` / `faster (eager too)` when the probe says the machine held (or was
    normalised); `slower (eager too; no probe)` (warn only) when nothing says so."""
    latency, eager = result.metric("latency"), result.eager_change
    if latency is None or latency.change is None:
        return
    probe_steady = result.probe_change is not None and abs(result.probe_change) < probe_moved_at
    if _drift_explains(latency, result.probe_change, probe_steady):
        latency.verdict = Verdict.MACHINE_DRIFT
        said = (f"machine drift: probe {result.probe_change:+.1%}, latency {latency.raw_change:+.1%} before "
                f"normalising, {latency.change:+.1%} after")
        latency.note = f"{latency.note}; {said}"
        result.flags.append(f"latency: {said}")
        return
    if latency.verdict not in (Verdict.REGRESSION, Verdict.IMPROVEMENT) or eager is None:
        return
    if eager * latency.change > 0 and abs(eager) >= DRIFT_SHARE * abs(latency.change):
        # a torch-bound probe across torch builds still vouches for the machine when it held
        # still (neither the machine nor torch moved its kernels); when it moved, it cannot
        unknown = result.probe_change is None or (bool(result.probe_caveat) and not probe_steady)
        if unknown:
            latency.verdict = Verdict.SLOWER_EAGER_TOO_NO_PROBE if latency.verdict == Verdict.REGRESSION else Verdict.FASTER_EAGER_TOO
            seen = f"{result.probe_caveat}: machine drift or a real change in torch or the model"
        elif probe_steady:
            latency.verdict = Verdict.SLOWER_EAGER_TOO if latency.verdict == Verdict.REGRESSION else Verdict.FASTER_EAGER_TOO
            seen = f"machine probe steady ({result.probe_change:+.1%}): a real change in torch or the model"
        else:
            latency.verdict = Verdict.SLOWER_EAGER_TOO if latency.verdict == Verdict.REGRESSION else Verdict.FASTER_EAGER_TOO
            seen = f"after normalising machine drift (probe {result.probe_change:+.1%}): a real change in torch or the model"
        latency.note = f"{latency.note}; eager moved {eager:+.1%} too, {seen}"
        result.flags.append(f"latency {latency.change:+.1%}: eager moved {eager:+.1%} too, {seen}")


def _drift_explains(latency: MetricResult, probe_change: float | None, probe_steady: bool) -> bool:
    """Latency moved beyond its threshold before normalising, nothing beyond it is left after,
    and the probe moved the same way by its own threshold: the machine's change, not the code's.
    A change still beyond the threshold after normalising (undecided: noisy) is not drift."""
    if latency.raw_change is None or latency.threshold is None or probe_change is None or probe_steady:
        return False
    threshold = float(latency.threshold)
    return (latency.verdict in (Verdict.UNCHANGED, Verdict.NOISY) and abs(latency.raw_change) >= threshold
            and abs(latency.change or 0.0) < threshold and probe_change * latency.raw_change > 0)


def _attribute_speedup(result: CaseResult) -> None:
    """Speedup (eager / compiled, paired per round) changed significantly while the compiled
    code's latency held still: eager moved, so the compiler did not regress (a faster torch
    eager path lowers the speedup of an unchanged compiled model). `eager faster` / `eager
    slower`, which do not fail the gate by default; the note keeps every number."""
    speedup, latency, eager = result.metric("speedup"), result.metric("latency"), result.eager_change
    if speedup is None or speedup.verdict not in (Verdict.REGRESSION, Verdict.IMPROVEMENT) or speedup.change is None:
        return
    if latency is None or latency.verdict not in (Verdict.UNCHANGED, Verdict.MACHINE_DRIFT) or eager is None:
        return
    # speedup = eager / compiled: down with eager faster (both changes negative), up with eager
    # slower. Eager must carry the move: beyond the speedup threshold itself and over half of
    # it, with compiled latency under half (a compiled +5% with eager's own noise at -3% is
    # still the compiler's)
    move = abs(speedup.change)
    if eager * speedup.change <= 0 or abs(eager) < max(DRIFT_SHARE * move, float(speedup.threshold or 0.0)):
        return
    if abs(latency.change or 0.0) >= DRIFT_SHARE * move:
        return
    speedup.verdict = Verdict.EAGER_FASTER if eager < 0 else Verdict.EAGER_SLOWER
    said = (f"speedup {speedup.change:+.1%} because eager moved {eager:+.1%}; compiled latency held "
            f"({(latency.change or 0.0):+.1%}): a change in torch's eager path or the model, not the compiled code")
    speedup.note = f"{speedup.note}; {said}"
    result.flags.append(said)


def _latency_of_unnormalised_processes(result: CaseResult) -> None:
    """A latency verdict from the pooled raw samples of under 4 processes a side that no probe
    could normalise (none usable, or versions that differ) stands only where the speedup,
    measured inside each process, agrees; otherwise `noisy`. Across processes of one host the
    speed moves (an H200, 2026-12-01: one case's eager latency 1.9x across 5 processes; old vs
    new mlp-deep, 3 a side: one slow process made a compiled-only +14.7% `regression` while
    every process's speedup stayed in the other side's range). A real compiled-code change
    moves the speedup too and still fails on it; a whole-model one is `_attribute_latency`'s."""
    latency, speedup = result.metric("latency"), result.metric("speedup")
    if latency is None or speedup is None or result.probe_change is not None or result.processes is None:
        return
    if latency.verdict not in (REGRESSION, IMPROVEMENT) or min(result.processes) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST:
        return
    if speedup.verdict in (REGRESSION, IMPROVEMENT):
        return
    said = (f"latency {latency.change:+.1%} from the pooled samples of {result.processes[0]} and "
            f"{result.processes[1]} process(es) with no probe to normalise them, while the in-process "
            f"speedup held ({(speedup.change or 0.0):+.1%}): host speed, not judged (run 4+ processes a side)")
    latency.verdict = NOISY
    latency.note = f"{latency.note}; {said}"
    result.flags.append(said)


def _finish_case(result: CaseResult, thresholds: Thresholds | None = None) -> None:
    moved_at = thresholds.get("probe") if thresholds is not None else None
    _attribute_latency(result, float(moved_at) if moved_at is not None else DEFAULT_PROBE_MOVED)
    _attribute_speedup(result)
    _latency_of_unnormalised_processes(result)
    _mark_contended(result, thresholds)
    if result.metrics:
        result.verdict = worst(m.verdict for m in result.metrics) or Verdict.UNCHANGED
    both_ok = result.status_base == "ok" and result.status_head == "ok"
    if both_ok and all(m.verdict == Verdict.NOT_APPLICABLE for m in result.metrics):
        result.verdict = Verdict.NOT_APPLICABLE
        result.flags.append("nothing judged: no metric was measured on both sides (no samples, or every metric off)")
    if result.verdict == Verdict.SLOWER_EAGER_TOO and thresholds is not None and thresholds.whole_model == WHOLE_MODEL_WARN:
        result.warn_only = True
        result.flags.append("whole-model change (eager too): warn only (whole_model = \"warn\"), the gate does not fail on it")


def _contention(base: list[Record], head: list[Record]) -> dict[str, dict[str, Any]] | None:
    """Per side, what the workers measured about contention (harness/measure/contention.py):
    processes, how many were contended, the largest cpu_wait_fraction, the threads; None
    when no record on either side measured it (older runs, no schedstat)."""
    out = {}
    for side, records in (("base", base), ("head", head)):
        blocks = [b for b in (contention_block(as_mapping(r.metrics)) for r in records)
                  if b is not None and isinstance(b.get("contended"), bool)]
        waits = [float(w) for b in blocks if isinstance(w := b.get("cpu_wait_fraction"), (int, float))
                 and not isinstance(w, bool)]
        threads = sorted({t for b in blocks if isinstance(t := b.get("threads"), int) and not isinstance(t, bool)})
        out[side] = {"processes": len(records), "measured": len(blocks),
                     "contended": sum(1 for b in blocks if b["contended"]),
                     "max_wait_fraction": max(waits) if waits else None, "threads": threads}
    return out if any(s["measured"] for s in out.values()) else None


def contention_text(contention: Mapping[str, Mapping[str, Any]]) -> str:
    """'head: 1 of 1 process(es) contended, up to 62% of its threads' time waiting for a core (2 threads)'."""
    parts = []
    for side in ("base", "head"):
        s = contention[side]
        if not s["contended"]:
            continue
        wait = f", up to {s['max_wait_fraction']:.0%} of its threads' time waiting for a core" \
            if s["max_wait_fraction"] is not None else ""
        threads = f" ({'/'.join(map(str, s['threads']))} threads)" if s["threads"] else ""
        parts.append(f"{side}: {s['contended']} of {s['processes']} process(es) contended{wait}{threads}")
    return "; ".join(parts)


def _mark_contended(result: CaseResult, thresholds: Thresholds | None) -> None:
    """A case timed on a contended machine (either side: its threads waited for a core beyond
    the worker's threshold) cannot be judged on its timings, whatever they read: contention
    fakes a regression and hides one alike. Latency and speedup become `machine contended`,
    their notes keep what they would have read; deterministic metrics stay judged."""
    contention = result.contention
    if not contention or not (contention["base"]["contended"] or contention["head"]["contended"]):
        return
    seen = contention_text(contention)
    for m in result.metrics:
        if m.metric not in CONTENDED_METRICS or m.verdict == Verdict.NOT_APPLICABLE:
            continue
        change = f" {m.change:+.1%}" if m.change is not None else ""
        m.note = f"{m.note}; machine contended: cannot judge ({seen}); would read {m.verdict}{change}"
        m.verdict = Verdict.MACHINE_CONTENDED
    result.flags.append(f"machine contended: cannot judge the timings ({seen})")
    if thresholds is not None and thresholds.contended == CONTENDED_WARN:
        result.warn_only = True
        result.flags.append('machine contended: warn only (contended = "warn"), the gate does not stop on it')


def compare_case(case_id: str, base: list[Record], head: list[Record], thresholds: Thresholds,
                 metrics: Sequence[str] | None = None, torch_differs: bool = False) -> CaseResult:
    """Verdicts for one case from its base and head records (one record per process).
    `torch_differs`: the sides ran different torch builds (records do not carry their run's
    environment; compare_runs works it out itself)."""
    result, pending = _judge_case(case_id, base, head, thresholds, metrics, torch_differs)
    resolve_pending(pending)
    _finish_case(result, thresholds)
    return result


def group_records(runs: Sequence[Run]) -> dict[str, list[Record]]:
    """case_id -> records from every run (several when a case was measured in several
    processes: ab rounds, repeated runs)."""
    out: dict[str, list[Record]] = {}
    for run in runs:
        for record in run.records:
            out.setdefault(record.case_id, []).append(record)
    return out


def _env_field(env: Mapping[str, Any], name: str) -> Any:
    if name == "device names":
        devices = as_mapping(env.get("devices"))
        return sorted(str(d.get("name")) for d in devices.values() if isinstance(d, Mapping) and d.get("name")) or None
    value: Any = env
    for part in name.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def environment_mismatches(base: Sequence[Run], head: Sequence[Run],
                           fields: Sequence[str] = HARDWARE_FIELDS + COMPILER_FIELDS) -> list[str]:
    """Fields that differ between the runs (also within one side), as 'field: base vs head'."""
    out = []
    for name in fields:
        bvals = {repr(_env_field(r.environment, name)) for r in base}
        hvals = {repr(_env_field(r.environment, name)) for r in head}
        if bvals != hvals or len(bvals) > 1 or len(hvals) > 1:
            out.append(f"{name}: base {' / '.join(sorted(bvals))} vs head {' / '.join(sorted(hvals))}")
    return out


def _width(config: Mapping[str, Any]) -> int:
    value = config.get("compile_overlap")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _overlap_widths(run: Run) -> set[int]:
    """The widths a run's cases ran at: its own, or a merged run's inputs' (merge keeps a key
    the inputs disagree on under config.sources only); none recorded: 1, one at a time."""
    config = as_mapping(run.config)
    if "compile_overlap" in config or not isinstance(config.get("sources"), Mapping):
        return {_width(config)}
    return {_width(as_mapping(src)) for src in config["sources"].values()} or {1}


def compile_overlap_mismatch(base: Sequence[Run], head: Sequence[Run]) -> str | None:
    """A warning when the sides ran with different `--compile-overlap` widths: their cold
    compiles were timed with different numbers of other workers compiling beside them
    (harness/run/overlap.py), so a compile-time change may be that, not the compiler."""
    bw = sorted(set().union(*(_overlap_widths(r) for r in base)))
    hw = sorted(set().union(*(_overlap_widths(r) for r in head)))
    if bw == hw and len(bw) == 1:
        return None
    return (f"compile times measured with different --compile-overlap: base {'/'.join(map(str, bw))} vs head "
            f"{'/'.join(map(str, hw))} (workers compiling side by side; timed rounds and memory peaks are measured "
            "alone either way, builds and first calls are not): run both sides with the same width to judge compile "
            "time")


def describe_side(runs: Sequence[Run]) -> dict[str, Any]:
    env = runs[0].environment if runs else {}
    return {"run_ids": [r.run_id for r in runs], "labels": sorted({r.label for r in runs if r.label}),
            "torch": env.get("torch_version"), "cpu_model": env.get("cpu_model"),
            "git_commit": env.get("git_commit"), "host": env.get("host")}


NoiseTable = Mapping[str, Mapping[str, float]]  # case_id -> metric -> minimum detectable change


def compare_runs(base: Sequence[Run], head: Sequence[Run], config: ThresholdConfig | None = None, *,
                 metrics: Sequence[str] | None = None, allow_mismatch: bool = False,
                 ignore_fields: Sequence[str] = (), noise: NoiseTable | None = None) -> Comparison:
    """Join base and head on case_id and decide every case. Raises EnvironmentMismatchError
    when hardware or compiler versions differ, unless allow_mismatch (then it warns)."""
    if not base or not head:
        raise RunFileError("compare needs at least one base run and one head run")
    for name in metrics or ():
        if name not in METRICS:
            raise RunFileError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")
    config = config or ThresholdConfig()
    fields = [f for f in HARDWARE_FIELDS + COMPILER_FIELDS if f not in ignore_fields]
    mismatches = environment_mismatches(base, head, fields)
    warnings: list[str] = []
    if mismatches and not allow_mismatch:
        raise EnvironmentMismatchError(
            "base and head differ in " + "; ".join(mismatches) + " (pass --allow-mismatch to compare anyway)")
    if mismatches:
        warnings.append("COMPARING ACROSS DIFFERENT ENVIRONMENTS: " + "; ".join(mismatches))
    overlap = compile_overlap_mismatch(base, head)
    if overlap:
        warnings.append(overlap)
    torch_differs = torch_builds_differ([r.environment for r in base], [r.environment for r in head])
    bmap, hmap = group_records(base), group_records(head)
    ids = sorted(set(bmap) | set(hmap))
    cases, pending, case_thresholds = [], [], []
    for case_id in ids:
        ref = (hmap.get(case_id) or bmap[case_id])[0].case
        thresholds = config.for_case(case_id, ref.workload, ref.suite)
        result, waiting = _judge_case(case_id, bmap.get(case_id, []), hmap.get(case_id, []), thresholds, metrics,
                                      torch_differs)
        cases.append(result)
        case_thresholds.append(thresholds)
        pending.extend(waiting)
    resolve_pending(pending)
    for result, thresholds in zip(cases, case_thresholds, strict=True):
        single = min(len(bmap.get(result.case_id, [])), len(hmap.get(result.case_id, []))) \
            < MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
        if single:  # per-process tests already see the noise between processes
            _apply_noise_band(result, noise or {})
        _finish_case(result, thresholds)
        _flag_noise(result, noise or {})
    cases.sort(key=lambda c: (Verdict(c.verdict).rank, c.case_id))
    return Comparison(describe_side(base), describe_side(head), cases, mismatches, warnings, config.source)


def _apply_noise_band(result: CaseResult, noise: NoiseTable) -> None:
    """With one process per side the tests see only the noise inside each process; how far
    two processes of the same code land apart is what `compilebench noise` measured on this
    machine (mdc_single: the 95th percentile of A/A changes). A timing change inside that band
    cannot be told from process-to-process noise, so it is `noisy`, not a verdict; beyond the
    band the tests decide as usual. Called for cases with under 4 processes a side."""
    measured = noise.get(result.case_id, {})
    for m in result.metrics:
        band = measured.get(m.metric)
        if band is None or METRICS[m.metric].kind != "timing" or m.change is None:
            continue
        if m.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT) and abs(m.change) < band:
            m.verdict = Verdict.NOISY
            m.note = (f"{m.note}; {m.change:+.1%} is inside this machine's A/A band between single processes "
                      f"(compilebench noise: {band:.1%}): run more processes (ab, 4+ rounds) to decide")


def _flag_noise(result: CaseResult, noise: NoiseTable) -> None:
    """Flag metrics whose measured A/A spread (compilebench noise) or in-comparison spread
    exceeds the threshold: a verdict there is a coin toss."""
    measured = noise.get(result.case_id, {})
    for m in result.metrics:
        threshold = m.threshold if isinstance(m.threshold, float) else None
        mdc = measured.get(m.metric)
        if threshold is not None and mdc is not None and mdc > threshold:
            result.flags.append(f"too noisy to judge: {m.metric}: A/A noise on this machine detects only {mdc:.1%} "
                                f"> threshold {threshold:.1%}")
        elif m.verdict == Verdict.NOISY:
            result.flags.append(f"too noisy to judge: {m.metric}: {m.note}")
