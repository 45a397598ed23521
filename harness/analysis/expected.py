"""Expected counts: deterministic metrics gated exactly against a committed file.

Graph breaks, recompiles, unique graphs and the accuracy status do not drift with load:
for a given torch they are exact, so compiler CI pins them in a file and fails on any
difference (PyTorch's own CI does this with its expected-results CSVs). The file for a
suite and device lives at `results/expected/<suite>-<device>.json`:

    compilebench run --suite smoke --device cpu
    compilebench expected check latest          # exit 1 on any difference
    compilebench expected update latest         # after an intended change: rewrite, review, commit

A check covers the cases the run measured; `--complete` also fails when an expected case
was not run (CI runs the whole suite with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.model.jsonfile import read_json
from harness.model.schema import Record, Run, RunFileError, write_json_atomic

EXPECTED_FORMAT = "compilebench-expected/1"
EXPECTED_FIELDS = ("status", "accuracy", "graph_breaks", "recompiles", "graphs")
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "results" / "expected"


class ExpectedFileError(RunFileError):
    """An expected file that is missing or malformed; the message names it and the fix."""


@dataclass
class ExpectedReport:
    path: Path
    checked: int = 0
    differences: list[str] = field(default_factory=list)  # fail the check
    missing: list[str] = field(default_factory=list)  # expected, not run
    new: list[str] = field(default_factory=list)  # run, not expected
    warnings: list[str] = field(default_factory=list)

    def failed(self, complete: bool = False) -> bool:
        return bool(self.differences or (complete and self.missing))


def observed(record: Record) -> dict[str, Any]:
    """The exactly-gated values of one record."""
    m = record.metrics or {}
    return {"status": record.status, "accuracy": (m.get("accuracy") or {}).get("status"),
            "graph_breaks": m.get("graph_breaks"), "recompiles": m.get("recompiles"), "graphs": m.get("graphs")}


def run_suite_device(run: Run) -> tuple[str, str]:
    suite = run.config.get("suite") or (run.records[0].case.suite if run.records else "")
    devices = sorted({r.case.device.split(":")[0] for r in run.records})
    if not suite or suite == "adhoc":
        raise ExpectedFileError(f"run {run.run_id} is not a suite run; pass --file to name the expected file")
    if len(devices) != 1:
        raise ExpectedFileError(f"run {run.run_id} spans devices {devices}; pass --file to name the expected file")
    return suite, devices[0]


def expected_path(run: Run, directory: str | Path | None = None) -> Path:
    suite, device = run_suite_device(run)
    return Path(directory or DEFAULT_DIR) / f"{suite}-{device}.json"


def load_expected(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    data = read_json(path, ExpectedFileError, "expected file", "create it with `compilebench expected update RUN`")
    if not isinstance(data, dict) or data.get("format") != EXPECTED_FORMAT or not isinstance(data.get("cases"), dict):
        raise ExpectedFileError(f"{path}: not a compilebench expected file (format {EXPECTED_FORMAT!r})")
    return data


def check(run: Run, path: str | Path) -> ExpectedReport:
    """Compare a run's exact metrics with the expected file."""
    data = load_expected(path)
    report = ExpectedReport(Path(path))
    torch_version = run.environment.get("torch_version")
    if data.get("torch") and torch_version and data["torch"] != torch_version:
        report.warnings.append(f"expected file was written with torch {data['torch']}, this run used {torch_version}: "
                               "counts may legitimately differ (update the file if the new values are right)")
    expected_cases: dict[str, dict[str, Any]] = data["cases"]
    seen = set()
    for record in run.records:
        case_id = record.case_id
        seen.add(case_id)
        want = expected_cases.get(case_id)
        if want is None:
            report.new.append(case_id)
            continue
        report.checked += 1
        got = observed(record)
        for key in EXPECTED_FIELDS:
            if key in want and want[key] != got[key]:
                report.differences.append(f"{case_id}: {key} expected {want[key]!r}, got {got[key]!r}")
    report.missing = sorted(set(expected_cases) - seen)
    return report


def update(runs: Sequence[Run], path: str | Path, keep_others: bool = True) -> dict[str, Any]:
    """Write the expected file from runs (later runs win); with keep_others, cases the runs
    did not measure keep their old entries."""
    path = Path(path)
    cases: dict[str, Any] = {}
    if keep_others and path.exists():
        cases.update(load_expected(path)["cases"])
    for run in runs:
        for record in run.records:
            if record.status == "skipped":
                continue  # a skip says nothing about this device: keep the old entry
            cases[record.case_id] = observed(record)
    first = runs[0]
    suite, device = run_suite_device(first)
    data = {"format": EXPECTED_FORMAT, "suite": suite, "device": device, "torch": first.environment.get("torch_version"),
            "fields": list(EXPECTED_FIELDS), "cases": dict(sorted(cases.items()))}
    write_json_atomic(path, data)
    return data
