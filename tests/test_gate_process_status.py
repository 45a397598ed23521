"""A case's status over several processes a side (`ab`, nightly repeats): one flaky base
process must not turn head's regression into `now passing`, and a case base skipped (it
never ran there) is new or newly failing in head, never `still failing`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.cli.main import main
from harness.model.schema import Run, save_run
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record


def _side(tmp_path, name: str, statuses: list[str], compiled_median: float = 5e-4, seed: int = 0) -> str:
    """A folder of one run file per process, each holding case 0 with that process's status and
    case 1, ok and unchanged (so that something is judged: a gate of nothing exits 3)."""
    folder = tmp_path / name
    folder.mkdir()
    for i, status in enumerate(statuses):
        rng = np.random.default_rng(seed * 100 + i)
        records = [synthetic_record(synthetic_case(0), rng, status=status, compiled_median=compiled_median),
                   synthetic_record(synthetic_case(1), rng)]
        run_id = f"{name}{i}"
        save_run(Run(run_id, f"2026-01-01T00:0{i}:00+00:00", run_id, dict(SYNTHETIC_ENV), {}, records),
                 folder / f"{run_id}.json")
    return str(folder)


def _gate(tmp_path, base: str, head: str, *extra: str) -> tuple[int, dict]:
    """The gate's exit code and case 0's entry in its JSON."""
    out = tmp_path / "gate.json"
    code = main(["gate", base, head, "--json-file", str(out), *extra])
    (case,) = [c for c in json.loads(out.read_text())["cases"] if c["case_id"] == synthetic_case(0).case_id]
    return code, case


def test_one_crashed_base_process_does_not_hide_a_regression(tmp_path):
    base = _side(tmp_path, "base", ["ok", "ok", "crashed", "ok"])
    head = _side(tmp_path, "head", ["ok"] * 4, compiled_median=7.5e-4, seed=1)  # compiled +50%
    code, case = _gate(tmp_path, base, head)
    assert code == 1 and case["verdict"] == "regression", case
    assert any("1 of 4 base processes did not pass (crashed): judged on the 3 that did" in f for f in case["flags"])


def test_skipped_on_both_sides_is_not_still_failing(tmp_path):
    base = _side(tmp_path, "base", ["skipped"])
    head = _side(tmp_path, "head", ["skipped"], seed=1)
    code, case = _gate(tmp_path, base, head, "--still-failing", "fail")
    assert code == 0 and case["verdict"] == "n/a", case
    assert any("skipped in base and in head" in f for f in case["flags"])


def test_a_process_without_samples_does_not_drop_latency_where_the_probe_normalises(tmp_path):
    """Four processes a side with probes (so latency is probe-normalised); one base process
    recorded no samples. Head is 30% slower, eager and compiled alike, on an unchanged machine:
    latency is judged on the other three and says so."""
    sides = {}
    for name, slow in (("base", 1.0), ("head", 1.3)):
        folder = tmp_path / name
        folder.mkdir()
        for i in range(4):
            rng = np.random.default_rng(hash((name, i)) % 2**32)
            record = synthetic_record(synthetic_case(0), rng, eager_median=1e-3 * slow, compiled_median=5e-4 * slow,
                                      spread=0.01, probe_median=1e-3)
            if name == "base" and i == 0:
                record.eager = record.eager.with_fields(samples_s=[])
                record.compiled = record.compiled.with_fields(samples_s=[])
            run_id = f"{name}{i}"
            save_run(Run(run_id, f"2026-01-01T00:0{i}:00+00:00", run_id, dict(SYNTHETIC_ENV), {}, [record]),
                     folder / f"{run_id}.json")
        sides[name] = str(folder)
    out = tmp_path / "gate.json"
    code = main(["gate", sides["base"], sides["head"], "--json-file", str(out)])
    (case,) = json.loads(out.read_text())["cases"]
    latency = next((m for m in case["metrics"] if m["metric"] == "latency"), None)
    assert latency is not None, case["metrics"]
    assert latency["verdict"] == "slower (eager too)" and code == 1, latency
    assert "normalised by the machine probe" in latency["note"]
    assert "1 of 4 base processes had no samples: judged without them" in latency["note"]


def test_flaky_on_both_sides_judges_the_processes_that_passed(tmp_path):
    """The usual shape of a flaky case (ab rounds, nightly repeats): a crash on each side. It
    read `still failing` (a pass) whatever head's figures were."""
    base = _side(tmp_path, "base", ["ok", "ok", "ok", "crashed"])
    head = _side(tmp_path, "head", ["ok", "crashed", "ok", "ok"], compiled_median=7.5e-4, seed=1)
    code, case = _gate(tmp_path, base, head)
    assert code == 1 and case["verdict"] == "regression", case
    assert any("1 of 4 base processes did not pass (crashed): judged on the 3 that did" in f for f in case["flags"])
    assert any("1 of 4 head processes did not pass (crashed): judged on the 3 that did" in f for f in case["flags"])


def test_ok_in_base_and_skipped_in_head_names_the_skip(tmp_path):
    base = _side(tmp_path, "base", ["ok"])
    head = _side(tmp_path, "head", ["skipped"], seed=1)
    code, case = _gate(tmp_path, base, head)
    assert code == 1 and case["verdict"] == "now failing"
    assert case["error"] == "Synthetic: synthetic skipped", case


@pytest.mark.parametrize("base_statuses, head_statuses, code, verdict", [
    (["ok", "timeout", "ok", "ok"], ["ok"] * 4, 0, "unchanged"),  # one flaky base process, head unchanged
    (["ok", "crashed", "ok"], ["crashed"] * 3, 1, "now failing"),  # passed in some base processes, in no head one
    (["crashed", "crashed"], ["ok", "ok"], 0, "now passing"),  # failed in every base process
    (["ok"] * 4, ["crashed", "ok", "ok", "ok"], 1, "now failing"),  # a new flake in head
    (["skipped"], ["crashed"], 1, "now failing"),  # never ran in base: not `still failing`
    (["skipped"], ["ok"], 0, "new"),
    (["skipped", "skipped"], ["ok", "skipped"], 0, "new"),  # ok where it ran: nothing failed
])
def test_the_status_of_a_case_over_its_processes(tmp_path, base_statuses, head_statuses, code, verdict):
    base = _side(tmp_path, "base", base_statuses)
    head = _side(tmp_path, "head", head_statuses, seed=1)
    got, case = _gate(tmp_path, base, head)
    assert got == code and case["verdict"] == verdict, case
