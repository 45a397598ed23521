"""Fuzzing (hypothesis) of every loader of untrusted files: run files, journals, thresholds.

The contract: a loader either returns a value its consumers can use, or raises the clear
error (RunFileError / ThresholdConfigError). Anything else escaping (TypeError,
AttributeError, RecursionError, ...) is a bug. Values that load are pushed through the
consumers too (history ingest, the results table, compare), because "loads, then crashes
the gate" is the same bug one step later.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from harness.model.schema import RunFileError, load_run, run_from_dict
from harness.report.display import results_table
from harness.run.journal import read_journal
from harness.run.store import HistoryStore

DATA = Path(__file__).resolve().parent / "data"
V1_FILES = sorted(DATA.glob("run_v1_*.json"))
V1 = json.loads((DATA / "run_v1_faults.json").read_text())
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.floats(allow_nan=True) | st.text(max_size=8)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=10)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):  # the first few elements represent a list well enough
            out += _paths(v, (*prefix, i))
    return out


PATHS = [p for p in _paths(V1) if p]


def _mutate(data: dict, path: tuple, value: Any, delete: bool) -> dict:
    data = copy.deepcopy(data)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return data


def _consume(run) -> None:
    """What the harness does with a loaded run: table, history, compare against itself."""
    from harness.analysis.compare import compare_runs

    Console(file=io.StringIO(), width=200).print(results_table(run))
    with HistoryStore(":memory:") as store:
        store.ingest(run)
        store.load_run(run.run_id)
    compare_runs([run], [run], allow_mismatch=True)


@FUZZ
@given(st.sampled_from(PATHS), json_values, st.booleans())
def test_mutated_run_file_loads_cleanly_or_is_refused(path, value, delete):
    data = _mutate(V1, path, value, delete)
    try:
        run = run_from_dict(json.loads(json.dumps(data)), "<fuzz>")
    except RunFileError:
        return
    _consume(run)


@FUZZ
@given(json_values)
def test_arbitrary_json_is_refused_clearly(value):
    try:
        run = run_from_dict(value, "<fuzz>")
    except RunFileError:
        return
    _consume(run)


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes_as_a_run_file(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("fz") / "run.json"
    path.write_bytes(blob)
    try:
        load_run(path)
    except RunFileError:
        pass


@FUZZ
@given(st.integers(0, 4000), st.binary(max_size=50))
def test_truncated_or_corrupted_run_file(tmp_path_factory, cut, junk):
    text = (DATA / "run_v1_mlp_eager.json").read_bytes()
    path = tmp_path_factory.mktemp("fz") / "run.json"
    path.write_bytes(text[:cut] + junk)
    try:
        _consume(load_run(path))
    except RunFileError:
        pass


@FUZZ
@given(st.lists(json_values, max_size=3), st.binary(max_size=40))
def test_damaged_journal_is_a_clear_error(tmp_path_factory, lines, tail):
    path = tmp_path_factory.mktemp("fz") / "x.journal.jsonl"
    header = {"kind": "header", "journal_version": 1, "run_id": "x", "plan": [V1["records"][0]["case"]]}
    body = "".join(json.dumps(v) + "\n" for v in [header, *({"kind": "record", "record": v} for v in lines)])
    path.write_bytes(body.encode() + tail)
    try:
        read_journal(path)
    except RunFileError:
        pass


@FUZZ
@given(st.dictionaries(st.sampled_from(["defaults", "suite", "workload", "case", "other"]),
                       st.dictionaries(st.text(max_size=12), json_values, max_size=3), max_size=3))
def test_thresholds_config_is_refused_clearly(data):
    from harness.analysis.thresholds import ThresholdConfigError, config_from_dict

    try:
        config_from_dict(data, "<fuzz>")
    except ThresholdConfigError:
        pass


def test_committed_v1_files_load_and_round_trip():
    """The versioned-loader test over committed old files: every tests/data/run_vN_*.json
    loads as schema N and survives a save/load round trip unchanged."""
    assert V1_FILES
    for path in V1_FILES:
        run = load_run(path)
        assert int(path.name.split("_")[1][1:]) == json.loads(path.read_text())["schema_version"]
        assert run.records and all(r.case_id for r in run.records)
        assert run_from_dict(json.loads(json.dumps(run.to_dict()))).to_dict() == run.to_dict()
        _consume(run)
