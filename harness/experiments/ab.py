"""A/B on one machine: the same cases under two Python environments, interleaved.

`compilebench ab --base-python main/.venv/bin/python --head-python pr/.venv/bin/python
--suite smoke --rounds 8` runs every case once per round on each side, alternating which
side goes first per case and per round (round 0: base, head, head, base, ...; round 1 the
mirror), so drift over the session (thermal, a noisy neighbour, clock changes) lands on both
sides alike. With four or more rounds, compare tests one median per process, so the noise
between processes is in the test instead of being guessed by a threshold: the most
noise-robust gate there is, and the recommended PR path.

With a stop rule (`ab --adaptive`: harness/analysis/sequential.py, passed in by the CLI),
a case whose verdict is decided after a round is not measured in later rounds; later round
files hold only the cases still measured, and every round file's `config.ab.stopped` says
which case stopped after how many rounds and why. Up to `--rounds` either way.

Each side-round is saved as an ordinary run file (<out>/ab/<ab_id>/{base,head}/round-NN.json),
so `compilebench compare <out>/ab/<id>/base <out>/ab/<id>/head` re-renders the verdict later.
`--base-env` / `--head-env KEY=VALUE` give the sides different environment variables (an
Inductor config flag, an A/B of a setting within one build).

Each side forks its cases from a preloaded server of its own python (harness/run/runner.py
_server_for). Every finished side-round is journaled (<out>/ab/<ab_id>/journal.jsonl, the
run journal's format: harness/run/journal.py) before the next starts, under the runner's stop
signals: SIGINT / SIGTERM kill the worker in flight and save the round files of what
finished, and `compilebench ab --resume AB_ID` runs only the missing side-rounds with the
session's own options (refused where the plan or either side's stack changed).
"""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.measure.timing import StopPolicy
from harness.model.schema import Case, Record, Run, RunFileError, save_run, torch_builds_differ
from harness.run.forkserver import open_pool, preloaded_workers
from harness.run.journal import Journal, ResumeError, check_environment, read_journal
from harness.run.runner import (
    PROJECT_ROOT,
    RunOptions,
    default_cache_root,
    make_spec,
    new_run_id,
    plan_cases,
    run_worker,
    trace_config,
)
from harness.run.signals import StopSignals, checkpoint, deferred, interruptible
from harness.run.traces import trace_settings

SIDES = ("base", "head")
JOURNAL_NAME = "journal.jsonl"  # in the session folder, beside base/ and head/; removed when the session ends

# (case, its base records so far, its head records so far, rounds done) -> why the case is
# decided, or None to keep measuring it
StopRule = Callable[[Case, list[Record], list[Record], int], "str | None"]


class AbError(RunFileError):
    """An A/B session that cannot start (bad interpreter, bad option); the message says the fix."""


@dataclass
class AbOptions:
    run: RunOptions
    base_python: str
    head_python: str
    rounds: int = 5
    base_env: dict[str, str] = field(default_factory=dict)
    head_env: dict[str, str] = field(default_factory=dict)
    # side -> Env.to_dict() when the sides came from --env (name, spec, package versions)
    sides: dict[str, dict[str, Any]] = field(default_factory=dict)
    stop_rule: StopRule | None = None  # adaptive rounds; None: every case runs every round
    stop_design: dict[str, Any] | None = None  # the rule's parameters, recorded in the run files


def parse_env_pairs(pairs: Sequence[str], flag: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise AbError(f"{flag} {pair!r} is not KEY=VALUE")
        out[key.strip()] = value
    return out


def probe_environment(python: str, devices: Sequence[str]) -> dict[str, Any]:
    """The environment (torch version, CPU, devices) as seen by another interpreter: it runs
    compilebench's own capture from this checkout, so both sides are described alike."""
    code = ("import json, sys; from harness.measure.environment import capture_environment; "
            "print(json.dumps(capture_environment(sys.argv[1:]), default=str))")
    from harness.run.runner import worker_env

    try:
        out = subprocess.run([python, "-c", code, *devices], capture_output=True, text=True, timeout=300,
                             cwd=str(PROJECT_ROOT), env=worker_env(Path("/nonexistent")), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AbError(f"{python}: cannot run it ({exc}); pass the path of a Python with torch installed") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise AbError(f"{python}: cannot import torch/compilebench ({last}); pass a Python environment with torch")
    return json.loads(out.stdout.strip().splitlines()[-1])


def round_order(cases: Sequence[Case], r: int, positions: Mapping[str, int] | None = None) -> list[tuple[Case, str]]:
    """(case, side) of round r in execution order: sides alternate per case and per round.
    `positions`: each case's place in the full plan, so a case keeps its alternation when
    cases before it stopped early."""
    order = []
    for i, case in enumerate(cases):
        k = positions[case.case_id] if positions else i
        first, second = SIDES if (r + k) % 2 == 0 else SIDES[::-1]
        order += [(case, first), (case, second)]
    return order


def schedule(cases: Sequence[Case], rounds: int) -> list[tuple[int, Case, str]]:
    """(round, case, side) in execution order when no case stops early."""
    return [(r, case, side) for r in range(rounds) for case, side in round_order(cases, r)]


AbProgress = Callable[[int, int, str, Case, Record | None], None]


def run_ab(opts: AbOptions, progress: AbProgress | None = None,
           environments: Mapping[str, dict[str, Any]] | None = None,
           resume: AbJournal | None = None) -> tuple[list[Run], list[Run], Path]:
    """Run the schedule; returns (base runs, head runs, session folder), one run per round.
    Each finished side-round of a case is journaled (<session>/journal.jsonl) before the next
    starts; SIGINT / SIGTERM save the round files of what finished and keep the journal, so
    `ab --resume AB_ID` (`resume`: load_ab_journal) runs only what is missing."""
    with StopSignals():
        return _run_ab(opts, progress, environments, resume)


def _run_ab(opts: AbOptions, progress: AbProgress | None, environments: Mapping[str, dict[str, Any]] | None,
            resume: AbJournal | None) -> tuple[list[Run], list[Run], Path]:
    if opts.rounds < 1:
        raise AbError(f"--rounds {opts.rounds} must be at least 1 (4 or more for a per-process test)")
    cases, suite_policy = plan_cases(opts.run)
    from suites import SUITES

    policy = {**StopPolicy().to_dict(), **suite_policy, **opts.run.policy}
    if resume and resume.policy is not None:
        policy = dict(resume.policy)  # the rounds before the interruption ran under it, whatever the suite says now
    timeout = opts.run.timeout_s or (SUITES[opts.run.suite].timeout_s if opts.run.suite else 600.0)
    devices = sorted({c.device for c in cases})
    pythons = {"base": opts.base_python, "head": opts.head_python}
    envs = dict(environments) if environments else {s: probe_environment(pythons[s], devices) for s in SIDES}
    for side, info in opts.sides.items():  # which --env each side was, beside what it measured
        envs[side] = {**envs[side], "env": info}
    resumed = resume.check(cases, envs) if resume else None  # before the journal is locked: nothing to undo
    if resume and resume.policy is None:
        resumed["notes"].append("stop policy taken from the suite as it is now: the journal predates recorded "
                                "policies (2026-12-03), so a suite changed since measures the rest differently")
    if resume:
        ab_id, created, envs = resume.ab_id, resume.created_at, resume.environments
    else:
        ab_id, created = new_run_id(opts.run.label or "ab"), _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    folder = Path(opts.run.out_dir) / "ab" / ab_id
    extra_env = {"base": opts.base_env, "head": opts.head_env}
    runs: dict[str, list[Run]] = {s: [] for s in SIDES}
    isa_cache = default_cache_root() / "isa-probe"
    isa_cache.mkdir(parents=True, exist_ok=True)
    positions = {c.case_id: i for i, c in enumerate(cases)}
    active = list(cases)
    stopped: dict[str, dict[str, Any]] = {}
    total = 2 * len(cases) * opts.rounds  # an upper bound once cases may stop early
    step = 0
    started = time.monotonic()
    servers = ExitStack()  # preloaded workers, one server per side's python (harness/run/forkserver.py)
    journal: Journal | None = None
    done: dict[tuple[str, str, int], Record] = {}
    try:
        with deferred():  # created (or reopened) and guarded as one step
            journal = (Journal.reopen(resume.path) if resume
                       else Journal.create(folder / JOURNAL_NAME,
                                           _journal_header(ab_id, created, cases, envs, opts, policy)))
        if resume:
            done = journaled_records(journal.read().entries)  # read under the lock: what --resume trusts
            journal.note_resume(resumed)
        servers.enter_context(preloaded_workers(opts.run.preload))
        for r in range(opts.rounds):
            if not active:
                break
            for side in SIDES:
                runs[side].append(_side_run(ab_id, side, r, created, envs[side], opts, policy, timeout, len(cases)))
            for case, side in round_order(active, r, positions):
                kept = done.get((case.case_id, side, r))
                if kept is not None:  # finished before the interruption
                    runs[side][r].records.append(kept)
                    step += 1
                    continue
                checkpoint("next-case")
                if progress:
                    progress(step, total, side, case, None)
                spec = make_spec(case, opts.run, policy, str(isa_cache))
                trace = trace_settings(opts.run.out_dir, runs[side][r].run_id, opts.run.trace_max_mb) if opts.run.trace else None
                with deferred():  # from the worker's exit to the journal's fsync: the side-round is finished, keep it
                    with interruptible():
                        record = run_worker(case, spec, timeout, python=pythons[side], extra_env=extra_env[side] or None,
                                            trace=trace)
                    record.worker.update({"ab_side": side, "ab_round": r, "ab_step": step})
                    checkpoint("record-in-hand")
                    journal.append(record)
                    runs[side][r].records.append(record)
                if progress:
                    progress(step, total, side, case, record)
                step += 1
            active = _still_measured(active, runs, r + 1, opts.stop_rule, stopped)
    except KeyboardInterrupt as exc:
        exc.ab_session = folder  # type: ignore[attr-defined]  # the CLI names the session to resume
        exc.ab_resumable = journal is not None  # type: ignore[attr-defined]
        raise
    finally:
        with deferred():  # a second signal must not cut the round files short
            wall = round(time.monotonic() - started, 3)
            pool = open_pool()
            for side in SIDES:
                for r, run in enumerate(runs[side]):
                    run.config["wall_s"] = wall
                    run.config["ab"].update(rounds_run=len(runs[side]), stopped=stopped, adaptive=opts.stop_design,
                                            resumed=(resume.history + [resumed]) if resume else None)
                    run.config["worker_start"] = {"preload": pool is not None, "servers": [
                        s for s in (pool.describe() if pool else []) if s["python"] == pythons[side]]}
                    save_run(run, folder / side / f"round-{r:02d}.json")
            servers.close()
            if journal is not None:
                journal.close()  # kept unless the session finished (below)
    journal.remove()  # every side-round is in its round file now
    return runs["base"], runs["head"], folder


def _journal_header(ab_id: str, created: str, cases: Sequence[Case], envs: Mapping[str, dict[str, Any]],
                    opts: AbOptions, policy: Mapping[str, Any]) -> dict[str, Any]:
    """What `ab --resume` needs: the session's identity, both sides' environments, the plan,
    the options and the resolved stop policy (suite defaults included: a suite edited between
    the interruption and the resume must not change how the remaining rounds measure; the
    stop rule itself is rebuilt by the CLI and checked against `stop_design`)."""
    from dataclasses import asdict

    return {"run_id": ab_id, "created_at": created, "plan": [c.to_dict() for c in cases], "environments": dict(envs),
            "ab": {"base_python": opts.base_python, "head_python": opts.head_python, "rounds": opts.rounds,
                   "base_env": opts.base_env, "head_env": opts.head_env, "sides": opts.sides,
                   "stop_design": opts.stop_design, "policy": dict(policy)},
            "options": asdict(opts.run)}


def journaled_records(entries: Sequence[Record]) -> dict[tuple[str, str, int], Record]:
    """(case id, side, round) -> the journaled record (a later line wins, as in a run's journal)."""
    return {(rec.case_id, str(rec.worker["ab_side"]), int(rec.worker["ab_round"])): rec for rec in entries
            if "ab_side" in rec.worker and "ab_round" in rec.worker}


@dataclass
class AbJournal:
    """An interrupted A/B session, as its journal left it (load_ab_journal)."""

    path: Path
    ab_id: str
    created_at: str
    opts: AbOptions  # without the stop rule: the CLI rebuilds it
    environments: dict[str, dict[str, Any]]
    plan: list[str]  # case ids in plan order
    finished: int  # side-rounds already journaled
    history: list[dict[str, Any]] = field(default_factory=list)  # earlier resumes
    policy: dict[str, Any] | None = None  # the session's resolved stop policy; None in journals before 2026-12-03

    def check(self, cases: Sequence[Case], current: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
        """Refuse a resume whose plan or machine/stack differs (the records would not be
        comparable); returns the resume's entry for the journal and the round files."""
        if [c.case_id for c in cases] != self.plan:
            raise ResumeError(f"cannot resume ab session {self.ab_id}: its cases plan differently now (a workload "
                              "file or suite changed); start a new session")
        notes = [f"{side}: {note}" for side in SIDES
                 for note in check_environment(self.environments.get(side) or {}, dict(current.get(side) or {}),
                                               f"{self.ab_id} ({side})")]
        at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        return {"at": at, "side_rounds_from_journal": self.finished, "notes": notes}


def load_ab_journal(ref: str, out_dir: str | Path) -> AbJournal:
    """An interrupted session by id (a folder of OUT/ab), session folder or journal path."""
    given = Path(ref)
    folder = given.parent if given.name == JOURNAL_NAME else given if given.is_dir() else Path(out_dir) / "ab" / ref
    path = folder / JOURNAL_NAME
    if not path.is_file():
        if folder.is_dir():
            raise ResumeError(f"ab session {folder.name} has no journal in {folder}: it finished (or predates "
                              "journals); nothing to resume — start a new session")
        raise ResumeError(f"--resume {ref}: no ab session of that id in {Path(out_dir) / 'ab'}; pass the id "
                          "`compilebench ab` printed (and the same --out)")
    state = read_journal(path)
    header = state.header
    try:
        run_opts = RunOptions(**{k: v for k, v in header["options"].items() if k in RunOptions.__dataclass_fields__})
        ab = header["ab"]
        opts = AbOptions(run_opts, ab["base_python"], ab["head_python"], int(ab["rounds"]), dict(ab["base_env"]),
                         dict(ab["head_env"]), sides=dict(ab["sides"]), stop_design=ab["stop_design"])
        envs = {side: dict(header["environments"][side]) for side in SIDES}
    except (KeyError, TypeError, ValueError) as exc:
        raise ResumeError(f"{path}: not an ab session journal ({type(exc).__name__}: {exc}); pass the id of an "
                          "interrupted `compilebench ab` session") from None
    opts.run.out_dir = str(folder.parent.parent)
    policy = ab.get("policy")
    return AbJournal(path, state.run_id, str(header["created_at"]), opts, envs,
                     [c.case_id for c in state.planned_cases()], len(state.entries), list(state.resumes),
                     dict(policy) if isinstance(policy, dict) else None)


def _still_measured(active: list[Case], runs: Mapping[str, list[Run]], rounds: int, rule: StopRule | None,
                    stopped: dict[str, dict[str, Any]]) -> list[Case]:
    """The cases that need another round: the stop rule has not decided them yet."""
    if rule is None:
        return active
    # as compare decides it, so the rule normalises latency exactly when the gate will
    torch_differs = torch_builds_differ([r.environment for r in runs["base"]], [r.environment for r in runs["head"]])
    keep = []
    for case in active:
        base, head = (_records_of(runs[side], case) for side in SIDES)
        why = rule(case, base, head, rounds, torch_differs=torch_differs)
        if why:
            stopped[case.case_id] = {"after_rounds": rounds, "why": why}
        else:
            keep.append(case)
    return keep


def _records_of(runs: Sequence[Run], case: Case) -> list[Record]:
    return [rec for run in runs for rec in run.records if rec.case_id == case.case_id]


def _side_run(ab_id: str, side: str, r: int, created: str, env: dict[str, Any], opts: AbOptions,
              policy: dict[str, Any], timeout: float, n_cases: int) -> Run:
    python = opts.base_python if side == "base" else opts.head_python
    config = {"suite": opts.run.suite, "argv": sys.argv, "timeout_s": timeout, "policy": policy,
              "workload_files": opts.run.workload_files, "cases_planned": n_cases,
              "warm_compile": opts.run.warm_compile, "trace": trace_config(opts.run, f"{ab_id}-{side}-r{r:02d}"),
              "ab": {"id": ab_id, "side": side, "round": r, "rounds": opts.rounds, "python": python,
                     "env": opts.base_env if side == "base" else opts.head_env}}
    return Run(f"{ab_id}-{side}-r{r:02d}", created, f"{opts.run.label or 'ab'} {side}", env, config)
