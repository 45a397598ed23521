"""`compilebench merge RUN... -o OUT.json`: many machines' run files -> one run.

Used after a CI job matrix ran `--shard i/N` on N machines (or after several hosts each
ran part of a suite). The merged run keeps every record as measured and stamps each one
with where it ran (`record.worker['machine']`: host, device names, source run id), and the
merged environment keeps each source run's full environment under `environment.machines`.

Refused, with a message naming the files: mismatched schema versions, the same case in
two inputs (overlapping shards, or two machines measuring the same case: compare those
instead), and runs of different torch builds or harness commits unless `allow_mixed`
(numbers from different software are not one run). When the inputs are shards of one
plan, merge also checks they used the same partition; planned cases absent from every
input (a shard's file missing, a shard stopped early) are missing data, an
IncompleteMergeError (exit 3), unless `allow_missing` (then recorded in `config.shards`).
A shard with no run file whose plan share was empty blocks nothing.

The merged `config` drops nothing of the inputs': a key every input has with one value is
kept as is (`policy`, `compilers`, `timeout_s`, ...), `eager_from_twin` is combined (pairs and
`ran_own_process` united, `derived` summed), and what differs between inputs (`argv`, `shard`,
`worker_start`, each one's `wall_s`, ...) stays per input under `config.sources[run_id]`.
"""

from __future__ import annotations

import datetime as _dt
import secrets
from collections.abc import Sequence
from typing import Any

from harness.model.errors import HarnessError
from harness.model.schema import Record, Run, RunFileError

# environment fields that must agree for records to belong in one run
SOFTWARE_KEYS = ("torch_version", "torch_git", "git_commit")
# config keys of one run that the merged run recomputes for the whole (each input's own value
# stays under config.sources); a merged input's own merge bookkeeping is recomputed too
RECOMPUTED_KEYS = frozenset({"suite", "cases_planned", "wall_s", "wall_s_sum", "interrupted", "path", "shard", "shards",
                             "merged_from", "merge_warnings", "sources", "eager_from_twin"})


class MergeError(RunFileError):
    """Run files that cannot be merged; the message says which and why."""


class IncompleteMergeError(HarnessError):
    """Shards whose planned cases are not all in the inputs: missing data, not bad usage
    (exit 3); `--allow-missing` merges what is there and records what is not."""


def missing_problem(shards: dict[str, Any]) -> str | None:
    """Why a merge of shards is incomplete, or None when every planned case is present. A
    shard with no run file whose planned cases are all present anyway (it had none: more
    shards than cases) does not make the merge incomplete."""
    missing = shards.get("missing_cases") or []
    if not missing:
        return None
    absent = shards.get("missing_shards") or []
    where = (f"shard(s) {absent} of {shards.get('count')} have no run file" if absent else
             "every shard has a run file, so a shard stopped before its last case (interrupted or crashed)")
    return f"{len(missing)} planned case(s) are not in the inputs (e.g. {missing[0]}): {where}"


def machine_of(run: Run) -> dict[str, Any]:
    """Where a run was measured: host plus the names of the devices it used."""
    env = run.environment or {}
    devices = {spec: (d or {}).get("name") for spec, d in (env.get("devices") or {}).items()}
    return {"host": env.get("host"), "devices": devices, "cpu_model": env.get("cpu_model"), "source_run_id": run.run_id}


def _check_compatible(runs: Sequence[Run], allow_mixed: bool) -> list[str]:
    versions = {r.schema_version for r in runs}
    if len(versions) > 1:
        listing = ", ".join(f"{r.run_id} (v{r.schema_version})" for r in runs)
        raise MergeError(f"cannot merge run files of different schema versions: {listing}; "
                         "re-run the older ones with this compilebench")
    warnings = []
    for key in SOFTWARE_KEYS:
        values = {(r.environment or {}).get(key) for r in runs}
        if len(values) > 1:
            listing = ", ".join(f"{r.run_id}={(r.environment or {}).get(key)}" for r in runs)
            if not allow_mixed:
                raise MergeError(f"runs differ in {key} ({listing}); merge only runs of one build, "
                                 "or pass --allow-mixed to keep them together anyway")
            warnings.append(f"mixed {key}: {listing}")
    return warnings


def _check_unique(runs: Sequence[Run]) -> None:
    owner: dict[str, str] = {}
    for run in runs:
        for rec in run.records:
            if rec.case_id in owner:
                raise MergeError(f"case {rec.case_id} is in both {owner[rec.case_id]} and {run.run_id}: "
                                 "overlapping shards, or one case measured on two machines (use compare for that)")
            owner[rec.case_id] = run.run_id


def _shard_summary(runs: Sequence[Run], merged_ids: set[str]) -> dict[str, Any] | None:
    shards = [(r.run_id, r.config.get("shard")) for r in runs if r.config.get("shard")]
    if not shards:
        return None
    bad = [rid for rid, s in shards if not isinstance(s, dict) or not {"plan_fingerprint", "count", "index",
                                                                          "costs_fingerprint", "plan_case_ids"} <= set(s)]
    if bad:
        raise MergeError(f"{bad[0]}: its config.shard lacks the plan it was cut from (plan_fingerprint, count, index, "
                         "costs_fingerprint, plan_case_ids); merge the shard run files `run --shard` wrote")
    plans = {s["plan_fingerprint"] for _, s in shards}
    if len(plans) > 1:
        raise MergeError("the shards come from different plans (suite/options differ): "
                         + ", ".join(f"{rid}: plan {s['plan_fingerprint']}" for rid, s in shards))
    counts = {s["count"] for _, s in shards}
    partitions = {s["costs_fingerprint"] for _, s in shards}
    if len(counts) > 1 or len(partitions) > 1:
        raise MergeError("the shards were partitioned differently (different N or cost tables): "
                         + ", ".join(f"{rid}: {s['index']}/{s['count']} costs {s['costs_fingerprint']}" for rid, s in shards)
                         + "; give every shard job the same --shard-costs file (or 'none')")
    plan_ids = list(shards[0][1]["plan_case_ids"])
    indices = sorted(s["index"] for _, s in shards)
    twice = sorted({i for i in indices if indices.count(i) > 1})
    if twice:  # a retried shard's earlier attempt, kept beside it: which one counts is not merge's call
        raise MergeError(f"shard {twice[0]}/{shards[0][1]['count']} appears in more than one run file ("
                         + ", ".join(rid for rid, s in shards if s["index"] == twice[0])
                         + "); pass one run file per shard (the attempt that finished)")
    count = counts.pop()
    return {
        "count": count,
        "indices": indices,
        "missing_shards": [i for i in range(1, count + 1) if i not in indices],
        "plan_case_ids": plan_ids,
        "missing_cases": [c for c in plan_ids if c not in merged_ids],
    }


def merge_twin_configs(configs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The inputs' `config.eager_from_twin` as one (harness/run/twins.py TwinPlan.config): on
    only where every input had it on, its pairs and `ran_own_process` united, `derived` summed.
    None when no input has one (run files from before twins)."""
    twins = [c["eager_from_twin"] for c in configs if isinstance(c.get("eager_from_twin"), dict)]
    if not twins:
        return None
    offs = [t.get("off") for t in twins if t.get("off")]
    return {"enabled": all(t.get("enabled") for t in twins), "off": offs[0] if offs else None,
            "pairs": {k: v for t in twins for k, v in (t.get("pairs") or {}).items()},
            "derived": sum(int(t.get("derived") or 0) for t in twins),
            "ran_own_process": {k: v for t in twins for k, v in (t.get("ran_own_process") or {}).items()}}


def merged_config(runs: Sequence[Run]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The inputs' config keys that every input has with one value (kept as they are), and per
    input run id the rest of its config (config.sources), so a merge loses no key."""
    configs = [r.config or {} for r in runs]
    keys = dict.fromkeys(k for c in configs for k in c if k not in RECOMPUTED_KEYS)
    common = {k: configs[0][k] for k in keys if all(k in c and c[k] == configs[0][k] for c in configs)}
    sources = {r.run_id: {k: v for k, v in (r.config or {}).items() if k not in common} for r in runs}
    return common, sources


def merge_runs(runs: Sequence[Run], label: str = "", allow_mixed: bool = False, allow_missing: bool = False) -> Run:
    """Combine runs into one. Records come in plan order when the inputs are shards of one
    plan, else in input order; each record remembers its machine. Shards whose planned cases
    are not all present raise IncompleteMergeError unless `allow_missing`: then the merged
    run's `config.shards` keeps the missing shards and cases and `allowed_missing: true`."""
    if not runs:
        raise MergeError("nothing to merge: pass at least one run file")
    warnings = _check_compatible(runs, allow_mixed)
    _check_unique(runs)
    records: list[Record] = []
    for run in runs:
        machine = machine_of(run)
        for rec in run.records:
            rec.worker = {**(rec.worker or {}), "machine": machine}
            records.append(rec)
    shard = _shard_summary(runs, {r.case_id for r in records})
    problem = missing_problem(shard) if shard else None
    if problem and not allow_missing:
        raise IncompleteMergeError(f"nothing merged: {problem}; pass every shard's run file, or --allow-missing "
                                   "to merge what is here (the merged run records what is missing)")
    if shard:
        position = {cid: i for i, cid in enumerate(shard["plan_case_ids"])}
        records.sort(key=lambda r: position.get(r.case_id, len(position)))
    envs = [r.environment or {} for r in runs]
    environment = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs)}
    environment["machines"] = {r.run_id: r.environment for r in runs}
    environment["hosts"] = sorted({str(e.get("host")) for e in envs})
    walls = [float(r.config.get("wall_s") or 0.0) for r in runs]
    suites = {r.config.get("suite") for r in runs}
    common, sources = merged_config(runs)
    config: dict[str, Any] = {
        **common,
        "suite": suites.pop() if len(suites) == 1 else None,
        "merged_from": [r.run_id for r in runs],
        "cases_planned": len(shard["plan_case_ids"]) if shard else sum(int(r.config.get("cases_planned") or 0) for r in runs),
        "wall_s": max(walls),  # shards run in parallel: the run took as long as the slowest
        "wall_s_sum": round(sum(walls), 3),
        "interrupted": any(r.config.get("interrupted") for r in runs),
        "merge_warnings": warnings,
        "sources": sources,
    }
    twins = merge_twin_configs([r.config or {} for r in runs])
    if twins is not None:
        config["eager_from_twin"] = twins
    if shard:
        config["shards"] = {k: v for k, v in shard.items() if k != "plan_case_ids"}
        config["shards"]["allowed_missing"] = bool(problem)
    stamp = _dt.datetime.now(_dt.timezone.utc)
    run_id = f"{stamp.strftime('%Y%m%d-%H%M%S')}-merged-{secrets.token_hex(3)}"
    return Run(run_id=run_id, created_at=stamp.isoformat(timespec="seconds"), label=label or "merged",
               environment=environment, config=config, records=records, schema_version=runs[0].schema_version)
