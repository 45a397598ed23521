"""Expected results: deterministic metrics gated exactly against a committed file.

Status, accuracy, graph breaks, recompiles and unique graphs do not drift with load: for a
given torch they are exact, so compiler CI pins them per model and fails on any difference,
improvements included (PyTorch's CI does this with its expected-results CSVs). A file holds
one *key*: a suite and a device (its name), a torch minor (recorded inside), and per
compiler the cases (the compiler is part of every case id). Without `--file` the file is
`results/expected/<suite>-<device>.json` under the current directory, whatever `--out`
says: expected files are committed with the project, run files are not.

    compilebench run --suite smoke --device cpu
    compilebench expected check latest          # exit 1 on any difference, naming each
    compilebench expected update latest         # after an intended change: rewrite, review, commit
    compilebench expected update latest --file my-models.json   # any run, suite or not

A check covers the cases the run measured; `--complete` also fails when an expected case
was not run (CI runs the whole suite with it). A run on another torch minor or device than
the file's key fails the check (the counts legitimately differ there): re-pin with
`update`, or keep one file per key with `--file`. `pick_workloads` (CLI `expected pick`)
chooses one workload per model family from a file or a run: the small subset CI checks
(the `breadth-ci` suite is one: `expected pick --file results/expected/breadth-ci-cpu.json`).

A file also records the versions of the model libraries its run had (`packages`:
transformers, diffusers, timm); a run on other versions gets a warning, not a failure (the
models' own code can move graph breaks; the CI env pins them in .ci/constraints-cpu.txt).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.analysis.breadth import family_of, one_per_family
from harness.model.jsonfile import read_json
from harness.model.schema import Record, Run, RunFileError, write_json_atomic

EXPECTED_FORMAT = "compilebench-expected/1"
EXPECTED_FIELDS = ("status", "accuracy", "graph_breaks", "recompiles", "graphs")
MODEL_PACKAGES = ("transformers", "diffusers", "timm")  # libraries whose model code the counts depend on
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "results" / "expected"  # this checkout's committed files
CLI_DIR = Path("results") / "expected"  # the CLI's default: under the current directory, like --out's default


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


def torch_minor(version: str | None) -> str | None:
    """'2.13' of '2.13.0+cpu' / '2.13.0.dev20261201'; other strings as they are."""
    if not version:
        return None
    match = re.match(r"^(\d+)\.(\d+)", str(version))
    return f"{match.group(1)}.{match.group(2)}" if match else str(version)


@dataclass(frozen=True)
class ExpectedKey:
    """What an expected file pins: the suite, device and torch minor its counts hold for,
    and the compilers it has cases of (each case id names its compiler)."""

    suite: str
    device: str
    torch_minor: str | None
    compilers: tuple[str, ...] = ()

    @property
    def file_name(self) -> str:
        return f"{self.suite}-{self.device}.json"


def run_key(run: Run) -> ExpectedKey:
    """The key of a run's results; suite 'adhoc' for a run of named workloads, device
    'mixed' for a run across devices (such a run needs --file to name its file)."""
    suite = run.config.get("suite") or next((r.case.suite for r in run.records if r.case.suite), "") or "adhoc"
    devices = sorted({r.case.device.split(":")[0] for r in run.records})
    return ExpectedKey(str(suite), devices[0] if len(devices) == 1 else "mixed",
                       torch_minor(run.environment.get("torch_version")),
                       tuple(sorted({r.case.compiler for r in run.records})))


def run_suite_device(run: Run) -> tuple[str, str]:
    key = run_key(run)
    if key.suite == "adhoc":
        raise ExpectedFileError(f"run {run.run_id} is not a suite run, so it has no default expected file; "
                                "name one with --file PATH")
    if key.device == "mixed":
        devices = sorted({r.case.device.split(":")[0] for r in run.records})
        raise ExpectedFileError(f"run {run.run_id} spans devices {devices}; name the expected file with --file PATH")
    return key.suite, key.device


def expected_path(run: Run, directory: str | Path | None = None) -> Path:
    """`<directory>/<suite>-<device>.json`; the CLI's directory is results/expected/."""
    run_suite_device(run)  # a clear error for a run that has no default file
    return Path(directory or DEFAULT_DIR) / run_key(run).file_name


def load_expected(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    data = read_json(path, ExpectedFileError, "expected file",
                     f"create it with `compilebench expected update RUN --file {path}`")
    if not isinstance(data, dict) or data.get("format") != EXPECTED_FORMAT or not isinstance(data.get("cases"), dict):
        raise ExpectedFileError(f"{path}: not a compilebench expected file (format {EXPECTED_FORMAT!r})")
    return data


def check(run: Run, path: str | Path) -> ExpectedReport:
    """Compare a run's exact metrics with the expected file."""
    data = load_expected(path)
    report = ExpectedReport(Path(path))
    report.differences += key_differences(file_key(data), run_key(run), path)
    report.warnings += package_warnings(data.get("packages") or {}, model_packages(run), path)
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


def file_key(data: dict[str, Any]) -> ExpectedKey:
    """The key an expected file declares (files from before keys: read from its torch)."""
    return ExpectedKey(str(data.get("suite") or "adhoc"), str(data.get("device") or "?"),
                       data.get("torch_minor") or torch_minor(data.get("torch")),
                       tuple(data.get("compilers") or sorted({c.split("/")[2] for c in data["cases"] if c.count("/") >= 2})))


def key_differences(want: ExpectedKey, got: ExpectedKey, path: str | Path) -> list[str]:
    """A torch minor or device other than the file's: its counts do not apply (a failure,
    with the fix); a different suite is fine (case ids are what is compared)."""
    out = []
    fix = f"re-pin with `compilebench expected update RUN --file {path}`, or keep one file per key with --file"
    if want.torch_minor and got.torch_minor and want.torch_minor != got.torch_minor:
        out.append(f"key: torch minor expected {want.torch_minor!r}, got {got.torch_minor!r} "
                   f"(graph breaks and accuracy differ across torch minors; {fix})")
    if want.device not in ("?", "mixed") and got.device not in (want.device, "mixed"):
        out.append(f"key: device expected {want.device!r}, got {got.device!r} ({fix})")
    return out


def model_packages(run: Run) -> dict[str, str]:
    """The versions of the model libraries the run had (those installed)."""
    packages = run.environment.get("packages") or {}
    return {name: str(packages[name]) for name in MODEL_PACKAGES if packages.get(name)}


def package_warnings(want: dict[str, str], got: dict[str, str], path: str | Path) -> list[str]:
    return [f"{name} {want[name]} made {path}, this run has {got.get(name) or 'none'}: the models' code can move "
            f"graph breaks and accuracy; if a difference below is the library's, re-pin with `compilebench expected "
            f"update RUN --file {path}`" for name in sorted(want) if got.get(name) != want[name]]


def update(runs: Sequence[Run], path: str | Path, keep_others: bool = True) -> dict[str, Any]:
    """Write the expected file from runs (later runs win); with keep_others, cases the runs
    did not measure keep their old entries. Works for any run, suite or not: the file's key
    comes from the first run. Each entry also names its family (not checked: `pick` reads it)."""
    path = Path(path)
    measured = [r for run in runs for r in run.records if r.status != "skipped"]
    if not measured:  # an empty or all-skipped run would only rewrite the file's key
        raise ExpectedFileError(f"{', '.join(r.run_id for r in runs)}: no case was measured (no records, or all "
                                f"skipped), so there is nothing to update {path} from; update from a run that ran")
    key = run_key(runs[0])
    cases: dict[str, Any] = {}
    if keep_others and path.exists():
        old = load_expected(path)
        if (old.get("suite"), old.get("device")) != (key.suite, key.device):
            # the file's key decides what `check` holds runs to (its device check skips 'mixed'):
            # a run of another suite or device must not rewrite it
            raise ExpectedFileError(f"{path} pins suite {old.get('suite')!r} on {old.get('device')!r}, but "
                                    f"{runs[0].run_id} is suite {key.suite!r} on {key.device!r}; update it from a "
                                    "run of that suite and device, or name another --file")
        cases.update(old["cases"])
    for run in runs:
        for record in run.records:
            if record.status == "skipped":
                continue  # a skip says nothing about this device: keep the old entry
            cases[record.case_id] = {**observed(record), "family": family_of(record)}
    first = runs[0]
    compilers = sorted({c.split("/")[2] for c in cases if c.count("/") >= 2})
    data = {"format": EXPECTED_FORMAT, "suite": key.suite, "device": key.device,
            "torch": first.environment.get("torch_version"), "torch_minor": key.torch_minor, "compilers": compilers,
            "packages": model_packages(first),
            "fields": list(EXPECTED_FIELDS), "cases": dict(sorted(cases.items()))}
    write_json_atomic(path, data)
    return data


def pick_workloads(path: str | Path | None = None, runs: Sequence[Run] = (), per_family: int = 1,
                   limit: int | None = None) -> list[str]:
    """One workload (`per_family`) per model family, from an expected file's cases (their
    recorded families) and/or runs: the subset a CI job runs to check a suite in minutes;
    `limit`: at most that many families, spread over the alphabet."""
    families: dict[str, str] = {}
    if path is not None:
        for case_id, entry in load_expected(path)["cases"].items():
            workload = case_id.split("/", 1)[0]
            if isinstance(entry, dict) and isinstance(entry.get("family"), str):
                families[workload] = entry["family"]
            else:
                families.setdefault(workload, "")
    for run in runs:
        for record in run.records:
            families[record.case.workload] = family_of(record)
    return one_per_family(families, {w: f for w, f in families.items() if f}, per_family, limit=limit)
