"""Render a Comparison: rich terminal table, GitHub-flavoured markdown, JSON.

The markdown is written for a PR comment or a job summary: the verdict line first, then
the cases that need attention (regressions, now failing, noisy) in a table, the cases
missing in head, the ones compare could not judge (machine contended) and the ones that
failed on both sides (still failing) in sections of their own, and everything else inside a collapsible <details> block so a clean PR stays one
screen long.

The terminal table keeps every case id and verdict whole at any width (their columns never
shrink below their longest entry; the notes wrap instead): CI logs are not terminals, and
`make_console()` gives them a wide, non-wrapping console.
"""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table
from rich.text import Text

from harness.analysis.breadth import compare_markdown_lines
from harness.analysis.compare import (
    CaseResult,
    Comparison,
    MetricResult,
    contention_text,
)
from harness.analysis.comparison import GateDecision
from harness.analysis.verdicts import Outcome, Verdict
from harness.report.display import fmt_bytes, fmt_seconds

# shown in the open under "Needs attention", with every case the gate failed whatever its verdict
# (--fail-on may name a warn verdict); the rest folds into "All other cases"
ATTENTION = (Verdict.REGRESSION, Verdict.SLOWER_EAGER_TOO, Verdict.NOW_FAILING, Verdict.SLOWER_EAGER_TOO_NO_PROBE,
             Verdict.NOISY, Verdict.EAGER_FASTER, Verdict.EAGER_SLOWER)
# verdicts with a markdown section of their own (a list, not metric rows: there is nothing to compare)
OWN_SECTION = (Verdict.MISSING, Verdict.MACHINE_CONTENDED, Verdict.STILL_FAILING)
STYLE = {Verdict.REGRESSION: "bold red", Verdict.SLOWER_EAGER_TOO: "bold red", Verdict.NOW_FAILING: "bold red", Verdict.MISSING: "bold red", Verdict.MACHINE_CONTENDED: "bold magenta",
         Verdict.SLOWER_EAGER_TOO_NO_PROBE: "yellow", Verdict.NOISY: "yellow", Verdict.MACHINE_DRIFT: "cyan", Verdict.EAGER_FASTER: "magenta", Verdict.EAGER_SLOWER: "magenta", Verdict.IMPROVEMENT: "green", Verdict.FASTER_EAGER_TOO: "green", Verdict.NOW_PASSING: "green"}
EMOJI = {Verdict.REGRESSION: ":red_circle:", Verdict.SLOWER_EAGER_TOO: ":orange_circle:", Verdict.NOW_FAILING: ":x:", Verdict.MISSING: ":no_entry:", Verdict.MACHINE_CONTENDED: ":construction:",
         Verdict.SLOWER_EAGER_TOO_NO_PROBE: ":warning:", Verdict.NOISY: ":grey_question:", Verdict.MACHINE_DRIFT: ":thermometer:", Verdict.EAGER_FASTER: ":information_source:",
         Verdict.EAGER_SLOWER: ":information_source:", Verdict.IMPROVEMENT: ":green_circle:",
         Verdict.FASTER_EAGER_TOO: ":green_circle:", Verdict.NOW_PASSING: ":white_check_mark:",
         Verdict.STILL_FAILING: ":heavy_multiplication_x:"}


def fmt_value(metric: str, value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if metric in ("latency", "compile_time"):
        return fmt_seconds(value)
    if metric in ("peak_memory", "compile_host_memory"):
        return fmt_bytes(int(value))
    if metric == "speedup":
        return f"{value:.3f}x"
    return f"{value:g}"


def fmt_change(m: MetricResult) -> str:
    if m.change is None:
        return "-"
    if m.metric in ("graph_breaks", "recompiles"):
        return f"{m.change:+g}"
    text = f"{m.change:+.1%}"
    if m.ci is not None:
        text += f" [{m.ci[0] - 1:+.1%}, {m.ci[1] - 1:+.1%}]"
    return text


def fmt_threshold(m: MetricResult) -> str:
    if m.metric == "accuracy":
        return "pass->fail"
    if m.threshold is None:
        return "off"
    if m.threshold == 0 and m.metric in ("graph_breaks", "recompiles"):
        return "any increase"
    if isinstance(m.threshold, float):
        return f"{m.threshold:.0%}" if m.threshold * 100 == int(m.threshold * 100) else f"{m.threshold:.1%}"
    return f"+{m.threshold}"


def _status_note(case: CaseResult) -> str:
    if case.verdict == Verdict.MISSING:
        return "measured in base, not in head"
    if case.status_base is None:
        return "new in head"
    return f"status {case.status_base} -> {case.status_head}"


def headline(cmp: Comparison, failing: list[CaseResult] | GateDecision) -> str:
    """The verdict line: FAIL / CANNOT JUDGE / PASS, why, and the counts."""
    decision = failing if isinstance(failing, GateDecision) else cmp.decide(failing)
    counts = ", ".join(f"{n} {v}" for v, n in cmp.counts().items())
    warned = sum(1 for c in cmp.cases if c.warn_only)
    state = {Outcome.FAIL: "FAIL", Outcome.CANNOT_JUDGE: "CANNOT JUDGE"}.get(decision.outcome, "PASS")
    state = f"{state}: {decision.reason}"
    if warned:
        state += f" ({warned} warn-only)"
    return f"{state} ({len(cmp.cases)} cases: {counts})" if cmp.cases else state


def geomean_line(cmp: Comparison, max_listed: int = 10) -> str:
    """The geomean summary: over cases present and ok on both sides only, excluded named."""
    g = cmp.geomeans()
    parts = [f"{name} {_ratio_text(g[name]['ratio'])}" for name in ("latency", "speedup") if g[name]["ratio"] is not None]
    text = f"geomean head/base over the {g['cases']} case(s) present and passing on both sides: " + (
        ", ".join(parts) if parts else "no timing to summarise")
    if g["excluded"]:
        listed = "; ".join(f"{e['case_id']} ({e['reason']})" for e in g["excluded"][:max_listed])
        more = f"; and {len(g['excluded']) - max_listed} more" if len(g["excluded"]) > max_listed else ""
        text += f". Excluded {len(g['excluded'])}: {listed}{more}"
    return text


def _ratio_text(ratio: float) -> str:
    return f"x{ratio:.3f} ({ratio - 1:+.1%})"


def _interesting_metrics(case: CaseResult) -> list[MetricResult]:
    """The metrics worth a row: those that changed verdict, else none."""
    return [m for m in case.metrics if m.verdict not in (Verdict.UNCHANGED, Verdict.NOT_APPLICABLE)]


# ---------------------------------------------------------------- terminal

def terminal_table(cmp: Comparison, show_all: bool = False) -> Table:
    table = Table(title=f"compare {', '.join(cmp.base['run_ids'])} -> {', '.join(cmp.head['run_ids'])}")
    # case ids and verdicts are what a CI log is grepped for: never cut or wrapped
    whole = {"case": max([len("case"), *(len(c.case_id) for c in cmp.cases)]),
             "verdict": max([len("verdict"), *(len(str(c.verdict)) for c in cmp.cases)]), "metric": len("compile_host_memory")}
    for col, just in (("case", "left"), ("verdict", "left"), ("metric", "left"), ("base", "right"),
                      ("head", "right"), ("change [CI]", "right"), ("p", "right"), ("threshold", "right"),
                      ("note", "left")):
        if col == "note":  # the one column that wraps (at words) when the width runs out
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        else:
            table.add_column(col, justify=just, no_wrap=True, min_width=whole.get(col))  # type: ignore[arg-type]
    for case in cmp.cases:
        rows = _interesting_metrics(case) or (case.metrics[:2] if show_all else [])
        verdict = Text(case.verdict, style=STYLE.get(case.verdict, ""))
        if not rows:
            if show_all or case.verdict != Verdict.UNCHANGED:
                note = case.error or _status_note(case)
                table.add_row(Text(case.case_id), verdict, "status", case.status_base or "-", case.status_head or "-",
                              "", "", "", Text(note))
            continue
        for i, m in enumerate(rows):
            table.add_row(Text(case.case_id) if i == 0 else "", verdict if i == 0 else "", m.metric,
                          fmt_value(m.metric, m.base), fmt_value(m.metric, m.head), fmt_change(m),
                          f"{m.p_value:.2g}" if m.p_value is not None else "-", fmt_threshold(m), Text(m.note))
    return table


# ---------------------------------------------------------------- markdown

def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _md_rows(cases: list[CaseResult], all_metrics: bool) -> list[str]:
    rows = ["| case | verdict | metric | base | head | change [CI] | p | threshold |",
            "|---|---|---|--:|--:|--:|--:|--:|"]
    for case in cases:
        metrics = case.metrics if all_metrics else _interesting_metrics(case)
        verdict = f"{EMOJI.get(case.verdict, '')} {case.verdict}".strip()
        if not metrics:
            detail = _md_escape(case.error) if case.error else _status_note(case)
            rows.append(f"| `{_md_escape(case.case_id)}` | {verdict} | status | {case.status_base or '-'} | "
                        f"{case.status_head or '-'} | {detail} | | |")
            continue
        for i, m in enumerate(metrics):
            name = f"`{_md_escape(case.case_id)}`" if i == 0 else ""
            rows.append(f"| {name} | {verdict if i == 0 else ''} | {m.metric} | {fmt_value(m.metric, m.base)} | "
                        f"{fmt_value(m.metric, m.head)} | {fmt_change(m)} | "
                        f"{f'{m.p_value:.2g}' if m.p_value is not None else '-'} | {fmt_threshold(m)} |")
    return rows


def markdown(cmp: Comparison, failing: list[CaseResult], title: str = "compilebench gate") -> str:
    lines = [f"## {title}", "", f"**{headline(cmp, failing)}**", ""]
    lines.append(f"base: `{', '.join(cmp.base['run_ids'])}` (torch {cmp.base.get('torch')}) · "
                 f"head: `{', '.join(cmp.head['run_ids'])}` (torch {cmp.head.get('torch')}) · "
                 f"thresholds: `{cmp.thresholds_source}`")
    lines += ["", _md_escape(geomean_line(cmp)), ""]
    for warning in cmp.warnings:
        lines += [f"> [!WARNING]\n> {_md_escape(warning)}", ""]
    lines += _missing_section(cmp)
    lines += _contended_section(cmp)
    lines += _still_failing_section(cmp, failing)
    failed = {id(c) for c in failing}
    attention = [c for c in cmp.cases if c.verdict not in OWN_SECTION and (c.verdict in ATTENTION or id(c) in failed)]
    if attention:
        lines += ["### Needs attention", "", *_md_rows(attention, all_metrics=False), ""]
        flagged = [c for c in attention if c.flags]
        for c in flagged:
            lines.append(f"- `{_md_escape(c.case_id)}`: " + "; ".join(_md_escape(f) for f in c.flags))
        if flagged:
            lines.append("")
    lines += compare_markdown_lines(cmp)  # pass rate and geomean per suite x compiler (analysis/breadth.py)
    shown = {id(c) for c in attention}
    rest = [c for c in cmp.cases if id(c) not in shown and c.verdict not in OWN_SECTION]
    if rest:
        lines += [f"<details><summary>All other cases ({len(rest)})</summary>", "",
                  *_md_rows(rest, all_metrics=True), "", "</details>", ""]
    lines.append("Verdicts need a significant Mann-Whitney U test, a bootstrap CI of head/base that excludes 1, "
                 "and a change beyond the threshold. `regression`: the compiled code changed, eager did not. "
                 "`slower (eager too)`: eager changed with it on a steady machine (torch or the model). "
                 "`slower (eager too; no probe)`: the same, but no usable machine probe says the machine held "
                 "still (warns, does not fail by default). "
                 "`machine drift`: the machine-speed probe moved and nothing is left after normalising. "
                 "`noisy`: the spread is too high to decide a change of the threshold's size. "
                 "`missing`: measured in base, not in head (fails unless `missing = \"warn\"` / `--missing warn`). "
                 "`still failing`: failed in base and in head: not this change's regression, passes unless "
                 "`still_failing = \"fail\"` / `--still-failing fail`. "
                 "`machine contended`: the case's threads waited for a core while it was timed (the worker's "
                 "run-queue measurement): its timings cannot be judged (exit 3 unless `contended = \"warn\"` / "
                 "`--contended warn`).")
    return "\n".join(lines) + "\n"


def _contended_section(cmp: Comparison) -> list[str]:
    contended = [c for c in cmp.cases if c.verdict == Verdict.MACHINE_CONTENDED]
    if not contended:
        return []
    warned = sum(1 for c in contended if c.warn_only)
    how = "" if not warned else (" (warn only)" if warned == len(contended) else f" ({warned} warn only)")
    lines = [f"### Machine contended: cannot judge ({len(contended)}){how}", "",
             "The case's threads waited for a core while it was timed: the timings measure the run queue. "
             "Re-run on a quiet machine (or fewer jobs per runner).", ""]
    for c in contended:
        would = "; ".join(f"{m.metric} {m.note.rsplit('would read ', 1)[-1]}" for m in c.metrics
                          if m.verdict == Verdict.MACHINE_CONTENDED and "would read " in m.note)
        lines.append(f"- {EMOJI[Verdict.MACHINE_CONTENDED]} `{_md_escape(c.case_id)}`: "
                     f"{_md_escape(contention_text(c.contention or {}))}" + (f"; would read {_md_escape(would)}" if would else ""))
    return [*lines, ""]


def _still_failing_section(cmp: Comparison, failing: list[CaseResult]) -> list[str]:
    """Cases that failed in base and fail in head: the gate passes them by default (not this
    change's regression), but a reader must see them, so they are listed with their error."""
    still = [c for c in cmp.cases if c.verdict == Verdict.STILL_FAILING]
    if not still:
        return []
    failed = {id(c) for c in failing}
    fails = sum(1 for c in still if id(c) in failed)
    cause = ('still_failing = "fail" / --still-failing fail' if all(c.fails_by_policy for c in still)
             else "--fail-on 'still failing'")
    how = (f"fail the gate ({cause})" if fails == len(still) else
           "pass the gate: they failed in base too" if not fails else f"{fails} fail the gate")
    lines = [f"### Still failing ({len(still)}: {how})", "", "Failed in base and in head:", ""]
    for c in still:
        why = f": {_md_escape(c.error)}" if c.error else ""
        lines.append(f"- {EMOJI[Verdict.STILL_FAILING]} `{_md_escape(c.case_id)}` "
                     f"(status {c.status_base} -> {c.status_head}){why}")
    return [*lines, ""]


def _missing_section(cmp: Comparison) -> list[str]:
    missing = [c for c in cmp.cases if c.verdict == Verdict.MISSING]
    if not missing:
        return []
    warned = sum(1 for c in missing if c.warn_only)
    how = "warn only" if warned == len(missing) else ("fail the gate" if not warned else f"{warned} warn only")
    lines = [f"### Missing in head ({len(missing)}: {how})", "", "Measured in base, not run in head:", ""]
    lines += [f"- {EMOJI[Verdict.MISSING]} `{_md_escape(c.case_id)}` (base status {c.status_base})" for c in missing]
    return [*lines, ""]


# ---------------------------------------------------------------- JSON

def json_text(cmp: Comparison, failing: list[CaseResult], fail_on: tuple[str, ...]) -> str:
    data = cmp.to_dict()
    data["fail_on"] = list(fail_on)
    data["failed"] = [c.case_id for c in failing]
    decision = cmp.decide(failing)
    data["outcome"] = str(decision.outcome)
    data["reason"] = decision.reason
    data["missing"] = [c.case_id for c in cmp.cases if c.verdict == Verdict.MISSING]
    data["contended"] = [c.case_id for c in cmp.cases if c.verdict == Verdict.MACHINE_CONTENDED]
    data["still_failing"] = [c.case_id for c in cmp.cases if c.verdict == Verdict.STILL_FAILING]
    data["headline"] = headline(cmp, decision)
    data["geomean_line"] = geomean_line(cmp)
    return json.dumps(data, indent=1, allow_nan=False)
