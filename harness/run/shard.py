"""Deterministic sharding of a planned run: `compilebench run --shard i/N`.

The distribution engine is the CI system's job matrix (docs/SCALING.md): N jobs each run
`--shard i/N` of the same plan and a final job merges the run files. For that to be
correct every job must compute the *same* partition without talking to the others, so the
partition depends only on (sorted case ids, N, cost table):

- with expected costs (median worker wall seconds per case id from a history store), cases
  are assigned longest-first to the least-loaded shard (LPT), which keeps shard wall times
  close;
- without a history, the sorted case ids are dealt round-robin.

The run's config records the shard, the plan's case ids and a fingerprint of the cost
table, so `compilebench merge` can check that the shards it combines agree and cover the
plan exactly once.

`--shard auto` reads I/N from the engine that started the job (shard_from_env), first match:

- explicit, e.g. from a GitHub Actions matrix (which exports nothing by itself):
  COMPILEBENCH_SHARD_INDEX (1-based, like --shard) and COMPILEBENCH_SHARD_COUNT;
- a Slurm job array: SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT, SLURM_ARRAY_TASK_MIN and
  SLURM_ARRAY_TASK_STEP (`--array=0-3`, `--array=1-4` and `--array=0-12:4` all give 1..4);
- a Kubernetes indexed Job: JOB_COMPLETION_INDEX (0-based, set by Kubernetes) and
  JOB_COMPLETIONS, which the Job's pod template must set to its `spec.completions`
  (Kubernetes does not export the count).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.model.errors import UserError
from harness.model.schema import Case

_SHARD_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class ShardError(UserError, ValueError):
    """A bad --shard value or cost table; the message says the fix."""


@dataclass(frozen=True)
class ShardSpec:
    index: int  # 1-based, as users and CI matrices count
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> ShardSpec:
    """'2/4' -> ShardSpec(2, 4). Shards count from 1 (matrix jobs 1..N)."""
    m = _SHARD_RE.match(text or "")
    if not m:
        raise ShardError(f"--shard {text!r} is not of the form I/N (e.g. --shard 1/4) or 'auto'")
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1 or not 1 <= index <= count:
        raise ShardError(f"--shard {text!r}: I must be between 1 and N and N at least 1 (e.g. --shard 1/{max(count, 1)})")
    return ShardSpec(index, count)


AUTO = "auto"
EXPLICIT_VARS = ("COMPILEBENCH_SHARD_INDEX", "COMPILEBENCH_SHARD_COUNT")
SLURM_VARS = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN")
KUBERNETES_VARS = ("JOB_COMPLETION_INDEX", "JOB_COMPLETIONS")


def _env_int(env: Mapping[str, str], name: str, engine: str) -> int:
    text = env.get(name, "").strip()
    if not text.lstrip("-").isdigit():
        raise ShardError(f"--shard auto: {engine} sets {name}={text!r}, not an integer")
    return int(text)


def _require(env: Mapping[str, str], names: Sequence[str], engine: str) -> None:
    missing = [n for n in names if not env.get(n, "").strip()]
    if missing:
        given = ", ".join(n for n in names if n not in missing)
        raise ShardError(f"--shard auto: {given} is set but {', '.join(missing)} is not; set it too ({engine})")


def _checked(index: int, count: int, source: str) -> tuple[ShardSpec, str]:
    if count < 1 or not 1 <= index <= count:
        raise ShardError(f"--shard auto: {source} gives shard {index}/{count}; I must be between 1 and N")
    return ShardSpec(index, count), source


def shard_from_env(env: Mapping[str, str] | None = None) -> tuple[ShardSpec, str]:
    """`--shard auto`: (the shard, the engine it came from) from the job's environment (see the
    module docstring); none set is a one-line ShardError naming the variables to set."""
    env = os.environ if env is None else env
    if any(env.get(n, "").strip() for n in EXPLICIT_VARS):
        _require(env, EXPLICIT_VARS, "e.g. from the CI matrix")
        return _checked(_env_int(env, EXPLICIT_VARS[0], "the job"), _env_int(env, EXPLICIT_VARS[1], "the job"),
                        "COMPILEBENCH_SHARD_INDEX/COUNT")
    if env.get("SLURM_ARRAY_TASK_ID", "").strip():
        _require(env, SLURM_VARS, "Slurm sets them for every job array task")
        task, count, low = (_env_int(env, n, "Slurm") for n in SLURM_VARS)
        step = _env_int(env, "SLURM_ARRAY_TASK_STEP", "Slurm") if env.get("SLURM_ARRAY_TASK_STEP", "").strip() else 1
        if step < 1 or (task - low) % step:
            raise ShardError(f"--shard auto: Slurm array task {task} is not on the range {low}-...:{step}; "
                             "use an evenly spaced --array (e.g. --array=0-3) or pass --shard I/N")
        return _checked((task - low) // step + 1, count, "Slurm array")
    if env.get("JOB_COMPLETION_INDEX", "").strip():
        _require(env, KUBERNETES_VARS, "set JOB_COMPLETIONS to the indexed Job's spec.completions in its pod template")
        index, count = (_env_int(env, n, "the Kubernetes Job") for n in KUBERNETES_VARS)
        return _checked(index + 1, count, "Kubernetes indexed Job")
    raise ShardError("--shard auto: no job engine sets a shard here; set COMPILEBENCH_SHARD_INDEX (1-based) and "
                     "COMPILEBENCH_SHARD_COUNT, or run as a Slurm array (SLURM_ARRAY_TASK_ID/_COUNT/_MIN) or a "
                     "Kubernetes indexed Job (JOB_COMPLETION_INDEX + JOB_COMPLETIONS), or pass --shard I/N")


def resolve_shard(text: str, env: Mapping[str, str] | None = None) -> tuple[ShardSpec, str]:
    """--shard I/N or --shard auto -> (shard, where it came from: 'argument' or the engine)."""
    if (text or "").strip().lower() == AUTO:
        return shard_from_env(env)
    return parse_shard(text), "argument"


def partition(case_ids: Sequence[str], count: int, costs: Mapping[str, float] | None = None) -> list[list[str]]:
    """Split case ids into `count` disjoint lists covering all of them, deterministically.

    With `costs`, longest-processing-time-first onto the least-loaded shard; ids missing
    from `costs` count as the median known cost (a new case is assumed typical). Ties break
    on the case id and the lower shard index, so the result never depends on input order."""
    if count < 1:
        raise ShardError("shard count must be at least 1")
    ids = sorted(set(case_ids))
    shards: list[list[str]] = [[] for _ in range(count)]
    expected, default = expected_costs(ids, costs)
    if default is None:
        for i, cid in enumerate(ids):
            shards[i % count].append(cid)
        return shards
    loads = [0.0] * count
    for cid in sorted(ids, key=lambda c: (-expected[c], c)):
        target = min(range(count), key=lambda s: (loads[s], s))
        shards[target].append(cid)
        loads[target] += expected[cid]
    return shards


def expected_costs(case_ids: Sequence[str], costs: Mapping[str, float] | None) -> tuple[dict[str, float], float | None]:
    """Every case's expected cost, the one rule for a case the history does not know (shards and
    the --gpus queue both use it): its own median if known, else the median of the known ones
    (a new case is assumed typical). Returns (table, the median used); ({}, None) when no case
    of `case_ids` is known."""
    wanted = set(case_ids)
    known = {k: float(v) for k, v in (costs or {}).items() if k in wanted and v is not None and v >= 0}
    if not known:
        return {}, None
    default = statistics.median(known.values())
    return {c: known.get(c, default) for c in case_ids}, default


def select_shard(cases: Sequence[Case], shard: ShardSpec, costs: Mapping[str, float] | None = None,
                 attach: Mapping[str, str] | None = None) -> list[Case]:
    """The cases of one shard, in plan order. `attach` (case id -> case id): a case that goes
    wherever the other goes instead of being partitioned itself (an eager case derived from
    its compiled twin, harness/run/twins.py: apart, it would run in a process of its own)."""
    ids = {c.case_id for c in cases}
    follows = {cid: to for cid, to in (attach or {}).items() if cid in ids and to in ids}
    mine = set(partition([c.case_id for c in cases if c.case_id not in follows], shard.count, costs)[shard.index - 1])
    return [c for c in cases if c.case_id in mine or follows.get(c.case_id) in mine]


def history_costs(db_path: str | Path, case_ids: Sequence[str] | None = None, *,
                  pooled: bool = True) -> dict[str, float]:
    """Median worker wall seconds per case id from a history store (empty when the file
    does not exist or holds no timings). Read-only: sharding never writes the store.
    `pooled=False` leaves out records measured in a `--gpus` pool (record.worker.gpu set) or
    beside other workers (`--compile-overlap`: record.worker.overlap_pool set, a wall that holds
    the lock's waits): the one-worker-at-a-time reference that multi-GPU scaling is measured
    against. Balancing keeps them (with no other history they are the only costs there are)."""
    path = Path(db_path)
    if not path.is_file():
        return {}
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error:
        return {}
    try:
        rows = conn.execute(
            "SELECT case_id, json_extract(record_json, '$.worker.wall_s') FROM records "
            "WHERE json_extract(record_json, '$.worker.wall_s') IS NOT NULL"
            # a derived eager record's wall is the derivation's microseconds, not what the case costs in a process
            " AND coalesce(json_extract(record_json, '$.worker.start'), '') != 'derived'"
            # a --compile-overlap worker's wall holds its waits for the lock (up to 3x its own work)
            + ("" if pooled else " AND json_extract(record_json, '$.worker.gpu') IS NULL"
                                 " AND json_extract(record_json, '$.worker.overlap_pool') IS NULL")
        ).fetchall()
    except sqlite3.Error as exc:
        raise ShardError(f"{path}: cannot read case costs from this history store ({exc}); "
                         "pass another --shard-costs file or 'none'") from None
    finally:
        conn.close()
    wanted = set(case_ids) if case_ids is not None else None
    samples: dict[str, list[float]] = {}
    for cid, wall in rows:
        if wanted is None or cid in wanted:
            samples.setdefault(cid, []).append(float(wall))
    return {cid: statistics.median(v) for cid, v in samples.items()}


def costs_fingerprint(costs: Mapping[str, float]) -> str:
    """Short hash of the cost table: shards of one plan must have used the same one."""
    blob = json.dumps(sorted((k, round(float(v), 6)) for k, v in costs.items()))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def plan_fingerprint(case_ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(sorted(case_ids)).encode()).hexdigest()[:16]


def apply_shard(cases: Sequence[Case], shard_text: str | None, costs_source: str | None,
                default_history: Path, attach: Mapping[str, str] | None = None
                ) -> tuple[list[Case], dict[str, Any] | None]:
    """Runner entry: narrow the plan to one shard and describe it for the run's config.

    `costs_source`: a history .sqlite path, 'none' (round-robin), or None (use
    `default_history` when it exists). `attach`: see select_shard."""
    if not shard_text:
        return list(cases), None
    shard, shard_source = resolve_shard(shard_text)
    all_ids = [c.case_id for c in cases]
    if costs_source == "none":
        costs: dict[str, float] = {}
        source = "none"
    else:
        path = Path(costs_source) if costs_source else default_history
        if costs_source and not path.is_file():
            raise ShardError(f"--shard-costs {costs_source}: no such history file; pass a history.sqlite or 'none'")
        costs = history_costs(path, all_ids)
        source = str(path) if costs else "none"
    selected = select_shard(cases, shard, costs, attach)
    info = {
        "index": shard.index,
        "count": shard.count,
        "from": shard_source,
        "method": "lpt-history" if costs else "round-robin",
        "costs_source": source,
        "costs_fingerprint": costs_fingerprint(costs),
        "plan_fingerprint": plan_fingerprint(all_ids),
        "plan_case_ids": all_ids,
        "cases_in_shard": len(selected),
        "expected_cost_s": round(sum(costs.get(c.case_id, 0.0) for c in selected), 3) if costs else None,
    }
    return selected, info
