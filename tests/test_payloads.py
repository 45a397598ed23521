"""The typed record payloads (harness.model.payloads) against schema v1 on disk.

v1 does not change: every committed v1 file loads into the types and writes back the same
content, byte for byte. Code written against the v1 dicts keeps reading them (Mapping
access), and keys this version does not declare survive a load/save round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.model.payloads import ErrorInfo, Memory, Metrics, Timing
from harness.model.schema import Case, Record, RunFileError, load_run, run_from_dict, save_run

ROOT = Path(__file__).resolve().parent.parent
# results/baselines/**/measurements/ holds other committed JSON (cold-start tables, profiles,
# probes): not run files
V1_FILES = sorted([*ROOT.glob("tests/data/run_v1_*.json"),
                   *(p for p in ROOT.glob("results/baselines/**/*.json") if "measurements" not in p.parts)])
CASE = Case("mlp", "forward", "inductor", "cpu", "float32", 4, "tiny")


@pytest.mark.parametrize("path", V1_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_v1_files_load_and_write_back_unchanged(path, tmp_path):
    run = load_run(path)
    for record in run.records:
        assert record.eager is None or isinstance(record.eager, Timing)
        assert record.error is None or isinstance(record.error, ErrorInfo)
        assert isinstance(record.metrics, Metrics)
    out = save_run(run, tmp_path / path.name)
    assert json.loads(out.read_text()) == json.loads(path.read_text())
    assert out.read_text().rstrip() == path.read_text().rstrip()


def test_payloads_read_like_the_v1_dicts():
    block = Timing.from_dict({"samples_s": [0.5, 0.7], "first_call_s": 2.0, "summary": {"median": 0.6},
                              "peak_memory_bytes": 10})
    assert block["samples_s"] == [0.5, 0.7] and block.get("inner_loops") is None and "inner_loops" not in block
    assert block.median == 0.6 and block.memory.peak_memory_bytes == 10 and block.memory.memory_kind is None
    assert isinstance(block.memory, Memory)
    assert dict(block) == {"samples_s": [0.5, 0.7], "first_call_s": 2.0, "summary": {"median": 0.6},
                           "peak_memory_bytes": 10}
    error = ErrorInfo(type="Timeout", message="slow", traceback="", phase="unknown")
    assert error == {"type": "Timeout", "message": "slow", "traceback": "", "phase": "unknown"}
    assert error["message"] == error.message == "slow"


def test_unknown_keys_survive_a_round_trip(tmp_path):
    """Newer producers add keys (probes, cache accounting): an older reader keeps them."""
    record = Record(CASE, "oom",
                    error={"type": "MemoryError", "message": "", "traceback": "", "phase": "build", "memory_cap_bytes": 1},
                    eager={"samples_s": [1.0], "summary": {"median": 1.0}, "warm_compile_s": 0.5},
                    metrics={"latency_s": 1.0, "machine_speed": {"score": 3}})
    record.error = record.error.with_fields(message="capped", hint="raise --max-memory-gb")
    back = Record.from_dict(json.loads(json.dumps(record.to_dict())))
    assert back.error["memory_cap_bytes"] == 1 and back.error["hint"] == "raise --max-memory-gb"
    assert back.error.message == "capped"
    assert back.eager["warm_compile_s"] == 0.5 and back.metrics["machine_speed"] == {"score": 3}
    assert back.to_dict() == record.to_dict()


def test_types_are_checked_on_load_with_the_field_name():
    good = json.loads((ROOT / "tests/data/run_v1_mlp_eager.json").read_text())
    good["records"][0]["eager"]["samples_s"] = ["fast"]
    with pytest.raises(RunFileError, match=r"record\.eager\.samples_s\[\]"):
        run_from_dict(good)
    good["records"][0]["eager"]["samples_s"] = [1.0]
    good["records"][0]["metrics"]["speedup"] = "2x"
    with pytest.raises(RunFileError, match=r"record\.metrics\.speedup"):
        run_from_dict(good)


def test_item_assignment_says_how_to_change_a_payload():
    block = Timing.from_dict({"samples_s": [1.0]})
    with pytest.raises(TypeError, match=r"with_fields\(warm_s=\.\.\.\)"):
        block["warm_s"] = 1.0
    assert block.with_fields(warm_s=1.0)["warm_s"] == 1.0
    with pytest.raises(TypeError, match=r"without\('samples_s'\)"):
        del block["samples_s"]
    assert "samples_s" not in block.without("samples_s") and block.without("samples_s").to_dict() == {}
