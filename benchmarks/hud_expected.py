"""Our `hf` / `timm` cases beside PyTorch's own expected results for the same models: does a
compilebench model behave as the dashboard's does (status, graph breaks)?

    python benchmarks/hud_expected.py RUN.json [RUN2.json ...] [--compiler inductor] [--json OUT]

PyTorch's CI checks every dashboard model against a committed CSV per (backend, suite, mode),
`benchmarks/dynamo/ci_expected_accuracy/inductor_{huggingface,timm}_{inference,training}.csv`:
`name,accuracy,graph_breaks`. Copies of those four files (the facts: names, statuses, counts)
are under suites/configs/hud/; which version each is and what that means is in docs/SUITES.md
("Beside PyTorch's expected results"). For every record of the runs whose workload is
`hf-<name>` or `timm-<name>` and whose compiler is --compiler, the script prints our status,
accuracy and graph breaks next to the CSV's accuracy and graph breaks (`forward` against
inference, `train` against training), whether the outcomes agree (ours `ok` + accuracy pass
against a `pass*` entry, anything else against anything else) and whether the break counts
are equal, then a count per suite x scenario. Graph-break counts do not depend on the model's
size, so `--size tiny` runs on a CPU can be set beside them too (the CSVs are CUDA runs).
The two harnesses count differently where their training loops differ (PyTorch compiles the
whole step including zero_grad, backward and the optimizer; what compilebench's train scenario
compiles is in docs/SUITES.md), so a train-step difference is a lead, not a verdict.
Exit 0 after printing; 2 for unreadable input.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis.metrics import accuracy_status  # noqa: E402
from harness.model.schema import load_run  # noqa: E402

HUD_DIR = ROOT / "suites" / "configs" / "hud"
SUITE_FILES = {"hf": "huggingface", "timm": "timm"}
MODES = {"forward": "inference", "train": "training"}


@dataclass(frozen=True)
class Expected:
    accuracy: str
    graph_breaks: int


@dataclass(frozen=True)
class Row:
    suite: str
    scenario: str
    model: str
    status: str
    accuracy: str
    graph_breaks: int | None
    hud_accuracy: str
    hud_graph_breaks: int
    outcome_agrees: bool
    breaks_equal: bool


def load_expected(hud_dir: Path = HUD_DIR) -> dict[tuple[str, str], dict[str, Expected]]:
    """(suite prefix, scenario) -> model name -> the CSV's entry."""
    table: dict[tuple[str, str], dict[str, Expected]] = {}
    for prefix, suite in SUITE_FILES.items():
        for scenario, mode in MODES.items():
            path = hud_dir / f"inductor_{suite}_{mode}.csv"
            with path.open(newline="") as f:
                table[(prefix, scenario)] = {row["name"]: Expected(row["accuracy"], int(row["graph_breaks"]))
                                             for row in csv.DictReader(f) if row.get("name")}
    return table


def compare_records(records: list[Any], expected: dict[tuple[str, str], dict[str, Expected]],
                    compiler: str = "inductor") -> list[Row]:
    """One row per record that has an entry in the CSVs (the last record of a case wins)."""
    rows: dict[tuple[str, str, str], Row] = {}
    for record in records:
        case = record.case
        prefix, _, model = case.workload.partition("-")
        entry = expected.get((prefix, case.scenario), {}).get(model)
        if case.compiler != compiler or entry is None:
            continue
        accuracy = accuracy_status(record) or "-"
        ours_pass = record.status == "ok" and accuracy == "pass"
        breaks = record.metrics.get("graph_breaks")
        rows[(prefix, case.scenario, model)] = Row(
            prefix, case.scenario, model, record.status, accuracy, breaks, entry.accuracy, entry.graph_breaks,
            outcome_agrees=ours_pass == entry.accuracy.startswith("pass"),
            breaks_equal=breaks == entry.graph_breaks)
    return sorted(rows.values(), key=lambda r: (r.suite, r.scenario, r.model))


def summary(rows: list[Row]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"models": 0, "outcome_agrees": 0, "breaks_equal": 0})
    for row in rows:
        c = counts[f"{row.suite} {row.scenario}"]
        c["models"] += 1
        c["outcome_agrees"] += row.outcome_agrees
        c["breaks_equal"] += row.breaks_equal
    return dict(counts)


def print_table(rows: list[Row]) -> None:
    print(f"{'suite':5} {'scenario':8} {'model':40} {'ours':>20} {'breaks':>6}   {'PyTorch CSV':>20} {'breaks':>6}  agree")
    for r in rows:
        ours = r.status if r.status != "ok" else f"ok/{r.accuracy}"
        marks = ("outcome " if r.outcome_agrees else "OUTCOME? ") + ("breaks" if r.breaks_equal else "BREAKS?")
        print(f"{r.suite:5} {r.scenario:8} {r.model:40} {ours:>20} {str(r.graph_breaks):>6}   "
              f"{r.hud_accuracy:>20} {r.hud_graph_breaks:>6}  {marks}")
    for key, c in summary(rows).items():
        print(f"{key}: {c['models']} models beside the CSV; outcome agrees for {c['outcome_agrees']}, "
              f"graph breaks equal for {c['breaks_equal']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run files with hf-* / timm-* cases")
    parser.add_argument("--compiler", default="inductor", help="the compiler config set beside the CSVs (default inductor)")
    parser.add_argument("--json", help="also write the rows and the summary to this file")
    args = parser.parse_args(argv)
    records: list[Any] = []
    for path in args.runs:
        try:
            records.extend(load_run(path).records)
        except (OSError, ValueError) as exc:
            print(f"hud_expected: cannot read {path}: {exc}", file=sys.stderr)
            return 2
    rows = compare_records(records, load_expected(), args.compiler)
    if not rows:
        print("hud_expected: no hf-*/timm-* case of compiler "
              f"{args.compiler!r} in these runs has an entry in suites/configs/hud/", file=sys.stderr)
        return 2
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": [asdict(r) for r in rows], "summary": summary(rows)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
