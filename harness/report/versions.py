"""The version-sweep report: one column per environment (torch version), one row block per case.

For each case: speedup (with its CI), compile time with the Dynamo / AOTAutograd /
Inductor breakdown, compiled peak memory, graph breaks, recompiles and pass/fail, read
from each env's run. Each env is compared with the one before it by compare's own test
(`compare_case`: significance on the raw samples and a change beyond the metric's
threshold, i.e. beyond the noise floor); a cell whose change is a regression or an
improvement is highlighted and carries the change, so the release where something moved
stands out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.compare import (
    compare_case,
    group_records,
)
from harness.analysis.thresholds import ThresholdConfig
from harness.analysis.verdicts import Verdict
from harness.model.schema import Record, Run, write_text_atomic
from harness.report.display import fmt_bytes, fmt_seconds
from harness.report.report import case_rows, template_env

# report row -> compare metric judged for the adjacent-env highlight
ROWS = (("speedup", "speedup"), ("compile time", "compile_time"), ("peak memory", "peak_memory"),
        ("graph breaks", "graph_breaks"), ("recompiles", "recompiles"), ("status", "status"))
# eager moving with the compiled code is still the release's change (torch moved under both)
HIGHLIGHT = {Verdict.REGRESSION: "v-regression", Verdict.SLOWER_EAGER_TOO: "v-regression", Verdict.NOW_FAILING: "v-regression",
             Verdict.IMPROVEMENT: "v-improvement", Verdict.FASTER_EAGER_TOO: "v-improvement", Verdict.NOW_PASSING: "v-improvement"}


@dataclass
class Cell:
    text: str
    detail: str = ""  # second line: CI, stage breakdown, failure
    change: str = ""  # vs the previous env, when beyond the noise floor
    css: str = ""


@dataclass
class CaseBlock:
    case_id: str
    rows: list[tuple[str, list[Cell]]] = field(default_factory=list)
    changed: bool = False


def env_columns(runs: Sequence[Run]) -> list[dict[str, Any]]:
    cols = []
    for run in runs:
        env = run.environment.get("env") or {}
        packages = run.environment.get("packages") or {}
        cols.append({"name": env.get("name") or run.label or run.run_id, "spec": env.get("spec", ""),
                     "torch": run.environment.get("torch_version") or packages.get("torch"),
                     "triton": packages.get("triton") or packages.get("pytorch-triton"),
                     "transformers": packages.get("transformers"), "diffusers": packages.get("diffusers"),
                     "run_id": run.run_id, "path": run.config.get("path", "")})
    return cols


def _value_cell(row: str, data: dict[str, Any] | None, record: Record | None) -> Cell:
    if record is None or data is None:
        return Cell("-", "not run", css="muted")
    if row == "status":
        err = record.error or {}
        return Cell("pass" if record.status == "ok" else record.status, "" if record.status == "ok" else
                    f"{err.get('type', '')}: {str(err.get('message', ''))[:120]}", css="ok" if record.status == "ok" else "bad")
    if record.status != "ok":
        return Cell("-", record.status, css="muted")
    if row == "speedup":
        low, high = data["ci"]
        return Cell("-" if data["speedup"] is None else f"{data['speedup']:.2f}x",
                    f"[{low:.2f}, {high:.2f}]" if low is not None and high is not None else "")
    if row == "compile time":
        st = data["stages"]
        parts = [f"{k[:3]} {fmt_seconds(st[k])}" for k in ("dynamo", "aot_autograd", "inductor") if st.get(k) is not None]
        return Cell(fmt_seconds(data["compile_s"]), " / ".join(parts))
    if row == "peak memory":
        return Cell(fmt_bytes(data["mem_compiled"]) if data["mem_compiled"] else "-")
    value = data["graph_breaks" if row == "graph breaks" else "recompiles"]
    return Cell("-" if value is None else str(value))


def _change_text(metric: str, m: Any) -> str:
    if m is None or m.change is None:
        return ""
    if metric in ("graph_breaks", "recompiles"):
        return f"{m.change:+g}"
    return f"{m.change:+.1%}"


def sweep_blocks(runs: Sequence[Run], config: ThresholdConfig | None = None) -> list[CaseBlock]:
    """Per case, per row, a cell per env; adjacent-env changes beyond the noise floor marked."""
    config = config or ThresholdConfig()
    per_env = [group_records([run]) for run in runs]
    rows_by_env = [{r["case_id"]: r for r in case_rows(run)} for run in runs]
    case_ids = list(dict.fromkeys(cid for run in runs for cid in (r.case_id for r in run.records)))
    blocks = []
    for case_id in case_ids:
        block = CaseBlock(case_id)
        judged: list[Any] = [None] + [_adjacent(case_id, per_env[i - 1], per_env[i], config) for i in range(1, len(runs))]
        for row, metric in ROWS:
            cells = []
            for i in range(len(runs)):
                recs = per_env[i].get(case_id)
                cell = _value_cell(row, rows_by_env[i].get(case_id), recs[0] if recs else None)
                verdict, m = _metric_verdict(judged[i], metric)
                if verdict in HIGHLIGHT:
                    cell.css, cell.change = HIGHLIGHT[verdict], f"{verdict} {_change_text(metric, m)}".strip()
                    block.changed = True
                cells.append(cell)
            block.rows.append((row, cells))
        blocks.append(block)
    return blocks


def _adjacent(case_id: str, prev: dict[str, list[Record]], cur: dict[str, list[Record]], config: ThresholdConfig) -> Any:
    if case_id not in prev or case_id not in cur:
        return None
    ref = cur[case_id][0].case
    # adjacent releases are different torch builds: a torch-bound probe must not normalise them
    return compare_case(case_id, prev[case_id], cur[case_id], config.for_case(case_id, ref.workload, ref.suite),
                        torch_differs=True)


def _metric_verdict(result: Any, metric: str) -> tuple[str | None, Any]:
    if result is None:
        return None, None
    if metric == "status":
        return (result.verdict if result.verdict in (Verdict.NOW_FAILING, Verdict.NOW_PASSING) else None), None
    m = result.metric(metric)
    return (m.verdict if m else None), m


def render_versions_report(runs: Sequence[Run], title: str = "compilebench version sweep",
                           config: ThresholdConfig | None = None, manifest: str = "") -> str:
    blocks = sweep_blocks(runs, config)
    return template_env().get_template("versions.html.j2").render(
        title=title, envs=env_columns(runs), blocks=blocks, manifest=manifest,
        changed=sum(b.changed for b in blocks), host=(runs[0].environment.get("host") if runs else ""),
        cpu=(runs[0].environment.get("cpu_model") if runs else ""))


def write_versions_report(runs: Sequence[Run], out: str | Path, **kwargs: Any) -> Path:
    path = Path(out)
    write_text_atomic(path, render_versions_report(runs, **kwargs))
    return path
