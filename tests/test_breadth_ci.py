"""The CI subset of the breadth suites (`breadth-ci`, suites/breadth_ci.py) against its
committed expected counts (results/expected/breadth-ci-cpu.json): the README's test command
runs the suite for real through the CLI and fails on any difference, improvements included.

The real run is marked `slow` like the other end-to-end tests; `tox -e test` runs them all.
It costs about 100-130 s on a 2-core box (docs/SUITES.md "The CI subset"); the run starts when
collection ends and its tests go last (tests/background.py), so it overlaps the other tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.analysis.breadth import workload_family
from harness.analysis.expected import DEFAULT_DIR, load_expected, pick_workloads, torch_minor
from harness.cli.listing import suite_workloads
from harness.run.runner import RunOptions, load_registries, plan_cases
from tests.background import BACKGROUND, cli_env

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = DEFAULT_DIR / "breadth-ci-cpu.json"
SUITE = "breadth-ci"
SOURCE_SUITES = ("hf-tiny", "transformers-zoo-tiny", "diffusers-tiny")


def suite():
    load_registries([], False)
    from suites import SUITES

    return SUITES[SUITE]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=cli_env(), capture_output=True,
                          text=True)


def test_the_subset_is_one_model_per_family_as_expected_pick_reads_the_committed_file():
    workloads = suite_workloads(suite())
    assert pick_workloads(EXPECTED) == sorted(workloads)
    assert len({workload_family(w) for w in workloads}) == len(workloads)
    from suites import SUITES

    drawn_from = {name: set(suite_workloads(SUITES[name])) for name in SOURCE_SUITES}
    for name, members in drawn_from.items():  # every source suite gives some, and nothing else is in it
        assert members & set(workloads), name
    assert set(workloads) <= set().union(*drawn_from.values())


def test_the_committed_file_holds_exactly_the_cases_the_suite_plans_for_the_ci_torch():
    """A suite edit without `expected update` fails here, before any compile; so does a torch
    bump in CI's constraints without a re-pin."""
    cases, _ = plan_cases(RunOptions(suite=SUITE, ingest=False))
    data = load_expected(EXPECTED)
    assert sorted(c.case_id for c in cases) == sorted(data["cases"])
    assert {c.compiler for c in cases} == {"inductor"} and {c.scenario for c in cases} == {"forward"}
    assert {c.size for c in cases} == {"tiny"} and {c.device for c in cases} == {"cpu"}
    pins = dict(line.strip().split("==") for line in (ROOT / ".ci" / "constraints-cpu.txt").read_text().splitlines()
                if "==" in line and not line.lstrip().startswith("#"))
    assert data["suite"] == SUITE and data["device"] == "cpu" and data["torch_minor"] == torch_minor(pins["torch"])
    assert data["packages"] == {name: pins[name] for name in data["packages"]}  # CI installs what made the file


@pytest.fixture(scope="module")
def ci_run() -> Path:
    """`compilebench run --suite breadth-ci` for real, as CI runs it; the run file. The run
    starts when collection ends and these tests go last (tests/background.py), so its
    compiles overlap the rest of the session."""
    run = BACKGROUND["ci_run"]
    run.start()
    if run.skipped:
        pytest.skip(run.skipped)
    proc = run.wait()
    # a failed case (exit 1) is data: its status is pinned, so the check below judges it
    assert proc.returncode in (0, 1), proc.stdout[-4000:] + proc.stderr[-4000:]
    runs = list((run.out / "results" / "runs").glob("*.json"))
    assert len(runs) == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
    return runs[0]


@pytest.mark.slow
def test_the_ci_subset_matches_its_committed_expected_counts(ci_run):
    proc = cli("expected", "check", str(ci_run), "--complete")  # the default file: results/expected/breadth-ci-cpu.json
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = len(load_expected(EXPECTED)["cases"])
    assert f"{cases} case(s) checked against results/expected/breadth-ci-cpu.json: 0 difference(s), 0 not run, 0 new" \
        in proc.stdout


@pytest.mark.slow
def test_a_difference_from_the_expected_file_fails_naming_the_model(ci_run, tmp_path):
    """Any difference fails (exit 1) and names the case: a new graph break, an accuracy that
    would have failed, and an improvement (one break fewer than expected) alike."""
    data = json.loads(EXPECTED.read_text())
    llama = next(c for c in data["cases"] if c.startswith("zoo-llama-causal/"))
    vae = next(c for c in data["cases"] if c.startswith("diffusers-sd-vae-decode/"))
    ran = data["cases"][llama]["graph_breaks"]
    data["cases"][llama]["graph_breaks"] = ran + 1  # the run has one fewer: an improvement is a difference too
    data["cases"][vae]["accuracy"] = "fail"
    edited = tmp_path / "breadth-ci-cpu.json"
    edited.write_text(json.dumps(data))
    proc = cli("expected", "check", str(ci_run), "--file", str(edited), "--complete")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"DIFFERENT {llama}: graph_breaks expected {ran + 1}, got {ran}" in proc.stdout
    assert f"DIFFERENT {vae}: accuracy expected 'fail', got 'pass'" in proc.stdout
    assert re.search(r"2 difference\(s\)", proc.stdout) and "expected update" in proc.stdout
    # a case the file expects that the run did not measure fails a --complete check, named
    del data["cases"][vae]["family"]
    data["cases"][llama]["graph_breaks"] = ran
    data["cases"][vae]["accuracy"] = "pass"
    data["cases"][llama.replace("zoo-llama-causal", "zoo-mistral-causal")] = dict(data["cases"][llama])
    edited.write_text(json.dumps(data))
    proc = cli("expected", "check", str(ci_run), "--file", str(edited), "--complete")
    assert proc.returncode == 1 and f"MISSING: {llama.replace('zoo-llama-causal', 'zoo-mistral-causal')}" in proc.stdout
