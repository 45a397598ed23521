"""The committed CPU expected files of the breadth suites (results/expected/<suite>-cpu.json,
made from real runs: docs/SUITES.md "Expected results on CPU") name only cases their suite
plans, under the key the check reads. A suite edit that renames or drops a model fails here
before any run; re-pin with `compilebench expected update`. No model is built."""

from __future__ import annotations

import pytest

from harness.analysis.expected import DEFAULT_DIR, EXPECTED_FIELDS, load_expected
from harness.run.runner import RunOptions, plan_cases

# suite -> (torch minor the file was made on, compilers it must hold)
FILES = {
    "hf-tiny": ("2.13", {"eager", "inductor"}),
    "timm-tiny": ("2.14", {"eager", "inductor"}),
    "transformers-zoo-tiny": ("2.13", {"eager", "inductor"}),
    "diffusers-tiny": ("2.13", {"eager", "inductor"}),
}


@pytest.mark.parametrize("suite", sorted(FILES))
def test_expected_file_cases_are_planned_by_its_suite(suite):
    minor, compilers = FILES[suite]
    data = load_expected(DEFAULT_DIR / f"{suite}-cpu.json")
    assert (data["suite"], data["device"], data["torch_minor"]) == (suite, "cpu", minor)
    assert set(data["compilers"]) == compilers and tuple(data["fields"]) == EXPECTED_FIELDS
    cases, _ = plan_cases(RunOptions(suite=suite, compilers=sorted(compilers), scenarios=["forward", "train"],
                                     ingest=False))
    planned = {c.case_id for c in cases}
    stale = sorted(set(data["cases"]) - planned)
    assert not stale, f"{suite}: expected cases the suite no longer plans (re-pin): {stale[:5]}"
    assert {case_id.split("/")[2] for case_id in data["cases"]} == compilers
