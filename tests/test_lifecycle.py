"""Compile lifecycle: cold/warm/AOT start in fresh processes, and the shape sweep."""

from __future__ import annotations

import json

import pytest

from harness.experiments.lifecycle import ArtifactError, check_artifact, sha256_of, speedup_vs_cold
from harness.experiments.shapes import SweepOptions, expected_recompiles, sweep
from tests.background import BACKGROUND, BackgroundRun

# torch-version-sensitive: `pytest -m compat` / `tox -e compat` run these on the installed torch
pytestmark = pytest.mark.compat


def test_expected_recompiles_per_policy():
    assert expected_recompiles("static", [2, 4, 8, 4]) == 2  # distinct shapes - 1
    assert expected_recompiles("automatic", [2, 4, 8]) == 1
    assert expected_recompiles("dynamic", [2, 4, 8]) == 0 and expected_recompiles("mark_dynamic", [2, 4]) == 0


def test_artifacts_load_only_from_the_run_folder_with_the_built_hash(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    art = run / "fn.bin"
    art.write_bytes(b"built by this run")
    assert check_artifact(art, run, sha256_of(art)) == art.resolve()
    with pytest.raises(ArtifactError, match="SHA-256"):
        check_artifact(art, run, "0" * 64)
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(b"x")
    with pytest.raises(ArtifactError, match="outside this run's work folder"):
        check_artifact(outside, run, sha256_of(outside))


def test_speedup_vs_cold_uses_time_to_first_result():
    result = {"rows": [{"row": "jit_cold", "ttfr_s": 12.0}, {"row": "aoti", "ttfr_s": 0.5}, {"row": "jit_warm"}]}
    assert speedup_vs_cold(result) == {"jit_cold": 1.0, "aoti": 24.0}


def _coldstart_json(run: BackgroundRun) -> dict:
    """The result of one `compilebench coldstart` run started when collection ended (tests/background.py)."""
    proc = run.wait()
    assert proc.returncode in (0, 1), proc.stdout[-4000:] + proc.stderr[-4000:]  # a failed row is data
    return json.loads((run.out / "coldstart.json").read_text())


@pytest.fixture(scope="module")
def coldstart_result():
    """mlp-classic's rows jit_cold, jit_warm, aot_compile and aoti with 3 steady calls, each in a
    fresh process, in the background while the other tests run: ({row: result row}, result)."""
    result = _coldstart_json(BACKGROUND["coldstart_result"])
    return {r["row"]: r for r in result["rows"]}, result


@pytest.fixture(scope="module")
def gpt2_aot_coldstart():
    """Tiny GPT-2's aot_compile and aot_compile_warm rows (2 steady calls), in the background."""
    return _coldstart_json(BACKGROUND["gpt2_aot_coldstart"])


@pytest.mark.slow
def test_warm_compile_is_faster_than_cold_and_hits_the_caches(coldstart_result):
    rows, _ = coldstart_result
    cold, warm = rows["jit_cold"], rows["jit_warm"]
    assert cold["status"] == "ok" and warm["status"] == "ok", (cold.get("error"), warm.get("error"))
    assert cold["cache"]["fx_graph_miss"] >= 1 and cold["cache"]["fx_graph_hit"] == 0
    assert warm["cache"]["fx_graph_hit"] >= 1 and warm["cache"]["aot_autograd_hit"] >= 1
    # compile work (first call) is what the cache removes; module import noise is in ready_s
    assert warm["first_call_s"] < cold["first_call_s"]
    assert warm["compile_breakdown_s"]["total"] < cold["compile_breakdown_s"]["total"]


@pytest.mark.slow
@pytest.mark.parametrize("row", ["aot_compile", "aoti"])
def test_aot_artifacts_load_in_a_fresh_process_equal_eager_and_reject_other_shapes(coldstart_result, row):
    rows, result = coldstart_result
    r = rows[row]
    assert r["status"] == "ok", r.get("error")
    assert r["accuracy"]["status"] == "pass"
    assert r["artifact_bytes"] > 0 and r["steady_s"] > 0
    assert r["compile_breakdown_s"]["total"] == 0  # loaded, not compiled, in the fresh process
    assert r["wrong_shape"]["outcome"] == "raised", r["wrong_shape"]
    if "API call failed" not in r["wrong_shape"]["error"]:  # torch 2.11's AOTI error names no size
        assert "17" in r["wrong_shape"]["error"]  # the message names the offending size (batch 16 + 1)
    assert all(b["status"] == "ok" for b in result["builds"])


@pytest.mark.slow
def test_static_sweep_recompiles_once_per_new_shape_with_reasons():
    result = sweep(SweepOptions(workload="mlp-classic", batch_sizes=(2, 3, 5), policies=("static", "automatic"),
                                backend="aot_eager", steady_calls=2))
    by = {p["policy"]: p for p in result["policies"]}
    assert by["static"]["status"] == "ok", by["static"].get("error")
    assert by["static"]["recompiles"] == 2 == by["static"]["expected_recompiles"]
    assert all("size mismatch at index 0" in r["reason"] for r in by["static"]["recompile_reasons"])
    assert [p["recompiled"] for p in by["static"]["points"]] == [False, True, True]
    assert by["automatic"]["recompiles"] == 1 == by["automatic"]["expected_recompiles"]
    assert all(p["max_abs_err"] < 1e-5 for p in by["static"]["points"])
    assert not by["static"]["recompile_limit_hit"]


@pytest.mark.slow
def test_hitting_recompile_limit_is_reported_and_dtype_triggers_a_recompile():
    from harness.run.forkserver import preloaded_workers

    with preloaded_workers():  # both sweeps fork their policies from one server: one import pass
        result = sweep(SweepOptions(workload="mlp-classic", batch_sizes=(2, 3, 5), policies=("static",),
                                    backend="aot_eager", recompile_limit=2, steady_calls=1))
        second = sweep(SweepOptions(workload="mlp-classic", batch_sizes=(2,), policies=("dynamic",), backend="aot_eager",
                                    triggers=("dtype",), steady_calls=1))
    static = result["policies"][0]
    assert static["recompile_limit_hit"] and static["recompile_limit"] == 2
    assert "recompile_limit" in static["recompile_limit_messages"][0]
    dyn = second["policies"][0]
    assert dyn["recompiles"] == 1 and "dtype mismatch" in dyn["recompile_reasons"][0]["reason"]


def test_cli_rejects_bad_lifecycle_options(capsys):
    from harness.cli.main import main

    assert main(["coldstart", "--rows", "jit_cold,bogus"]) == 2
    assert main(["sweep", "--policies", "sometimes"]) == 2
    err = capsys.readouterr().err
    assert "--rows bogus: unknown" in err and "--policies sometimes: unknown" in err


def test_a_process_killed_by_a_signal_is_a_crashed_row_naming_it_and_its_load_row_keeps_it():
    from harness.experiments.lifecycle import row_of_failed_build, row_without_result

    build = row_without_result({"row": "aoti", "kind": "aoti_build"}, -11, "Fatal Python error: Segmentation fault", 60.0)
    assert build["status"] == "crashed" and build["signal"] == 11
    assert "killed by SIGSEGV (exit -11)" in build["error"] and "Segmentation fault" in build["error"]
    row = row_of_failed_build("aoti", build)
    assert row["status"] == "crashed" and row["signal"] == 11 and "SIGSEGV" in row["error"]
    timeout = row_without_result({"row": "jit_cold", "kind": "jit"}, None, "", 5.0)
    assert timeout["status"] == "timeout" and "--timeout 5s" in timeout["error"]


def test_guard_filter_keeps_serializable_guards_and_counts_the_rest():
    from types import SimpleNamespace

    from harness.experiments.lifecycle import serializable_guards

    dropped: dict[str, int] = {}
    keep = serializable_guards(dropped)
    entries = [SimpleNamespace(guard_type="TENSOR_MATCH", derived_guard_types=()),
               SimpleNamespace(guard_type="ID_MATCH", derived_guard_types=()),
               SimpleNamespace(guard_type="TYPE_MATCH", derived_guard_types=("ID_MATCH",)),  # unserializable through its base
               SimpleNamespace(guard_type="SHAPE_ENV", derived_guard_types=None)]
    assert keep(entries) == [True, False, False, True]
    assert dropped == {"ID_MATCH": 2}


@pytest.mark.slow
def test_aot_compile_rows_work_for_a_transformers_model_that_calls_submodules_by_keyword(gpt2_aot_coldstart):
    """GPT-2 (tiny) through aot_compile: the model's ID_MATCH guards are dropped (and counted),
    and the artifact loads in fresh processes, equals eager and rejects another batch size."""
    result = gpt2_aot_coldstart
    build = result["builds"][0]
    assert build["status"] == "ok", build.get("error")
    assert build["guards_dropped"].get("ID_MATCH", 0) > 0
    for row in result["rows"]:
        assert row["status"] == "ok", row.get("error")
        assert row["accuracy"]["status"] == "pass" and row["wrong_shape"]["outcome"] == "raised"
