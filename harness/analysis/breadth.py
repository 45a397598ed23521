"""The headline at breadth, as PyTorch's HUD reads a model suite.

Per suite x device x compiler: pass rate (ok / all, with the counts), geomean speedup over
the passing cases, mean cold compile time, memory compression (geomean of eager peak /
compiled peak over the passing cases), total graph breaks, and the failures grouped by
status (and, inside a status, by exception type; skips by their reason). The same rows
feed the HTML report, `compilebench show`, the compare summary and the dashboard.

A case's *family* (the model family a zoo suite groups by) is `metrics["family"]` when the
suite wrote one, else derived from the workload name (`workload_family`): the last `/` part
(hub names), without a leading namespace that is a part of the suite's name (`hf-` in
`hf`, `zoo-` in `transformers-zoo`, `timm-` in `timm-2.11`; `hf-`, `zoo-`, `timm-` and
`diffusers-` in any suite, e.g. `breadth-ci`, which mixes them); a CamelCase class name is cut
before `For`/`Model`/`LMHeadModel` (`hf-MBartForCausalLM` -> `mbart`), anything else at
its first `-`, `_` or `.` with a version tail dropped (`llama-3.1-8b` -> `llama`,
`timm-resnet50d` -> `resnet`, `convnextv2_atto` -> `convnext`, `zoo-albert-masked` ->
`albert`, `Qwen3-0.6B` -> `qwen`); lower-cased.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.analysis.compare import Comparison
from harness.model.schema import Record
from harness.model.stats import geomean

# the order a reader scans failures in: the process died, then the compiler broke, then the numbers
FAILURE_ORDER = ("crashed", "timeout", "oom", "fail_compile", "fail_run", "fail_accuracy", "skipped")
REASON_CHARS = 120  # a skip reason is one line of a table cell
_VERSION_TAIL = re.compile(r"v?\d+[a-z]?$")
_CLASS_NAME = re.compile(r"^([A-Z][A-Za-z0-9]*?)(For[A-Z]\w*|LMHeadModel|Model)$")
# the namespaces the breadth suites' workload names start with: stripped in any suite, since a
# run that mixes them (breadth-ci, or `run -w hf-...,zoo-...`) has no suite name that names them
WORKLOAD_NAMESPACES = frozenset({"hf", "zoo", "timm", "diffusers"})


def workload_family(workload: str, suite: str = "") -> str:
    """The family a workload name implies (see the module docstring)."""
    name = workload.strip().rsplit("/", 1)[-1]
    # a suite's namespace prefix: `hf-` in suite hf, `zoo-` in transformers-zoo, `timm-` in timm-2.11
    prefixes = {p.lower() for p in re.split(r"[-_]", suite) if p and not p[0].isdigit()} | WORKLOAD_NAMESPACES
    head, sep, rest = name.partition("-")
    if sep and rest and not rest[0].isdigit() and head.lower() in prefixes:
        name = rest
    match = _CLASS_NAME.match(name)
    if match:
        return match.group(1).lower()
    first = re.split(r"[-_.]", name, maxsplit=1)[0]
    stripped = _VERSION_TAIL.sub("", first)  # resnet50 -> resnet, convnextv2 -> convnext, botnet26t -> botnet
    return (stripped or first or workload).lower()


def family_of(record: Record) -> str:
    """A record's model family: what the suite recorded, else derived from the workload name."""
    family = (record.metrics or {}).get("family")
    return family if isinstance(family, str) and family else workload_family(record.case.workload, record.case.suite)


def failure_reason(record: Record) -> str:
    """What groups a failure inside its status: a skip's message (why it was skipped, one
    line), else the exception type (`BackendCompilerFailed`, `Timeout`, ...)."""
    error = record.error
    if error is None:
        return "no error recorded"
    if record.status == "skipped":
        message = (error.get("message") or "").strip().splitlines()
        text = message[0] if message else (error.get("type") or "no reason recorded")
        return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."
    return error.get("type") or "unknown error"


@dataclass(frozen=True)
class FailureGroup:
    """Cases of one status failing for one reason."""

    status: str
    reason: str
    cases: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.cases)


@dataclass(frozen=True)
class StatusCount:
    """One status's failures in a row, split by reason (most frequent first)."""

    status: str
    groups: tuple[FailureGroup, ...]

    @property
    def count(self) -> int:
        return sum(g.count for g in self.groups)


@dataclass(frozen=True)
class Excluded:
    """A case left out of a row's geomeans, and why."""

    case_id: str
    reason: str


@dataclass(frozen=True)
class BreadthRow:
    """The headline of one suite x device x compiler."""

    suite: str
    device: str
    compiler: str
    cases: int
    ok: int
    geomean_speedup: float | None
    geomean_cases: int  # cases the speedup and compression geomeans are over
    mean_compile_s: float | None
    compile_cases: int
    memory_compression: float | None
    graph_breaks: int  # summed over every case that reported a count
    failures: tuple[StatusCount, ...] = ()
    geomean_excluded: tuple[Excluded, ...] = ()

    @property
    def pass_rate(self) -> float:
        return self.ok / self.cases if self.cases else 0.0

    @property
    def failed(self) -> int:
        return self.cases - self.ok

    def failure_text(self, max_reasons: int = 3) -> str:
        """'fail_compile 3 (BackendCompilerFailed 2, Unsupported 1); skipped 1 (needs a tokenizer)'."""
        parts = []
        for s in self.failures:
            reasons = ", ".join(f"{g.reason} {g.count}" for g in s.groups[:max_reasons])
            more = f", +{len(s.groups) - max_reasons} more" if len(s.groups) > max_reasons else ""
            parts.append(f"{s.status} {s.count} ({reasons}{more})")
        return "; ".join(parts)


def status_counts(records: Iterable[Record]) -> tuple[StatusCount, ...]:
    """Failures (every status but ok) grouped by status in FAILURE_ORDER, then by reason."""
    by: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r.status != "ok":
            by[r.status][failure_reason(r)].append(r.case_id)
    order = {s: i for i, s in enumerate(FAILURE_ORDER)}
    out = []
    for status in sorted(by, key=lambda s: (order.get(s, len(order)), s)):
        groups = sorted((FailureGroup(status, reason, tuple(ids)) for reason, ids in by[status].items()),
                        key=lambda g: (-g.count, g.reason))
        out.append(StatusCount(status, tuple(groups)))
    return tuple(out)


def _compression(r: Record) -> float | None:
    e, c = (r.eager or {}).get("peak_memory_bytes"), (r.compiled or {}).get("peak_memory_bytes")
    if isinstance(e, (int, float)) and isinstance(c, (int, float)) and e > 0 and c > 0:
        return float(e) / float(c)
    ratio = (r.metrics or {}).get("compression_ratio")
    return float(ratio) if isinstance(ratio, (int, float)) and ratio > 0 else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _excluded_reason(r: Record, base_status: Mapping[str, str] | None) -> str | None:
    if r.status != "ok":
        return r.status
    if base_status is None:
        return None
    if r.case_id not in base_status:
        return "not in the baseline"
    return None if base_status[r.case_id] == "ok" else f"{base_status[r.case_id]} in the baseline"


def breadth_row(suite: str, device: str, compiler: str, records: Sequence[Record],
                base_status: Mapping[str, str] | None = None) -> BreadthRow:
    """One row. With `base_status` (case id -> status in a baseline) the geomeans count only
    cases passing on both sides, so an unrelated model starting to fail cannot move them."""
    ok = [r for r in records if r.status == "ok"]
    excluded, counted = [], []
    for r in records:
        reason = _excluded_reason(r, base_status)
        (counted.append(r) if reason is None else excluded.append(Excluded(r.case_id, reason)))
    compile_times = [t for r in ok if (t := _number((r.metrics or {}).get("compile_time_s"))) is not None]
    breaks = [int(b) for r in records if (b := _number((r.metrics or {}).get("graph_breaks"))) is not None]
    return BreadthRow(
        suite=suite, device=device, compiler=compiler, cases=len(records), ok=len(ok),
        geomean_speedup=geomean([_number((r.metrics or {}).get("speedup")) for r in counted]),  # type: ignore[misc]
        geomean_cases=len(counted),
        mean_compile_s=sum(compile_times) / len(compile_times) if compile_times else None,
        compile_cases=len(compile_times),
        memory_compression=geomean([_compression(r) for r in counted]),  # type: ignore[misc]
        graph_breaks=sum(breaks), failures=status_counts(records), geomean_excluded=tuple(excluded))


def suite_name(record: Record) -> str:
    return record.case.suite or "adhoc"


def breadth_rows(records: Iterable[Record], base_status: Mapping[str, str] | None = None) -> list[BreadthRow]:
    """One row per suite x device x compiler, sorted by those names."""
    groups: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for r in records:
        groups[(suite_name(r), r.case.device, r.case.compiler)].append(r)
    return [breadth_row(*key, recs, base_status) for key, recs in sorted(groups.items())]


# ---------------------------------------------------------------- text forms

def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _s(value: float | None) -> str:
    return "-" if value is None else (f"{value:.2f}s" if value >= 1 else f"{value * 1e3:.0f}ms")


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def row_cells(row: BreadthRow) -> list[str]:
    """The cells `show` and the markdown print, in BREADTH_COLUMNS order."""
    return [row.suite, row.device, row.compiler, f"{row.pass_rate:.0%} ({row.ok}/{row.cases})",
            _x(row.geomean_speedup) + (f" ({row.geomean_cases})" if row.geomean_cases != row.ok else ""),
            _s(row.mean_compile_s), _x(row.memory_compression), str(row.graph_breaks), row.failure_text() or "-"]


BREADTH_COLUMNS = ("suite", "device", "compiler", "pass rate", "geomean speedup", "mean cold compile",
                   "memory compression", "graph breaks", "failures")


def markdown_lines(rows: Sequence[BreadthRow], title: str = "### Headline by suite") -> list[str]:
    """A markdown table of the rows (empty when there are none)."""
    if not rows:
        return []
    lines = [title, "", "| " + " | ".join(BREADTH_COLUMNS) + " |", "|---|---|---|--:|--:|--:|--:|--:|---|"]
    lines += ["| " + " | ".join(_md(c) for c in row_cells(r)) + " |" for r in rows]
    return [*lines, ""]


# ---------------------------------------------------------------- compare summary

@dataclass(frozen=True)
class CompareRow:
    """One suite x device x compiler across a comparison (head vs base)."""

    suite: str
    device: str
    compiler: str
    cases: int
    ok_base: int
    ok_head: int
    base_cases: int
    head_cases: int
    geomean_speedup_base: float | None  # over cases ok on both sides
    geomean_speedup_head: float | None
    both_ok: int
    now_failing: tuple[str, ...] = field(default_factory=tuple)
    contended_left_out: int = 0  # ok on both sides but timed on a contended machine: not in the geomeans
    now_passing: tuple[str, ...] = field(default_factory=tuple)


def _case_parts(case_id: str) -> tuple[str, str]:
    parts = case_id.split("/")
    return (parts[2], parts[3].split(":")[0]) if len(parts) >= 4 else ("?", "?")


def compare_rows(cmp: Comparison) -> list[CompareRow]:
    """Pass counts and geomean speedups per suite x device x compiler of a comparison."""
    groups: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for c in cmp.cases:
        compiler, device = _case_parts(c.case_id)
        groups[(c.suite or "adhoc", device, compiler)].append(c)
    rows = []
    for (suite, device, compiler), cases in sorted(groups.items()):
        ok_both = [c for c in cases if c.status_base == "ok" and c.status_head == "ok"]
        both = [c for c in ok_both if not c.timed_contended]  # as compare's own geomean: run-queue timings left out
        pairs = [(m.base, m.head) for c in both if (m := c.metric("speedup")) is not None
                 and isinstance(m.base, float) and isinstance(m.head, float)]
        rows.append(CompareRow(
            suite, device, compiler, len(cases),
            ok_base=sum(c.status_base == "ok" for c in cases), ok_head=sum(c.status_head == "ok" for c in cases),
            base_cases=sum(c.status_base is not None for c in cases),
            head_cases=sum(c.status_head is not None for c in cases),
            geomean_speedup_base=geomean([b for b, _ in pairs]), geomean_speedup_head=geomean([h for _, h in pairs]),
            both_ok=len(pairs), contended_left_out=len(ok_both) - len(both),
            now_failing=tuple(c.case_id for c in cases if c.status_base == "ok" and c.status_head not in (None, "ok")),
            now_passing=tuple(c.case_id for c in cases if c.status_head == "ok" and c.status_base not in (None, "ok"))))
    return rows


def _left_out(row: CompareRow) -> str:
    return f"; {row.contended_left_out} contended left out" if row.contended_left_out else ""


def _rate(ok: int, n: int) -> str:
    return f"{ok / n:.0%} ({ok}/{n})" if n else "-"


def compare_markdown_lines(cmp: Comparison, max_listed: int = 10) -> list[str]:
    """The compare summary's breadth table: per suite x device x compiler, pass rate base ->
    head and geomean speedup over the cases ok on both sides and not timed on a contended
    machine (how many were left out for that is said); the cases that started or
    stopped failing are named (up to `max_listed` per row)."""
    rows = compare_rows(cmp)
    if not rows:
        return []
    lines = ["### Pass rate and geomean by suite", "",
             "| suite | device | compiler | pass base | pass head | geomean speedup base -> head (cases ok on both) | now failing | now passing |",
             "|---|---|---|--:|--:|--:|--:|--:|"]
    for r in rows:
        lines.append(f"| {_md(r.suite)} | {_md(r.device)} | {_md(r.compiler)} | {_rate(r.ok_base, r.base_cases)} | "
                     f"{_rate(r.ok_head, r.head_cases)} | {_x(r.geomean_speedup_base)} -> {_x(r.geomean_speedup_head)} "
                     f"({r.both_ok}{_left_out(r)}) | {len(r.now_failing)} | {len(r.now_passing)} |")
    named = [(r, "now failing", r.now_failing) for r in rows if r.now_failing]
    named += [(r, "now passing", r.now_passing) for r in rows if r.now_passing]
    if named:
        lines.append("")
    for r, what, ids in named:
        listed = ", ".join(f"`{_md(i)}`" for i in ids[:max_listed])
        more = f" and {len(ids) - max_listed} more" if len(ids) > max_listed else ""
        lines.append(f"- {_md(r.suite)} / {_md(r.device)} / {_md(r.compiler)} {what}: {listed}{more}")
    return [*lines, ""]


# ---------------------------------------------------------------- subsets for CI

def one_per_family(workloads: Iterable[str], families: Mapping[str, str] | None = None, per_family: int = 1,
                   suite: str = "", limit: int | None = None) -> list[str]:
    """The first `per_family` workloads (in sorted order) of each family: the small subset CI
    checks against the expected file. `families` maps a workload to its recorded family
    (e.g. from an expected file); others get `workload_family(name, suite)`. With `limit`,
    that many families, spread evenly over the sorted family names (a zoo has ~170)."""
    families = families or {}
    taken: dict[str, list[str]] = defaultdict(list)
    for w in sorted(set(workloads)):
        fam = families.get(w) or workload_family(w, suite)
        if len(taken[fam]) < per_family:
            taken[fam].append(w)
    names = sorted(taken)
    if limit is not None and len(names) > limit:
        names = [names[i * len(names) // limit] for i in range(limit)]
    return sorted(w for name in names for w in taken[name])
