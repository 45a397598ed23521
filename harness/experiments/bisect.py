"""`compilebench bisect`: find the first environment where one case went bad.

Inputs: one case, one metric, a threshold or direction, and environments ordered good
first and bad last (`--env` as for `versions`: interpreters or pip specs such as
`torch==2.12.1`, each a cached venv).

The search. The first env is the reference and is always measured: a relative threshold
needs a baseline measured on this machine today. The last env is declared bad by the user
and is not measured up front: the search runs over positions 1..N with a virtual bad at N
(one past the end), so every outcome -- "first bad is env k" for k in 1..N-1, or "the last
env is not bad after all" -- takes ceil(log2(N)) probes: with 8 envs, 1 + 3 = 4
measurements. Every reported first-bad env was itself measured, and so was its good
neighbour (or it is the reference).

Noise. A probe's verdict comes from the injected `judge` (the CLI uses compare's test:
significance on the raw samples and a change beyond the threshold). A `noisy` verdict
measures both sides again (one more process each, up to `max_repeats`), so the test sees
more processes; if it is still noisy, the point estimate decides and the step is flagged.

State. Every measurement (the worker's full Record) and every decided step is written to a
JSON state file (atomic) as soon as it exists. Running the same bisect again resumes from
it: measurements already there are reused, decided steps are not re-judged.

Servers. Each env's measurements fork from a preloaded server of its python (the CLI's
`preloaded_workers` block); `release(index)` says when an env will not be measured again, so
its server can go instead of living to the end of the search: a candidate once its step is
decided, the reference once it holds 1 + max_repeats measurements (no probe asks for more) or
the search ends. At most two envs (the reference and the candidate) hold a server at a time.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.model.jsonfile import read_json
from harness.model.schema import Record, RunFileError, write_json_atomic

GOOD, BAD, NOISY = "good", "bad", "noisy"
STATE_KIND = "compilebench-bisect"
STATE_VERSION = 1
METRICS = ("latency", "speedup", "compile_time", "graph_breaks", "peak_memory", "status")
DIRECTIONS = ("worse", "better")


class BisectError(RunFileError):
    """A bisect that cannot start or resume; the message names the fix."""


Measure = Callable[[int], Record]  # env index -> one fresh-process measurement of the case
# (reference records, candidate records) -> {"verdict": good|bad|noisy, "beyond_threshold": bool, ...evidence}
Judge = Callable[[list[Record], list[Record]], dict[str, Any]]
Progress = Callable[[str, dict[str, Any]], None]  # (event, details): measure, measured, step, done
Release = Callable[[int], None]  # env index -> it will not be measured again in this search


@dataclass
class BisectState:
    """Everything a bisect knows; the state file is this, as JSON."""

    key: dict[str, Any]  # what is being bisected: case, metric, threshold, direction, env names + specs
    envs: list[dict[str, Any]]  # env descriptions in order (name, spec, packages, python)
    measurements: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # env name -> Record dicts
    steps: list[dict[str, Any]] = field(default_factory=list)  # decided probes, in order
    result: dict[str, Any] | None = None
    path: Path | None = None

    @property
    def names(self) -> list[str]:
        return [e["name"] for e in self.envs]

    def records(self, index: int) -> list[Record]:
        return [Record.from_dict(r) for r in self.measurements.get(self.names[index], [])]

    def add(self, index: int, record: Record) -> None:
        self.measurements.setdefault(self.names[index], []).append(record.to_dict())
        self.save()

    def measurement_count(self) -> int:
        return sum(len(v) for v in self.measurements.values())

    def step_for(self, index: int) -> dict[str, Any] | None:
        return next((s for s in self.steps if s["index"] == index), None)

    def save(self) -> None:
        if self.path is not None:
            write_json_atomic(self.path, self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        return {"kind": STATE_KIND, "version": STATE_VERSION, "key": self.key, "envs": self.envs,
                "measurements": self.measurements, "steps": self.steps, "result": self.result}


# measurement settings in a state key -> the option that sets them, for the mismatch message
MEASURE_OPTIONS = {"min_time_s": "--min-time", "min_samples": "--min-samples", "timeout_s": "--timeout",
                   "max_memory_gb": "the memory limit", "warm_compile": "--warm-compile", "warmup": "--warmup",
                   "warmup_budget_s": "--warmup-budget"}
# settings added to the stop policy after state files were written, at the value that changes
# nothing: left out of the key there, so a bisect started before them still resumes (same key,
# same default path)
_LATER_NEUTRAL = {"warmup_budget_s": 0.0}


def _key_measure(measure: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (measure or {}).items() if not (k in _LATER_NEUTRAL and v == _LATER_NEUTRAL[k])}


def state_key(case_id: str, metric: str, threshold: float | None, direction: str,
              envs: Sequence[dict[str, Any]], measure: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a bisect is: the same key resumes it. `measure` holds the settings a measurement
    depends on (stop policy, timeout, ...): records taken under --min-time 1 are no evidence
    for a bisect asked to run with --min-time 10, so a change starts another bisect."""
    return {"case": case_id, "metric": metric, "threshold": threshold, "direction": direction,
            "envs": [[e["name"], e.get("spec", "")] for e in envs], "measure": _key_measure(measure)}


def default_state_path(out_dir: str | Path, key: dict[str, Any]) -> Path:
    """Same inputs -> same file: running the same command again resumes it."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return Path(out_dir) / "bisect" / f"{digest}.json"


def open_state(path: Path, key: dict[str, Any], envs: Sequence[dict[str, Any]]) -> tuple[BisectState, bool]:
    """(state, resumed): the saved state when `path` holds this bisect, else a fresh one."""
    if not path.exists():
        state = BisectState(key, list(envs), path=path)
        state.save()
        return state, False
    data = read_json(path, BisectError, "bisect state file", "")
    if not isinstance(data, dict) or data.get("kind") != STATE_KIND:
        raise BisectError(f"{path}: not a bisect state file; pass another --state path")
    if data.get("version") != STATE_VERSION:
        raise BisectError(f"{path}: bisect state version {data.get('version')!r} is not {STATE_VERSION}; "
                          f"start afresh with another --state path")
    saved = data.get("key") if isinstance(data.get("key"), dict) else {}
    if isinstance(saved.get("measure"), dict):  # a file written with a neutral setting spelled out
        saved = {**saved, "measure": _key_measure(saved["measure"])}
    if saved != _normalised(key):
        raise BisectError(f"{path} holds another bisect ({_key_difference(saved, _normalised(key))}); pass "
                          f"another --state path to start this one, or repeat the options it was started with")
    state = BisectState(saved, list(envs), data.get("measurements", {}), data.get("steps", []),
                        data.get("result"), path)
    return state, True


def _key_difference(saved: dict[str, Any], wanted: dict[str, Any]) -> str:
    """Which inputs differ, named as the user set them: '--min-time: 1.0 there, 10.0 now'."""
    parts = []
    for field_name in sorted(set(saved) | set(wanted)):
        old, new = saved.get(field_name), wanted.get(field_name)
        if old == new:
            continue
        if field_name == "measure" and isinstance(old, dict) and isinstance(new, dict):
            for option in sorted(set(old) | set(new)):
                if old.get(option) != new.get(option):
                    name = MEASURE_OPTIONS.get(option, f"measurement setting {option}")
                    parts.append(f"{name}: {old.get(option)!r} there, {new.get(option)!r} now")
        elif field_name == "measure":
            parts.append("measurement settings: not recorded there (an older state file)")
        else:
            parts.append(f"{field_name}: {old!r} there, {new!r} now")
    return "; ".join(parts) or "different inputs"


def _normalised(obj: Any) -> Any:
    return json.loads(json.dumps(obj))


def probes_needed(n_envs: int) -> int:
    """Probes after the reference: ceil(log2(n)) (virtual bad one past the last env)."""
    return math.ceil(math.log2(n_envs)) if n_envs > 1 else 0


def run_bisect(state: BisectState, measure: Measure, judge: Judge, max_repeats: int = 2,
               progress: Progress | None = None, release: Release | None = None) -> dict[str, Any]:
    """Binary search for the first bad env; returns (and stores) the result. `release` is
    told each env index that will not be measured again (module doc, Servers), once."""
    n = len(state.envs)
    if n < 2:
        raise BisectError(f"bisect needs at least two --env, good first and bad last (got {n})")
    say = progress or (lambda event, info: None)
    retire = _Retire(release)
    _ensure(state, 0, 1, measure, say)
    _check_reference(state)
    retire.reference_if_full(state, max_repeats)
    lo, hi = 0, n  # invariant: lo is good (measured), hi is bad (n: the user's word, unmeasured)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        step = state.step_for(mid)
        if step is None:
            step = _probe(state, mid, measure, judge, max_repeats, say)
            retire(mid)  # decided: no later probe measures it again
            retire.reference_if_full(state, max_repeats)
        if step["verdict"] == BAD:
            hi = mid
        else:
            lo = mid
    retire(0)
    state.result = _result(state, lo, hi)
    state.save()
    say("done", state.result)
    return state.result


class _Retire:
    """Calls `release` at most once per env index."""

    def __init__(self, release: Release | None) -> None:
        self.release = release
        self.done: set[int] = set()

    def __call__(self, index: int) -> None:
        if self.release is not None and index not in self.done:
            self.done.add(index)
            self.release(index)

    def reference_if_full(self, state: BisectState, max_repeats: int) -> None:
        """A probe measures the reference up to 1 + max_repeats times; once it holds that
        many, no later probe measures it again."""
        if len(state.measurements.get(state.names[0], [])) >= 1 + max_repeats:
            self(0)


def _check_reference(state: BisectState) -> None:
    failed = [r for r in state.records(0) if r.status != "ok"]
    if failed:
        err = failed[0].error or {}
        raise BisectError(f"the good env {state.names[0]} does not run the case ({failed[0].status}: "
                          f"{str(err.get('message', ''))[:200]}); put an env that runs it first")


def _ensure(state: BisectState, index: int, count: int, measure: Measure, say: Progress) -> None:
    """At least `count` processes of the case in env `index` (resume: reuse what is there)."""
    while len(state.measurements.get(state.names[index], [])) < count:
        say("measure", {"env": state.names[index], "index": index, "done": state.measurement_count()})
        record = measure(index)
        state.add(index, record)
        say("measured", {"env": state.names[index], "index": index, "status": record.status,
                         "done": state.measurement_count()})


def _probe(state: BisectState, index: int, measure: Measure, judge: Judge, max_repeats: int,
           say: Progress) -> dict[str, Any]:
    repeats = 0
    while True:
        _ensure(state, index, 1 + repeats, measure, say)
        _ensure(state, 0, 1 + repeats, measure, say)
        judged = judge(state.records(0), state.records(index))
        if judged["verdict"] != NOISY or repeats >= max_repeats:
            break
        repeats += 1
    step = {"index": index, "env": state.names[index], "repeats": repeats, **judged}
    if judged["verdict"] == NOISY:  # still noisy after the repeats: the point estimate decides, flagged
        step["verdict"] = BAD if judged.get("beyond_threshold") else GOOD
        step["noisy"] = True
    step["decided_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    state.steps.append(step)
    state.save()
    say("step", step)
    return step


def _result(state: BisectState, lo: int, hi: int) -> dict[str, Any]:
    n = len(state.envs)
    base = {"measurements": state.measurement_count(), "probes": len(state.steps), "envs": n}
    if hi == n:
        return {**base, "found": False, "last_good": state.names[lo],
                "message": f"no bad env: the last env {state.names[-1]} measured good against {state.names[0]}"}
    good_step = state.step_for(lo) if lo else None
    return {**base, "found": True, "first_bad": state.names[hi], "first_bad_index": hi,
            "good_neighbour": state.names[lo], "good_index": lo,
            "bad_step": state.step_for(hi), "good_step": good_step}
