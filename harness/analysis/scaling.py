"""Is a `--gpus all` run the same run as its `--shard i/N` + `merge` twin, and how well did it scale?

`check_runs(a, b)` compares two runs of one plan case for case: the same case ids, and per
case the same status, graph breaks (total and unique) and accuracy verdict. Those are facts
of the compiler, not of the machine, so where they differ the scheduler changed what was
measured. The figures (latency, speedup, compile time, memory) are judged by compare's
verdicts: agreeing within noise means a verdict of the PASS/WARN kind that says nothing moved
beyond noise (`unchanged`, `noisy`, `machine drift`, `still failing`, `n/a`); a contended case
cannot be judged and is listed apart.

`scaling_row` is one row of docs/SCALING.md's table: the `--gpus all` run's wall and busy
shares, against the one-GPU figure of the same cases (the case walls measured by runs that ran
one case at a time: the shards), with multigpu.EFFICIENCY_DEFINITION.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.compare import compare_runs
from harness.analysis.verdicts import Verdict
from harness.model.schema import Record, Run
from harness.run.multigpu import EFFICIENCY_DEFINITION, scaling_efficiency

__all__ = ["CaseDifference", "RunCheck", "check_runs", "case_facts", "case_walls", "scaling_row",
           "WITHIN_NOISE", "EFFICIENCY_DEFINITION"]

# figures that did not move beyond what the measurement can tell apart
WITHIN_NOISE = frozenset({Verdict.UNCHANGED, Verdict.NOISY, Verdict.MACHINE_DRIFT, Verdict.STILL_FAILING,
                          Verdict.NOT_APPLICABLE})


@dataclass(frozen=True)
class CaseDifference:
    case_id: str
    what: str  # status, graph_breaks, unique_graph_breaks, accuracy
    a: Any
    b: Any


@dataclass
class RunCheck:
    a_id: str
    b_id: str
    common: int = 0
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    differences: list[CaseDifference] = field(default_factory=list)
    figures: list[tuple[str, str, str]] = field(default_factory=list)  # (case id, verdict, note) beyond noise
    contended: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def same_cases(self) -> bool:
        """Same case ids, statuses, graph breaks and accuracy."""
        return not (self.only_in_a or self.only_in_b or self.differences)

    @property
    def figures_agree(self) -> bool:
        return not self.figures

    def _figures_word(self) -> str:
        judged = self.common - len(self.contended)
        if self.figures:
            return f"{len(self.figures)} of {judged} judged beyond noise"
        if not judged:
            return "NOT JUDGED (every common case contended)"
        return "within noise" + (f" ({len(self.contended)} contended, not judged)" if self.contended else "")

    def lines(self) -> list[str]:
        head = (f"{self.a_id} vs {self.b_id}: {self.common} common case(s); "
                f"case for case: {'SAME' if self.same_cases else 'DIFFERENT'}; "
                f"figures: {self._figures_word()}")
        out = [head]
        out += [f"  only in {self.a_id}: {c}" for c in self.only_in_a]
        out += [f"  only in {self.b_id}: {c}" for c in self.only_in_b]
        out += [f"  {d.case_id}: {d.what} {d.a!r} vs {d.b!r}" for d in self.differences]
        out += [f"  {cid}: figures {verdict}{f' ({note})' if note else ''}" for cid, verdict, note in self.figures]
        out += [f"  {cid}: machine contended, figures not judged" for cid in self.contended]
        out += [f"  warning: {w}" for w in self.warnings]
        return out


def case_facts(record: Record) -> dict[str, Any]:
    """What must not depend on how cases were spread over GPUs."""
    metrics = record.metrics or {}
    return {"status": record.status, "graph_breaks": metrics.get("graph_breaks"),
            "unique_graph_breaks": metrics.get("unique_graph_breaks"),
            "accuracy": (metrics.get("accuracy") or {}).get("status")}


def check_runs(a: Run, b: Run, *, allow_mismatch: bool = False) -> RunCheck:
    """Compare two runs of one plan case for case (module docstring)."""
    ra = {r.case_id: r for r in a.records}
    rb = {r.case_id: r for r in b.records}
    check = RunCheck(a.run_id, b.run_id, only_in_a=sorted(set(ra) - set(rb)), only_in_b=sorted(set(rb) - set(ra)))
    common = sorted(set(ra) & set(rb))
    check.common = len(common)
    for cid in common:
        fa, fb = case_facts(ra[cid]), case_facts(rb[cid])
        check.differences += [CaseDifference(cid, k, fa[k], fb[k]) for k in fa if fa[k] != fb[k]]
    if not common:
        return check
    comparison = compare_runs([a], [b], allow_mismatch=allow_mismatch)
    check.warnings = list(comparison.warnings)
    for case in comparison.cases:
        if case.case_id not in ra or case.case_id not in rb:
            continue
        verdict = Verdict(case.verdict)
        if verdict is Verdict.MACHINE_CONTENDED:
            check.contended.append(case.case_id)
        elif verdict not in WITHIN_NOISE and case.status_base == case.status_head:
            moved = [f"{m.metric} {m.change:+.1%}" for m in case.metrics
                     if m.change is not None and Verdict(m.verdict) not in WITHIN_NOISE and m.metric != "graph_breaks"]
            check.figures.append((case.case_id, str(verdict), ", ".join(moved)))
    return check


def case_walls(runs: Sequence[Run]) -> dict[str, float]:
    """Worker wall seconds per case id of runs that ran one case at a time (shards)."""
    out: dict[str, float] = {}
    for run in runs:
        for record in run.records:
            wall = (record.worker or {}).get("wall_s")
            if wall is not None:
                out[record.case_id] = float(wall)
    return out


def scaling_row(suite: str, gpus_run: Run, one_gpu_walls: Mapping[str, float], *,
                shard_runs: Sequence[Run] = (), check: RunCheck | None = None) -> dict[str, Any]:
    """One row of the scaling table (None where a figure is missing, never a guess)."""
    summary = gpus_run.config.get("multi_gpu") or {}
    ids = [r.case_id for r in gpus_run.records]
    known = [c for c in ids if c in one_gpu_walls]
    one_gpu = sum(one_gpu_walls[c] for c in known) if known and len(known) == len(ids) else None
    wall = summary.get("wall_s")
    n = summary.get("n_gpus") or 0
    eff = scaling_efficiency(one_gpu, n, wall) if one_gpu is not None and wall else None
    shard_walls = [float(r.config.get("wall_s") or 0.0) for r in shard_runs]
    return {
        "suite": suite, "cases": len(ids), "gpus": n,
        "ok": sum(1 for r in gpus_run.records if r.status == "ok"),
        "wall_s": wall, "run_wall_s": gpus_run.config.get("wall_s"),
        "one_gpu_s": None if one_gpu is None else round(one_gpu, 1),
        "one_gpu_cases": f"{len(known)}/{len(ids)}",
        "speedup": None if eff is None else round(one_gpu / wall, 2),
        "efficiency": None if eff is None else round(eff, 3),
        "busy_share_mean": summary.get("busy_share_mean"), "busy_share_min": summary.get("busy_share_min"),
        "shards": len(shard_runs), "shards_wall_s": max(shard_walls) if shard_walls else None,
        "same_cases": None if check is None else check.same_cases,
        "figures_agree": None if check is None else check.figures_agree,
        "definition": EFFICIENCY_DEFINITION,
    }
