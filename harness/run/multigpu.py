"""Several GPUs in one host: `compilebench run --gpus all` (or `--gpus 0,1,...`).

One worker per GPU at a time, pinned with `CUDA_VISIBLE_DEVICES` (so inside the worker
the case's `cuda` is `cuda:0` = the assigned GPU; the same variable works on ROCm, and
`ZE_AFFINITY_MASK` does it for Intel XPU). `--gpus` indices count the GPUs this process
sees: under an allocation that already set `CUDA_VISIBLE_DEVICES=4,5` (Slurm, Kubernetes),
GPU 0 is physical GPU 4.

The scheduler is a shared queue, not a static split: every GPU slot is a thread that takes
the next case the moment its last one ends and blocks in the runner's `run_worker` (a
subprocess wait, no busy loop), so a long case on one GPU never holds the others back. The
queue is ordered longest expected first (LPT, what keeps the last GPU from finishing long
after the others): each case's median worker wall time in the history store
(shard.history_costs, the same lookup `--shard` balances on), a case the store does not
know counted as the median of the known ones (shard.expected_costs); with no history at
all, compiled cases before eager and train steps before inference, then plan order. Each
record says how it was placed (`record.worker['gpu_pool']`: its GPU, queue position,
expected seconds and where that came from, start/end on the pool's clock), and
`pool_summary` turns those into the run's `config.multi_gpu` (per-GPU busy and idle
seconds, busy share, scaling efficiency: see its docstring). The runner journals records
as they finish (a Ctrl-C or SIGKILL loses only the cases in flight) and writes the run
file in plan order, so it reads exactly like a one-GPU run's.

Test-only: `COMPILEBENCH_TEST_FAKE_GPUS=N` makes `--gpus all` see N fake GPUs that run CPU
cases (no pinning), so the whole path runs end to end on a CPU-only box.
"""

from __future__ import annotations

import os
import secrets
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from harness.model.errors import UserError
from harness.model.schema import Case, Record

# env var that pins a worker to one device, per device type
VISIBLE_DEVICES_ENV = {"cuda": "CUDA_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK"}
FAKE_GPUS_ENV = "COMPILEBENCH_TEST_FAKE_GPUS"  # test-only: N fake GPUs that run CPU cases
FAKE_GPU_ENV = "COMPILEBENCH_TEST_FAKE_GPU"  # a fake GPU's worker: which one
ALL = "all"

EFFICIENCY_DEFINITION = ("scaling efficiency = (sum of the cases' one-GPU wall seconds / GPUs) / wall seconds "
                         "of the pool (first case started to last case finished); 1.0 = linear")


class GpuPlanError(UserError, ValueError):
    """--gpus that cannot work with the planned cases; the message says the fix."""


def parse_gpus(values: Sequence[str]) -> list[int]:
    """['0,1', '3'] -> [0, 1, 3]; duplicates and non-numbers are an error."""
    out: list[int] = []
    for value in values:
        for part in filter(None, (p.strip() for p in value.split(","))):
            if not part.isdigit():
                raise GpuPlanError(f"--gpus {value!r}: expected GPU indices like 0,1,2 or 'all'")
            if int(part) in out:
                raise GpuPlanError(f"--gpus {value!r}: GPU {part} is listed twice")
            out.append(int(part))
    return out


def fake_gpu_count(env: Mapping[str, str] | None = None) -> int:
    """N from COMPILEBENCH_TEST_FAKE_GPUS (0 when unset): tests run the pool on CPU workers."""
    text = (os.environ if env is None else env).get(FAKE_GPUS_ENV, "").strip()
    return int(text) if text.isdigit() else 0


def visible_gpus() -> tuple[int, str]:
    """(how many GPUs this process sees, what counted them)."""
    fake = fake_gpu_count()
    if fake:
        return fake, f"{FAKE_GPUS_ENV}={fake} (test-only fake GPUs)"
    from harness.measure.devices import parse_device

    for kind in ("cuda", "xpu"):
        device = parse_device(kind)
        if device.availability().available:
            return device.count(), f"torch.{kind}.device_count()"
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    return 0, "torch.cuda.device_count() is 0" + (f" (CUDA_VISIBLE_DEVICES={mask!r})" if mask is not None else "")


def resolve_gpus(values: Sequence[str], count: Callable[[], tuple[int, str]] = visible_gpus) -> list[int]:
    """--gpus values -> GPU indices: 'all' is every visible GPU, '0,1' those indices, each
    checked against what this process sees. No --gpus: [] (one case at a time)."""
    if not values:
        return []
    wants_all = [v for v in values if v.strip().lower() == ALL]
    if wants_all and len(values) > 1:
        raise GpuPlanError(f"--gpus all cannot be combined with other --gpus values ({', '.join(values)}); pass one")
    gpus = None if wants_all else parse_gpus(values)
    n, source = count()
    if n < 1:
        raise GpuPlanError(f"--gpus {','.join(values)}: no GPU is visible here ({source}); "
                           "run without --gpus, or on a host with GPUs")
    if gpus is None:
        return list(range(n))
    if not gpus:
        raise GpuPlanError("--gpus needs GPU indices like 0,1 or 'all'")
    missing = [g for g in gpus if g >= n]
    if missing:
        raise GpuPlanError(f"--gpus {','.join(values)}: GPU {missing[0]} is not visible ({n} visible: 0..{n - 1}, "
                           f"{source}); use --gpus all or indices below {n}")
    return gpus


def check_cases(cases: Sequence[Case], gpus: Sequence[int]) -> None:
    """With --gpus every worker sees exactly one GPU as index 0, so a case that names
    another index (cuda:1) cannot mean what it says, and a CPU case would just run several
    at once on the same cores (the fake GPUs of the tests are the one exception)."""
    if not gpus:
        return
    for case in cases:
        kind, _, idx = case.device.partition(":")
        if kind in VISIBLE_DEVICES_ENV and idx not in ("", "0"):
            raise GpuPlanError(f"case {case.case_id} asks for {case.device}, but --gpus pins each worker to one GPU; "
                               f"use --device {kind} and list the GPUs in --gpus")
        if kind not in VISIBLE_DEVICES_ENV and not fake_gpu_count():
            raise GpuPlanError(f"case {case.case_id} runs on {case.device}, but --gpus runs one GPU case per GPU; "
                               "pass --device cuda (or drop --gpus)")


def pin_env(case: Case, gpu: int, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's device mask: GPU `gpu` of those this process sees (its own mask, if any).
    A fake GPU's CPU case gets a marker instead, so that, as with real masks, each GPU's
    workers start from a fork server of their own (the server key is the environment)."""
    var = VISIBLE_DEVICES_ENV.get(case.device.partition(":")[0])
    if not var:
        return {FAKE_GPU_ENV: str(gpu)} if fake_gpu_count(env) else {}
    parent = [p.strip() for p in (os.environ if env is None else env).get(var, "").split(",") if p.strip()]
    return {var: parent[gpu] if gpu < len(parent) else str(gpu)}


def prior_rank(case: Case) -> tuple[int, int]:
    """No history at all: compiled cases before eager (they compile), train steps before
    inference (forward + backward + optimizer); ties keep plan order."""
    return (case.compiler == "eager", case.scenario != "train")


def dispatch_order(cases: Sequence[Case], costs: Mapping[str, float] | None) -> list[tuple[Case, float | None, str]]:
    """The queue: (case, expected seconds or None, where the figure came from: 'history',
    'median of known' or 'prior'), longest expected first."""
    from harness.run.shard import expected_costs

    ids = [c.case_id for c in cases]
    expected, default = expected_costs(ids, costs)
    known = {k for k, v in (costs or {}).items() if v is not None and v >= 0}
    if default is None:
        order = sorted(range(len(cases)), key=lambda i: (*prior_rank(cases[i]), i))
        return [(cases[i], None, "prior") for i in order]
    order = sorted(range(len(cases)), key=lambda i: (-expected[ids[i]], i))
    return [(cases[i], expected[ids[i]], "history" if ids[i] in known else "median of known") for i in order]


RunOne = Callable[[Case, Mapping[str, str]], Record]
SlotEnv = Callable[[Case, int], dict[str, str]]  # a slot's worker environment (default pin_env)


class AgainAlone(Protocol):
    """--compile-overlap: which records of cases that ran beside others are run again alone,
    and how (harness/run/overlap.py)."""

    def wanted(self, record: Record) -> bool: ...

    def run(self, case: Case, env: Mapping[str, str], first: Record) -> Record: ...
Clock = Callable[[], float]
# harness/run/twins.py: an eager case's record from its twin's, or None (the case must run)
Derive = Callable[[Case, Mapping[str, Record]], Record | None]
OnStart = Callable[[Case], None]  # a slot is starting this case's worker (the progress's "running" line)


class GpuPool:
    """Runs cases concurrently, one at a time per GPU, each GPU pulling the next case of the
    shared longest-first queue when it is free. `as_completed(cases)` yields cases as they
    finish and `result(case)` hands over the record. `cancel()` stops taking cases and
    returns the finished records nobody took yet (the runner kills workers in flight).

    `clock`: seconds, monotonic (injectable: tests drive the pool on a virtual clock).
    `reference`: one-GPU wall seconds per case id (the store's single-worker medians),
    stamped on each record for the run's scaling efficiency.
    `held`: eager case id -> twin case id (harness/run/twins.py): such a case is not queued; when
    its twin finishes, the slot that ran the twin asks `derive` for its record and queues the
    case only when there is none (that slot is still taking work, so the case always runs).
    `known`: records finished before this pool (a resumed run's journal): a held case whose
    twin is among them is settled when the pool starts.
    `on_start`: called from the slot's thread as it starts a case's worker, so the progress
    says a case is running while it runs, not once it is back.
    `slot_env`: a slot's worker environment instead of pinning it to a GPU (--compile-overlap:
    every slot on the one device); such a pool keeps plan order. `group_of`: a case starts only
    while no case of another group runs (--compile-overlap: a model's compiled twins start
    together and compile side by side, instead of one of them beside the next model's).
    `again_alone`: a case that ran beside another and ended as it says (out of memory, out of
    time) runs again once no other case runs, and none starts until it is done."""

    def __init__(self, cases: Sequence[Case], run_one: RunOne, gpus: Sequence[int],
                 costs: Mapping[str, float] | None = None, *, clock: Clock = time.monotonic,
                 reference: Mapping[str, float] | None = None, held: Mapping[str, str] | None = None,
                 derive: Derive | None = None, known: Mapping[str, Record] | None = None,
                 on_start: OnStart | None = None, slot_env: SlotEnv | None = None,
                 group_of: Callable[[Case], Any] | None = None, again_alone: AgainAlone | None = None):
        if not gpus:
            raise GpuPlanError("--gpus needs at least one GPU index")
        if slot_env is None:
            check_cases(cases, gpus)
        # slot_env: the environment of a slot's worker (default: pinned to the slot's GPU); a
        # --compile-overlap pool gives every slot the same device and the run's quiet lock instead
        self._slot_env = slot_env or pin_env
        self._pinned = slot_env is None
        ids = {c.case_id for c in cases}
        self._held: dict[str, list[Case]] = {}
        for case in cases:
            twin = (held or {}).get(case.case_id) if derive is not None else None
            if twin is not None and (twin in ids or twin in (known or {})):
                self._held.setdefault(twin, []).append(case)
        held_ids = {c.case_id for waiting in self._held.values() for c in waiting}
        self._derive = derive
        queued = [c for c in cases if c.case_id not in held_ids]
        # a --compile-overlap pool keeps plan order, so that twins (inductor and reduce-overhead
        # of one model) compile side by side and wait for each other's compile about as long
        self.order = (dispatch_order(queued, costs) if self._pinned
                      else [(c, None, "plan order") for c in queued])
        self._todo: deque[tuple[int, Case, float | None, str]] = deque(
            (position, case, expected, source) for position, (case, expected, source) in enumerate(self.order))
        self._group_of = group_of
        self._running: dict[str, Any] = {}  # case id -> its group, for group_of
        self._again_alone = again_alone
        self._crowded: set[str] = set()  # cases that had another case running beside them
        self._solo: str | None = None  # a case running again alone: nothing else starts meanwhile
        self._waiting_alone = 0  # cases waiting for their turn to run again alone: nothing starts either
        self._ids = ids
        self._run_one = run_one
        self._on_start = on_start
        self._clock = clock
        self._reference = dict(reference or {})
        self._gpus = list(gpus)
        self.token = secrets.token_hex(4)
        self._done: dict[str, Record] = {}
        self._finished: deque[str] = deque()  # completion order, not yet yielded by as_completed
        self._cond = threading.Condition()
        self._cancelled = False
        self._t0 = clock()
        for twin_id, record in (known or {}).items():
            if twin_id in self._held:
                self._settle_held(twin_id, record)
        # daemon: an interrupted run must be able to exit without waiting for a slot
        self.threads = [threading.Thread(target=self._slot, args=(g,), name=f"gpu-{g}", daemon=True) for g in gpus]
        for t in self.threads:
            t.start()

    def _take(self) -> tuple[int, Case, float | None, str] | None:
        """The next case for a free slot, None when none is left. With `group_of`, a case of
        another group waits until the running group's cases have all finished."""
        with self._cond:
            while not self._cancelled and self._todo:
                item = self._todo[0]
                group = self._group_of(item[1]) if self._group_of is not None else None
                free = self._group_of is None or not self._running or group in self._running.values()
                if free and self._solo is None and not self._waiting_alone:
                    self._todo.popleft()
                    if self._running and self._again_alone is not None:  # only a rerun asks
                        self._crowded.update([*self._running, item[1].case_id])
                    self._running[item[1].case_id] = group
                    return item
                self._cond.wait(timeout=1.0)
            return None

    def _alone(self, case: Case, env: Mapping[str, str], record: Record) -> Record:
        """`again_alone` says whether a case that ran beside others must run again by itself
        (it ran out of memory, or out of time waiting for the others): wait until no other case
        runs, start none meanwhile, and run it through `again_alone` (which says so in it)."""
        assert self._again_alone is not None
        with self._cond:
            group = self._running.pop(case.case_id, None)  # not running while it waits its turn
            self._waiting_alone += 1
            self._cond.notify_all()
            try:
                self._cond.wait_for(lambda: self._solo is None or self._cancelled)
            finally:
                self._waiting_alone -= 1
            self._running[case.case_id] = group
            if self._cancelled:
                return record
            self._solo = case.case_id  # cleared with its end (_leave): nothing starts in between
            self._cond.wait_for(lambda: set(self._running) == {case.case_id} or self._cancelled)
        return self._again_alone.run(case, env, record) if not self._cancelled else record

    def _slot(self, gpu: int) -> None:
        while not self._cancelled:
            taken = self._take()
            if taken is None:
                return
            position, case, expected, source = taken
            start = self._clock() - self._t0
            self._announce(case)
            try:
                env = self._slot_env(case, gpu)
                record = self._run_one(case, env)
                if (self._again_alone is not None and case.case_id in self._crowded
                        and self._again_alone.wanted(record)):
                    record = self._alone(case, env, record)
            except BaseException as exc:  # noqa: BLE001 - a slot must never die silently
                where = f"GPU {gpu}" if self._pinned else f"slot {gpu}"
                record = Record.failure(case, "crashed", type(exc).__name__, f"{where}: {exc}")
            end = self._clock() - self._t0
            stamp = {"pool": self.token, "queue_position": position, "start_s": round(start, 6),
                     "end_s": round(end, 6)}
            if self._pinned:
                record.worker["gpu"] = gpu
                record.worker["gpu_pool"] = {
                    **stamp, "gpus": self._gpus,
                    "expected_s": None if expected is None else round(expected, 3), "expected_from": source,
                    "one_gpu_s": self._reference.get(case.case_id),
                }
            else:  # the runner's quiet-lock accounting reads the slot and the span (harness/run/overlap.py)
                record.worker["overlap_pool"] = {**stamp, "slot": gpu, "slots": len(self._gpus),
                                                 "started_at": round(self._t0 + start, 6),
                                                 "ended_at": round(self._t0 + end, 6)}
            with self._cond:
                if self._cancelled:
                    self._leave(case)
                    return  # finished after the stop (killed): not a result
                self._done[case.case_id] = record
                self._finished.append(case.case_id)
                self._cond.notify_all()
            # still running while its held eager cases are derived or queued (first in line), so
            # a slot waiting for this group to end cannot start the next one ahead of them
            if case.case_id in self._held:
                self._settle_held(case.case_id, record)
            with self._cond:
                self._leave(case)

    def _leave(self, case: Case) -> None:
        """`case` is done (under the lock): out of the running set, its rerun's hold on the
        pool (if any) gone in the same step, and the waiting slots told."""
        self._running.pop(case.case_id, None)
        if self._solo == case.case_id:
            self._solo = None
        self._cond.notify_all()

    def _announce(self, case: Case) -> None:
        if self._on_start is None:
            return
        try:
            self._on_start(case)
        except Exception:  # noqa: BLE001 - a progress line must never cost a case its run
            pass

    def _settle_held(self, twin_id: str, twin: Record) -> None:
        """The eager cases waiting on `twin_id`: derived now, or queued to run (no GPU stamp on
        a derived record: it used none)."""
        for case in self._held.pop(twin_id, []):
            why = "twin gave no eager figures"
            try:
                derived = self._derive(case, {twin_id: twin}) if self._derive is not None else None
            except Exception as exc:  # noqa: BLE001 - a slot must never die of a derivation: the case runs
                derived, why = None, f"derivation failed: {type(exc).__name__}: {str(exc)[:200]}"
            if derived is None:
                with self._cond:  # first in line: it runs with its own group, not after every other one
                    self._todo.appendleft((len(self.order), case, None, why))
                    self._cond.notify_all()
                continue
            with self._cond:
                self._done[case.case_id] = derived
                self._finished.append(case.case_id)
                self._cond.notify_all()

    def _alive(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def as_completed(self, cases: Sequence[Case], poll_s: float = 1.0) -> Iterator[Case]:
        """`cases` that the pool does not run first (plan order: a resumed run's journaled
        ones), then the pool's cases in the order they finish. Timed waits keep Ctrl-C
        responsive in the main thread."""
        by_id = {c.case_id: c for c in cases}
        yield from (c for c in cases if c.case_id not in self._ids)
        for _ in range(sum(1 for c in cases if c.case_id in self._ids)):
            with self._cond:
                while not self._finished:
                    if not self._alive():
                        raise RuntimeError("GPU pool stopped before every case ran")
                    self._cond.wait(timeout=poll_s)
                case_id = self._finished.popleft()
            yield by_id[case_id]

    def result(self, case: Case, poll_s: float = 1.0) -> Record:
        """Wait for `case` and take its record."""
        with self._cond:
            while case.case_id not in self._done:
                if not self._alive():
                    raise RuntimeError(f"GPU pool stopped before {case.case_id} ran")
                self._cond.wait(timeout=poll_s)
            if case.case_id in self._finished:
                self._finished.remove(case.case_id)
            return self._done.pop(case.case_id)

    def finished_untaken(self) -> int:
        """How many cases have finished and wait to be taken (tests place a stop signal by it)."""
        with self._cond:
            return len(self._finished)

    def cancel(self) -> list[Record]:
        """Stop taking cases; the records that finished but were not taken yet (keep them:
        they are measured), in completion order."""
        with self._cond:
            self._cancelled = True
            left = [self._done.pop(cid) for cid in self._finished if cid in self._done]
            self._finished.clear()
            self._cond.notify_all()
        return left


def in_plan_order(records: Sequence[Record], cases: Sequence[Case]) -> list[Record]:
    """The pool finishes cases out of order; the run file lists them as planned."""
    position = {c.case_id: i for i, c in enumerate(cases)}
    return sorted(records, key=lambda r: position.get(r.case_id, len(position)))


def start_pool(cases: Sequence[Case], run_one: RunOne, gpus: Sequence[int], out_dir: str,
               costs_source: str | None = None, *, held: Mapping[str, str] | None = None,
               derive: Derive | None = None, known: Mapping[str, Record] | None = None,
               on_start: OnStart | None = None) -> GpuPool | None:
    """Runner entry: a pool for `--gpus`, None to run cases one by one as usual. The queue's
    costs come from `costs_source` (a history .sqlite, the --shard-costs of the run; 'none':
    no history) or OUT/history.sqlite. `held`, `derive`, `known`: eager cases taken from their
    twins; `on_start`: each case as its GPU starts it (GpuPool)."""
    if not gpus:
        return None
    from harness.run.shard import history_costs

    ids = [c.case_id for c in cases]
    db = Path(costs_source) if costs_source and costs_source != "none" else Path(out_dir) / "history.sqlite"
    costs = {} if costs_source == "none" else history_costs(db, ids)
    reference = history_costs(Path(out_dir) / "history.sqlite", ids, pooled=False)
    return GpuPool(cases, run_one, gpus, costs, reference=reference, held=held, derive=derive, known=known,
                   on_start=on_start)


def _segments(records: Sequence[Record]) -> dict[str, list[tuple[Record, dict[str, Any]]]]:
    out: dict[str, list[tuple[Record, dict[str, Any]]]] = {}
    for record in records:
        slot = (record.worker or {}).get("gpu_pool")
        if isinstance(slot, dict):
            out.setdefault(str(slot.get("pool")), []).append((record, slot))
    return out


def scaling_efficiency(serial_s: float, n_gpus: int, wall_s: float) -> float | None:
    """(serial seconds / GPUs) / wall seconds: 1.0 is linear, 0.85 is 85% of linear."""
    if wall_s <= 0 or n_gpus < 1:
        return None
    return serial_s / n_gpus / wall_s


def pool_summary(records: Sequence[Record]) -> dict[str, Any] | None:
    """`config.multi_gpu` from the records' `worker.gpu_pool` stamps (None: no pooled record).

    A run resumed after an interruption has one pool per call (segment); their walls and
    busy times add up. Per GPU: busy = seconds it ran cases, idle = pool wall - busy, busy
    share = busy / wall, overhead = busy - its cases' worker walls (the GPU's fork server
    import on its first case, worker start-up, record handling). Scaling efficiency (EFFICIENCY_DEFINITION) is given against two
    one-GPU figures for the same cases: the history store's median wall of each case
    measured one worker at a time (`vs_history`, only when the store knows every case: it
    includes what running 8 at once costs each case, host contention), and this run's own
    per-case walls (`vs_own_walls`: what the scheduler lost to idle GPUs alone)."""
    segments = _segments(records)
    if not segments:
        return None
    wall = 0.0
    busy: dict[int, float] = {}
    worker: dict[int, float] = {}  # the cases' own worker walls, per GPU
    cases: dict[int, int] = {}
    walls_sum, history_sum, history_known = 0.0, 0.0, 0
    n_cases = 0
    sources: dict[str, int] = {}
    for items in segments.values():
        gpus = [int(g) for g in items[0][1].get("gpus") or []]
        for g in gpus:
            busy.setdefault(g, 0.0)
            cases.setdefault(g, 0)
        wall += max(float(slot["end_s"]) for _, slot in items)
        for record, slot in items:
            gpu = int(record.worker.get("gpu", -1))
            busy[gpu] = busy.get(gpu, 0.0) + float(slot["end_s"]) - float(slot["start_s"])
            cases[gpu] = cases.get(gpu, 0) + 1
            worker[gpu] = worker.get(gpu, 0.0) + float(record.worker.get("wall_s") or 0.0)
            walls_sum += float(record.worker.get("wall_s") or 0.0)
            if slot.get("one_gpu_s") is not None:
                history_sum += float(slot["one_gpu_s"])
                history_known += 1
            sources[str(slot.get("expected_from"))] = sources.get(str(slot.get("expected_from")), 0) + 1
            n_cases += 1
    n_gpus = len(busy)
    per_gpu = [{"gpu": g, "cases": cases[g], "busy_s": round(busy[g], 3), "idle_s": round(max(wall - busy[g], 0.0), 3),
                "busy_share": round(busy[g] / wall, 4) if wall > 0 else None,
                # busy beyond the cases' worker walls: the GPU's fork server start, worker start-up, record handling
                "overhead_s": round(max(busy[g] - worker.get(g, 0.0), 0.0), 3)} for g in sorted(busy)]
    shares = [p["busy_share"] for p in per_gpu if p["busy_share"] is not None]
    own = scaling_efficiency(walls_sum, n_gpus, wall)
    vs_history = scaling_efficiency(history_sum, n_gpus, wall) if history_known == n_cases else None
    return {
        "gpus": sorted(busy), "n_gpus": n_gpus, "cases": n_cases, "segments": len(segments),
        "wall_s": round(wall, 3), "per_gpu": per_gpu,
        "busy_share_mean": round(statistics.fmean(shares), 4) if shares else None,
        "busy_share_min": round(min(shares), 4) if shares else None,
        "order": {"method": "longest expected first, each GPU pulls the next case when free",
                  "expected_from": sources},
        "scaling": {
            "definition": EFFICIENCY_DEFINITION,
            "vs_own_walls": {"one_gpu_s": round(walls_sum, 3), "efficiency": _round(own),
                             "speedup": _round(walls_sum / wall if wall > 0 else None),
                             "source": "this run's per-case worker walls (record.worker.wall_s), summed"},
            "vs_history": {"one_gpu_s": round(history_sum, 3) if vs_history is not None else None,
                           "efficiency": _round(vs_history),
                           "speedup": _round(history_sum / wall if vs_history is not None and wall > 0 else None),
                           "cases_known": history_known,
                           "source": "history store: median worker wall per case over records run one at a time "
                                     "(no --gpus pool)" + ("" if vs_history is not None else
                                                           f"; only {history_known}/{n_cases} cases known: not given")},
        },
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
