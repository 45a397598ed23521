"""RUN arguments: files, run ids, prefixes, latest / latest~N[:filter], from run files and the
history store alike (harness/run/lookup.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.cli.main import main
from harness.model.schema import save_run
from harness.run.lookup import RunLookupError, base_problem, find_run, list_runs, resolve_run
from harness.run.store import HistoryStore
from harness.testing.synthetic import synthetic_run


def night(run_id: str, created_at: str, suite: str = "cpu", label: str = "nightly", seed: int = 0, slowdown=0.0):
    run = synthetic_run(3, seed, run_id=run_id, slowdown=slowdown)
    return dataclasses.replace(run, created_at=created_at, label=label, config={"suite": suite})


@pytest.fixture
def results(tmp_path):
    """Three nights: the first two only in the store (CI restores only history.sqlite), the
    third both as a run file and in the store; plus tonight's smoke run, file only."""
    out = tmp_path / "results"
    runs = [night("20261201-031700-nightly-aaaaaa", "2026-12-01T03:17:00+00:00", seed=1),
            night("20261202-031700-nightly-bbbbbb", "2026-12-02T03:17:00+00:00", seed=2),
            night("20261203-031700-nightly-cccccc", "2026-12-03T03:17:00+00:00", seed=3)]
    with HistoryStore(out / "history.sqlite") as store:
        for run in runs:
            store.ingest(run)
    save_run(runs[2], out / "runs" / f"{runs[2].run_id}.json")
    smoke = night("20261203-032500-nightly-dddddd", "2026-12-03T03:25:00+00:00", suite="smoke", seed=4)
    save_run(smoke, out / "runs" / f"{smoke.run_id}.json")
    return out, runs, smoke


def test_latest_counts_files_and_store_together_oldest_first(results):
    out, runs, smoke = results
    assert [e.run_id for e in list_runs(out)] == [r.run_id for r in runs] + [smoke.run_id]
    assert resolve_run("latest", out).run_id == smoke.run_id
    assert resolve_run("latest~1", out).run_id == runs[2].run_id
    assert resolve_run("latest~3", out).run_id == runs[0].run_id


def test_a_store_only_run_loads_whole(results):
    out, runs, _ = results
    entry = find_run("latest~2", out)
    assert entry.path is None and entry.in_store
    loaded = resolve_run("latest~2", out)
    assert loaded.to_dict() == runs[1].to_dict()  # environment, config and every record survive the store


def test_filters_pick_the_previous_night_of_one_suite(results):
    out, runs, smoke = results
    assert resolve_run("latest:suite=cpu", out).run_id == runs[2].run_id
    assert resolve_run("latest~1:suite=cpu,label=nightly", out).run_id == runs[1].run_id
    assert resolve_run("latest:suite=smoke", out).run_id == smoke.run_id
    with pytest.raises(RunLookupError, match=r"only 1 run\(s\) matching suite=smoke"):
        find_run("latest~1:suite=smoke", out)


def test_a_filtered_latest_does_not_skip_past_a_newer_unreadable_run_file(tmp_path, capsys):
    """Without a store, a truncated newest file's label cannot be read: the filter must not
    pick the night before it unawares (unfiltered `latest` names the file and fails on it)."""
    out = tmp_path / "results"
    nights = [night(f"2026120{d}-031700-nightly-{c * 6}", f"2026-12-0{d}T03:17:00+00:00", seed=d)
              for d, c in ((1, "a"), (2, "b"), (3, "c"))]
    for run in nights:
        save_run(run, out / "runs" / f"{run.run_id}.json")
    newest = out / "runs" / f"{nights[2].run_id}.json"
    newest.write_text(newest.read_text()[:200])  # cut mid-write
    with pytest.raises(RunLookupError, match=r"cannot be read .* newer than 20261202-031700-nightly-bbbbbb"):
        find_run("latest:label=nightly", out)
    assert main(["compare", "latest~1:label=nightly", "latest:label=nightly", "--out", str(out)]) == 2
    assert "cannot be read" in capsys.readouterr().err
    newest.unlink()  # removed: the filter picks among the readable ones again
    assert find_run("latest:label=nightly", out).run_id == nights[1].run_id


def test_ids_and_unique_prefixes(results):
    out, runs, _ = results
    assert resolve_run(runs[0].run_id, out).run_id == runs[0].run_id
    assert resolve_run("20261202", out).run_id == runs[1].run_id
    with pytest.raises(RunLookupError, match="runs start with this"):
        find_run("20261203", out)
    path = out / "runs" / f"{runs[2].run_id}.json"
    assert resolve_run(str(path), out).run_id == runs[2].run_id


def test_a_merged_file_not_named_by_its_id_counts_once(tmp_path):
    out = tmp_path / "results"
    merged = night("20261204-040000-merged-eeeeee", "2026-12-04T04:00:00+00:00")
    save_run(merged, out / "runs" / "nightly.json")
    with HistoryStore(out / "history.sqlite") as store:
        store.ingest(merged)
    assert [e.run_id for e in list_runs(out)] == [merged.run_id]


@pytest.mark.parametrize("ref, message", [
    ("latest~9", "there are only 4 run(s)"),
    ("nosuchrun", "no such run file or run id"),
    ("latest:host=x", "filter 'host=x' is not KEY=VALUE"),
])
def test_unknown_runs_are_one_line_and_exit_2(results, capsys, ref, message):
    out, runs, _ = results
    code = main(["compare", ref, runs[2].run_id, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and message in err


def test_compare_reads_the_previous_night_from_the_store(results, capsys):
    out, runs, _ = results
    code = main(["compare", "latest~1:suite=cpu", "latest:suite=cpu", "--out", str(out), "--json"])
    captured = capsys.readouterr().out
    assert code == 0
    assert runs[1].run_id in captured and runs[2].run_id in captured


def test_no_store_no_files(tmp_path):
    with pytest.raises(RunLookupError, match="no history store"):
        find_run("latest", tmp_path)


def test_a_run_file_is_found_without_opening_a_damaged_store(results, capsys, tmp_path):
    out, runs, smoke = results
    (out / "history.sqlite").write_bytes(b"this is not an sqlite file " * 200)
    for ref in (smoke.run_id, runs[2].run_id):  # OUT/runs/REF.json: the source of truth, no store needed
        assert find_run(ref, out).path == out / "runs" / f"{ref}.json"
        assert main(["show", ref, "--out", str(out)]) == 0
        assert main(["report", ref, "--out", str(out), "-o", str(tmp_path / "r.html")]) == 0
    assert main(["compare", runs[2].run_id, smoke.run_id, "--out", str(out)]) in (0, 1)
    capsys.readouterr()
    # what only the store can answer still says the store is damaged (exit 3)
    assert main(["show", runs[0].run_id, "--out", str(out)]) == 3
    assert "is damaged" in capsys.readouterr().err


def test_show_lists_store_only_runs_marked_as_such(results, capsys):
    out, runs, smoke = results
    assert main(["show", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{runs[0].run_id} (history store only: no run file)",
                     f"{runs[1].run_id} (history store only: no run file)", runs[2].run_id, smoke.run_id]
    assert main(["show", "--json", "--out", str(out)]) == 0
    assert json.loads(capsys.readouterr().out) == [r.run_id for r in (*runs, smoke)]


def spoiled(run, how: str):
    """`run` made unfit as a base: a contended case, every case failed/skipped, interrupted, incomplete."""
    records = [dataclasses.replace(r) for r in run.records]
    config = dict(run.config)
    if how == "contended":
        records[1].metrics = {**records[1].metrics, "contention": {"contended": True, "cpu_wait_fraction": 0.5}}
    elif how == "failed":
        records = [dataclasses.replace(r, status="fail_run") for r in records[:2]] + \
                  [dataclasses.replace(r, status="skipped") for r in records[2:]]
    elif how == "interrupted":
        config["interrupted"] = True
    elif how == "incomplete":
        config["shards"] = {"count": 2, "missing_shards": [2], "missing_cases": ["a", "b"]}
    return dataclasses.replace(run, records=records, config=config)


@pytest.mark.parametrize("in_store", [True, False], ids=["store", "files"])
def test_judgeable_skips_nights_that_cannot_be_a_base(tmp_path, in_store):
    out = tmp_path / "results"
    good = night("20261201-031700-nightly-aaaaaa", "2026-12-01T03:17:00+00:00")
    bad = [spoiled(night(f"2026120{d}-031700-nightly-{how[:6]}", f"2026-12-0{d}T03:17:00+00:00", seed=d), how)
           for d, how in zip(range(2, 6), ("contended", "failed", "interrupted", "incomplete"), strict=True)]
    clean = night("20261206-031700-nightly-ffffff", "2026-12-06T03:17:00+00:00")
    with HistoryStore(out / "history.sqlite") as store:
        for run in (good, *bad, clean):
            if in_store:
                store.ingest(run)
            else:
                save_run(run, out / "runs" / f"{run.run_id}.json")
    assert resolve_run("latest:label=nightly,judgeable", out).run_id == clean.run_id
    assert resolve_run("latest~1:label=nightly,judgeable", out).run_id == good.run_id
    assert resolve_run("latest~1:label=nightly", out).run_id == bad[-1].run_id  # without the filter: any night
    problems = {e.run_id: base_problem(e.health) for e in list_runs(out, need_health=True)}
    assert problems[good.run_id] is None and problems[clean.run_id] is None
    assert problems[bad[0].run_id] == "machine contended: 1 of 3 ok case(s) timed on a contended machine"
    assert problems[bad[1].run_id] == "no case ok (2 failed, 1 skipped)"
    assert problems[bad[2].run_id] == "interrupted: a partial run"
    assert problems[bad[3].run_id].startswith("incomplete: 2 planned case(s) missing")
    with pytest.raises(RunLookupError, match="only 2 run"):
        resolve_run("latest~2:judgeable", out)


def test_a_run_file_is_judged_by_its_file_not_the_store(tmp_path):
    """The run files are the source of truth: a store row of the same id does not override them."""
    out = tmp_path / "results"
    run = night("20261201-031700-nightly-aaaaaa", "2026-12-01T03:17:00+00:00")
    with HistoryStore(out / "history.sqlite") as store:
        store.ingest(run)
    save_run(spoiled(run, "contended"), out / "runs" / f"{run.run_id}.json")
    with pytest.raises(RunLookupError, match="only 0 run"):
        find_run("latest:judgeable", out)


def test_an_unknown_filter_word_names_judgeable(results):
    out, _, _ = results
    with pytest.raises(RunLookupError, match="nor 'judgeable'"):
        resolve_run("latest:judged", out)
