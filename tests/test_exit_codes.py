"""The CI contract (issue 23): every command answers each class of fault with its exit code
and one line on stderr, never a traceback, and keeps what it had already written.

Exit codes (README "Exit codes"): 0 ok, 1 a case failed or a regression, 2 bad usage or
input, 3 the harness could not do its job, 130 interrupted.

Faults and how each is made here:
- read-only folder: a read-only tmpfs mounted for the test where `mount` works (root in a
  container: chmod has no effect on root); else a chmod 0555 folder when that really
  denies writing (os.access); else the test is skipped.
- disk full (ENOSPC): a 200 KiB tmpfs filled to the last byte where `mount` works; else
  SIMULATED by making os.fsync raise OSError(ENOSPC), which every atomic write and the
  journal call before their rename (the test id says `tmpfs` or `simulated`).
- corrupt store: garbage bytes in history.sqlite ("file is not a database").
- half-corrupt store: a valid store with one page overwritten, and a valid store cut in half.
- truncated and foreign run files.
Most of this runs in-process through main(argv) and compiles nothing; the two real runs
are one tiny eager MLP case each (seconds).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli import main as cli
from harness.model.schema import load_run, save_run
from harness.run.store import HistoryStore
from harness.testing.synthetic_history import SyntheticSpec, synthetic_history

ROOT = Path(__file__).resolve().parent.parent
V1_RUN = ROOT / "tests" / "data" / "run_v1_mlp_eager.json"
# spawned: for one case that costs less than starting a preloaded server (test_forkserver holds the two paths equal)
TINY_RUN = ["-w", "mlp-classic", "--scenario", "forward", "-c", "eager", "--size", "tiny", "--min-time", "0.01",
            "--min-samples", "3", "--warmup", "1", "--no-preload"]
PYTEST_BENCHMARK = {"machine_info": {"node": "h", "machine": "x86_64"}, "commit_info": {}, "version": "4.0.0",
                    "datetime": "2026-01-01T00:00:00",
                    "benchmarks": [{"name": "t", "fullname": "t", "group": None, "params": None,
                                    "stats": {"min": 0.1, "max": 0.2, "mean": 0.15, "stddev": 0.01, "median": 0.15,
                                              "rounds": 5, "iterations": 1, "data": [0.1, 0.15, 0.15, 0.16, 0.2]}}]}


def _call(capsys, argv: list[str]) -> tuple[int, list[str], str]:
    """(exit code, non-empty stderr lines, stdout) of main(argv); argparse's own exits too."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, [line for line in captured.err.splitlines() if line.strip()], captured.out


def _one_error(capsys, argv: list[str], code: int) -> str:
    """Assert the exit code, exactly one error line on stderr (after any progress lines) and
    no traceback anywhere; return the error line."""
    got, err, out = _call(capsys, argv)
    assert got == code, (argv, got, err)
    errors = [line for line in err if line.startswith("compilebench: error: ")]
    assert len(errors) == 1 and err[-1] == errors[0], err
    assert "Traceback" not in "\n".join(err) + out
    return errors[0]


# ---------------------------------------------------------------- the table, on every command

def _subcommands() -> dict[str, object]:
    import argparse

    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_subcommand_documents_the_exit_codes_and_takes_debug():
    commands = _subcommands()
    assert {"run", "show", "list", "compare", "gate", "store", "merge", "report", "dashboard"} <= set(commands)
    for name, parser in commands.items():
        text = " ".join(parser.format_help().split())
        assert "exit codes: 0 ok; 1 " in text and "3 the harness could not do its job" in text, name
        assert "--debug" in text, name


def test_debug_before_or_after_the_subcommand_shows_the_traceback(capsys):
    for argv in (["run", "--suite", "smok", "--debug"], ["--debug", "run", "--suite", "smok"]):
        assert cli.main(argv) == cli.EXIT_USAGE
        err = capsys.readouterr().err
        assert "Traceback" in err and err.strip().splitlines()[-1].startswith("compilebench: error: unknown suite")
    assert "Traceback" not in _one_error(capsys, ["run", "--suite", "smok"], cli.EXIT_USAGE)


def test_an_unexpected_exception_is_one_line_and_exit_3_not_1(capsys, monkeypatch):
    from harness.cli import listing

    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(listing, "catalog", broken)
    line = _one_error(capsys, ["list"], cli.EXIT_HARNESS)
    assert "internal error: RuntimeError: boom second line" in line and "--debug" in line


# ---------------------------------------------------------------- fault fixtures

def _mount(target: Path, options: str) -> bool:
    target.mkdir(parents=True, exist_ok=True)
    if not shutil.which("mount"):
        return False
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True)
    return res.returncode == 0


def _umount(target: Path) -> None:
    # lazy: a file a failed command left open (the run journal's, on a full disk) must not keep it mounted
    subprocess.run(["umount", "-l", str(target)], capture_output=True)


@pytest.fixture
def read_only_dir(tmp_path) -> Iterator[Path]:
    target = tmp_path / "ro"
    if _mount(target, "ro,size=64k"):
        try:
            yield target
        finally:
            _umount(target)
        return
    target.chmod(0o555)
    if os.access(target, os.W_OK):  # root: chmod does not stop it, and no mount either
        target.chmod(0o755)
        pytest.skip("no read-only folder possible here: running as root without mount")
    yield target
    target.chmod(0o755)


@pytest.fixture(params=["tmpfs", "simulated"])
def full_dir(request, tmp_path, monkeypatch) -> Iterator[Path]:
    """A folder on a full disk: a real 200 KiB tmpfs filled up, or (where mount is refused,
    and always as the second parameter) SIMULATED: os.fsync raises ENOSPC."""
    target = tmp_path / "full"
    if request.param == "tmpfs":
        if not _mount(target, "size=200k"):
            pytest.skip("tmpfs cannot be mounted here; the simulated case covers ENOSPC")
        try:
            with open(target / "filler", "wb", buffering=0) as fh:  # unbuffered: close has nothing left to flush
                try:
                    while True:
                        fh.write(b"\0" * 4096)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
            yield target
        finally:
            _umount(target)
        return
    target.mkdir()

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    yield target


def _writers(tmp_path: Path, where: Path) -> dict[str, list[str]]:
    """Commands that write into `where`, each with inputs that are fine."""
    db = tmp_path / "good" / "history.sqlite"
    if not db.exists():
        with HistoryStore(db) as store:
            store.ingest(load_run(V1_RUN))
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(PYTEST_BENCHMARK))
    return {
        "run": ["run", *TINY_RUN, "--no-ingest", "--out", str(where)],
        "report": ["report", str(V1_RUN), "-o", str(where / "r.html")],
        "merge": ["merge", str(V1_RUN), "-o", str(where / "merged.json")],
        "export": ["export-pytest-benchmark", str(V1_RUN), "-o", str(where / "pb.json")],
        "import": ["import-pytest-benchmark", str(bench), "--out", str(where)],
        "compare-markdown": ["compare", str(V1_RUN), str(V1_RUN), "--markdown", str(where / "c.md")],
        "expected": ["expected", "update", str(V1_RUN), "--file", str(where / "e.json")],
        "dashboard": ["dashboard", "--db", str(db), "-o", str(where / "dash")],
        "store-rebuild": ["store", "rebuild", "--db", str(where / "history.sqlite"), "--runs", str(V1_RUN)],
    }


WRITERS = ["run", "report", "merge", "export", "import", "compare-markdown", "expected", "dashboard", "store-rebuild"]


@pytest.mark.parametrize("command", WRITERS)
def test_read_only_output_folder_is_exit_3_naming_it(capsys, tmp_path, read_only_dir, command):
    line = _one_error(capsys, _writers(tmp_path, read_only_dir)[command], cli.EXIT_HARNESS)
    assert str(read_only_dir) in line, line
    assert any(word in line for word in ("Read-only file system", "Permission denied")), line
    # the hint is about the path that failed: --out only for what the command writes under its --out
    assert ("point --out elsewhere" in line) == (command in ("run", "import")), line


@pytest.mark.parametrize("command", WRITERS)
def test_full_disk_is_exit_3_naming_the_folder(capsys, tmp_path, full_dir, command, request):
    if command == "store-rebuild" and "simulated" in request.node.name:
        pytest.skip("the simulation reaches Python's writes, not SQLite's own; the tmpfs case covers the store")
    line = _one_error(capsys, _writers(tmp_path, full_dir)[command], cli.EXIT_HARNESS)
    assert str(full_dir) in line and ("No space left on device" in line or "disk is full" in line), line
    if "No space left on device" in line:
        assert ("point --out elsewhere" in line) == (command in ("run", "import")), line
    leftovers = [p.name for p in full_dir.rglob("*") if p.is_file() and p.name != "filler" and p.stat().st_size]
    assert not leftovers, leftovers  # no half-written output, no empty journal either


def test_a_journal_whose_header_hits_a_full_disk_leaves_no_file_and_no_open_fd(tmp_path, monkeypatch):
    """SIMULATED ENOSPC at the header's fsync (the tmpfs case of the run above covers the real one)."""
    from harness.run.journal import Journal

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    path = tmp_path / "runs" / "r.journal.jsonl"
    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match="No space left"):
        Journal.create(path, {"run_id": "r"})
    assert not path.exists()
    open_fds = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if fd.isdigit()
                and os.path.exists(f"/proc/self/fd/{fd}")]
    assert not [target for target in open_fds if "r.journal.jsonl" in target], open_fds


# ---------------------------------------------------------------- corrupt and half-corrupt stores

def _results(tmp_path: Path, nights: int = 40) -> Path:
    """OUT with run files and the store holding the same runs (SYNTHETIC data)."""
    out = tmp_path / "results"
    with HistoryStore(out / "history.sqlite") as store:
        for run in synthetic_history(SyntheticSpec(cases=3), nights):
            store.ingest(run)
            save_run(run, out / "runs" / f"{run.run_id}.json")
    return out


def _damage_content(data: bytearray) -> None:
    """Garbage inside one stored record's JSON, on a table leaf page (type 13) past the b-tree
    pages the quick check reads: the file's structure stays sound, one record no longer parses."""
    page_size = 4096
    key = b'"case_id"'
    for start in range(page_size * 8, len(data), page_size):
        page = data[start:start + page_size]
        if page[0] == 13 and key in page:
            at = start + page.index(key)
            data[at:at + len(key)] = b"#" * len(key)
            return
    raise AssertionError("no record content page to damage")


def _damage(db: Path, kind: str) -> None:
    data = bytearray(db.read_bytes())
    if kind == "garbage":
        db.write_bytes(b"this is not an sqlite file " * 200)
    elif kind == "page":  # a b-tree page of the records table overwritten, and a content page further on
        data[4096 * 3:4096 * 4] = b"\x00\x07" * 2048
        _damage_content(data)
        db.write_bytes(bytes(data))
    elif kind == "content":  # only a record's JSON: PRAGMA quick_check and integrity_check both say ok
        _damage_content(data)
        db.write_bytes(bytes(data))
    elif kind == "truncated":
        db.write_bytes(bytes(data[: len(data) // 2]))


def _store_readers(out: Path, tmp_path: Path) -> dict[str, list[str]]:
    last = sorted((out / "runs").glob("*.json"))[-1]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(PYTEST_BENCHMARK))
    return {
        "run": ["run", *TINY_RUN, "--out", str(out)],
        # a prefix needs the store (an exact run file's name does not: test_run_lookup.py)
        "show-id": ["show", last.stem[:-3], "--out", str(out)],
        "compare-latest": ["compare", "latest~1", "latest", "--out", str(out)],
        "report-latest": ["report", "latest", "-o", str(tmp_path / "r.html"), "--out", str(out)],
        "dashboard": ["dashboard", "--db", str(out / "history.sqlite"), "-o", str(tmp_path / "dash")],
        "merge-ingest": ["merge", str(last), "-o", str(tmp_path / "merged.json"), "--ingest", str(out / "history.sqlite")],
        "import": ["import-pytest-benchmark", str(bench), "--out", str(out)],
        "store-check": ["store", "check", "--out", str(out)],
    }


@pytest.mark.parametrize("kind", ["garbage", "page", "truncated"])
def test_a_damaged_store_is_refused_by_every_command_then_rebuilt(capsys, tmp_path, kind):
    out = _results(tmp_path)
    db = out / "history.sqlite"
    _damage(db, kind)
    damaged = db.read_bytes()
    runs_before = {p: p.read_bytes() for p in (out / "runs").glob("*.json")}
    for name, argv in _store_readers(out, tmp_path).items():
        line = _one_error(capsys, argv, cli.EXIT_HARNESS)
        assert f"history store {db} is damaged" in line and f"compilebench store rebuild --out {out}" in line, (name, line)
        if name == "merge-ingest":  # the rebuild reads OUT/runs/, which does not hold the merged file
            assert (f"--runs {out / 'runs'} --runs {tmp_path / 'merged.json'}`" in line), line
        assert db.read_bytes() == damaged, name  # never touched, let alone deleted
    assert all(p.read_bytes() == text for p, text in runs_before.items())  # the source of truth untouched
    assert (tmp_path / "merged.json").exists()  # merge wrote its file before the ingest failed
    assert not (tmp_path / "dash").exists() and not (tmp_path / "r.html").exists()
    assert not [p for p in (out / "runs").glob("*.json") if "adhoc" in p.name]  # run refused before any case

    code, _, stdout = _call(capsys, ["store", "rebuild", "--out", str(out)])
    assert code == cli.EXIT_OK, stdout
    (aside,) = out.glob("history.sqlite.before-rebuild-*")
    assert aside.read_bytes() == damaged  # moved aside whole
    runs_in_files = len(list((out / "runs").glob("*.json")))  # incl. the imported pytest-benchmark run
    assert f"{runs_in_files} run(s)" in stdout
    code, _, stdout = _call(capsys, ["store", "check", "--out", str(out), "--full"])
    assert code == cli.EXIT_OK and f"{runs_in_files} run(s)" in stdout
    assert _call(capsys, ["compare", "latest~2", "latest~1", "--out", str(out)])[0] in (cli.EXIT_OK, cli.EXIT_FAILED)


def test_the_real_entry_point_on_a_damaged_store(tmp_path):
    out = _results(tmp_path, nights=3)
    _damage(out / "history.sqlite", "garbage")
    res = subprocess.run([sys.executable, "-m", "harness", "store", "check", "--out", str(out)], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert res.returncode == 3 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "file is not a database" in res.stderr and "Traceback" not in res.stderr


def _unparsable(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        bad = []
        for run_id, text in conn.execute("SELECT run_id, record_json FROM records"):
            try:
                json.loads(text)
            except ValueError:
                bad.append(run_id)
        return bad
    finally:
        conn.close()


def test_a_damaged_record_is_found_by_the_full_check_and_named_by_every_reader(capsys, tmp_path):
    out = _results(tmp_path, nights=12)
    db = out / "history.sqlite"
    _damage(db, "content")
    (damaged_run,) = _unparsable(db)
    (out / "runs" / f"{damaged_run}.json").unlink()  # the damaged run lives only in the store
    assert _call(capsys, ["store", "check", "--out", str(out)])[0] == cli.EXIT_OK  # the quick check cannot see it
    line = _one_error(capsys, ["store", "check", "--out", str(out), "--full"], cli.EXIT_HARNESS)
    assert f"history store {db} is damaged" in line and damaged_run in line
    for argv in (["show", damaged_run, "--out", str(out)], ["compare", damaged_run, damaged_run, "--out", str(out)],
                 ["dashboard", "--db", str(db), "-o", str(tmp_path / "dash")]):
        line = _one_error(capsys, argv, cli.EXIT_HARNESS)
        assert f"history store {db} is damaged" in line and f"compilebench store rebuild --out {out}" in line, line
        assert "internal error" not in line, line


def test_rebuild_refuses_a_missing_runs_folder_and_an_empty_swap(capsys, tmp_path):
    out = _results(tmp_path, nights=3)
    db = out / "history.sqlite"
    before = db.read_bytes()
    shutil.rmtree(out / "runs")
    line = _one_error(capsys, ["store", "rebuild", "--out", str(out)], cli.EXIT_HARNESS)
    assert f"{out / 'runs'} does not exist" in line and "--runs DIR" in line, line
    (out / "runs").mkdir()
    # the empty folder: the old store's runs are read back, not swapped for nothing
    code, _, stdout = _call(capsys, ["store", "rebuild", "--out", str(out)])
    assert code == cli.EXIT_OK and "3 run(s)" in stdout and "3 run(s) with no run file kept" in stdout, stdout
    (aside,) = out.glob("history.sqlite.before-rebuild-*")
    assert aside.read_bytes() == before
    with HistoryStore(aside) as old, HistoryStore(db) as new:
        assert new.run_ids() == old.run_ids() and new.counts() == old.counts()


def test_rebuild_leaves_out_a_run_file_the_store_cannot_hold_and_says_which(capsys, tmp_path):
    """A valid run file with a case twice (or an integer beyond 64 bits) used to abort every
    rebuild with an internal error, blocking the recovery tool while the file sat in runs/."""
    import dataclasses

    out = _results(tmp_path, nights=3)
    run = next(iter(synthetic_history(SyntheticSpec(cases=2), 1)))
    twice = dataclasses.replace(run, run_id="20300101-000000-twice-aaaaaa", records=[run.records[0], run.records[0]])
    save_run(twice, out / "runs" / f"{twice.run_id}.json")
    code, _, stdout = _call(capsys, ["store", "rebuild", "--out", str(out)])
    assert code == cli.EXIT_OK and "3 run(s)" in stdout and "1 file(s) left out" in stdout, stdout
    assert f"{twice.run_id}.json: run {twice.run_id} cannot go into the history store" in stdout, stdout
    with HistoryStore(out / "history.sqlite") as store:
        assert twice.run_id not in store.run_ids()


def test_rebuild_refuses_to_replace_an_unreadable_store_with_an_empty_one(capsys, tmp_path):
    out = _results(tmp_path, nights=2)
    db = out / "history.sqlite"
    _damage(db, "garbage")
    for path in (out / "runs").glob("*.json"):
        path.unlink()
    line = _one_error(capsys, ["store", "rebuild", "--out", str(out)], cli.EXIT_HARNESS)
    assert "refusing to replace" in line and "--allow-empty" in line, line
    assert db.read_bytes() == b"this is not an sqlite file " * 200 and not list(out.glob("*.before-rebuild-*"))
    code, _, stdout = _call(capsys, ["store", "rebuild", "--out", str(out), "--allow-empty"])
    assert code == cli.EXIT_OK and "0 run(s)" in stdout


def test_rebuild_salvages_what_a_damaged_store_still_gives_and_names_the_rest(capsys, tmp_path):
    out = _results(tmp_path, nights=12)
    db = out / "history.sqlite"
    _damage(db, "content")
    (damaged_run,) = _unparsable(db)
    files = sorted((out / "runs").glob("*.json"))
    for path in files[:4]:
        path.unlink()
    gone = {p.stem for p in files[:4]}
    code, _, stdout = _call(capsys, ["store", "rebuild", "--out", str(out)])
    assert code == cli.EXIT_OK, stdout
    lost = 1 if damaged_run in gone else 0
    assert f"{12 - lost} run(s)" in stdout and f"{4 - lost} run(s) with no run file kept from the old store" in stdout
    if lost:
        assert f"lost (only in the old store, which could not give it back): {damaged_run}" in stdout
    with HistoryStore(db) as store:
        assert set(store.run_ids()) == {p.stem for p in files} - ({damaged_run} if lost else set())
        assert store.unparsable_records() == []


def test_check_of_a_missing_store_is_bad_input_like_dashboard(capsys, tmp_path):
    for argv in (["store", "check", "--out", str(tmp_path)], ["dashboard", "--db", str(tmp_path / "history.sqlite"),
                                                                "-o", str(tmp_path / "d")]):
        line = _one_error(capsys, argv, cli.EXIT_USAGE)
        assert str(tmp_path / "history.sqlite") in line or str(tmp_path) in line, line
    line = _one_error(capsys, ["store", "check", "--db", str(tmp_path / "x.sqlite")], cli.EXIT_USAGE)
    assert f"compilebench store rebuild --db {tmp_path / 'x.sqlite'} --runs DIR" in line, line


def test_opening_a_damaged_store_names_the_file_for_any_path(tmp_path):
    from harness.run.store import StoreCorruptError

    db = tmp_path / "elsewhere.sqlite"
    db.write_bytes(b"garbage" * 100)
    with pytest.raises(StoreCorruptError, match="store rebuild --db .*elsewhere.sqlite --runs DIR"):
        HistoryStore(db)


# ---------------------------------------------------------------- a run whose ingest fails keeps its run file

def test_a_run_whose_ingest_fails_keeps_its_run_file_and_exits_3(capsys, tmp_path):
    """Real: the store path is a folder (SQLite cannot open it), so the ingest after the case fails."""
    out = tmp_path / "out"
    (out / "history.sqlite").mkdir(parents=True)
    code, err, stdout = _call(capsys, ["run", *TINY_RUN, "--out", str(out), "--json"])
    assert code == cli.EXIT_HARNESS and err[-1].startswith("compilebench: error: ") and "Traceback" not in stdout
    assert "history.sqlite" in err[-1] and "kept in its run file" in err[-1], err
    (run_file,) = (out / "runs").glob("*.json")
    assert [r.status for r in load_run(run_file).records] == ["ok"]
    assert json.loads(stdout)["run_id"] == run_file.stem  # --json still prints the run
    assert any("mlp-classic/forward/eager" in line for line in err)  # and the table (on stderr under --json)


def test_an_import_whose_ingest_hits_a_full_disk_keeps_its_run_file(capsys, tmp_path, monkeypatch):
    """SIMULATED: SQLite's own answer to ENOSPC ("database or disk is full") raised by the ingest."""
    from harness.run import store as store_module

    def full(*args):  # inside the ingest's transaction, where SQLite would raise it
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store_module, "record_row", full)
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(PYTEST_BENCHMARK))
    line = _one_error(capsys, ["import-pytest-benchmark", str(bench), "--out", str(tmp_path / "o")], cli.EXIT_HARNESS)
    assert "disk is full" in line and "history.sqlite" in line
    assert len(list((tmp_path / "o" / "runs").glob("*.json"))) == 1


# ---------------------------------------------------------------- truncated and foreign run files

@pytest.mark.parametrize("kind", ["truncated", "foreign"])
def test_truncated_and_foreign_run_files_are_exit_2_naming_the_file(capsys, tmp_path, kind):
    bad = tmp_path / f"{kind}.json"
    bad.write_text(V1_RUN.read_text()[:300] if kind == "truncated" else json.dumps(PYTEST_BENCHMARK))
    for argv in (["show", str(bad)], ["report", str(bad), "-o", str(tmp_path / "r.html")],
                 ["compare", str(V1_RUN), str(bad)], ["merge", str(bad), "-o", str(tmp_path / "m.json")],
                 ["export-pytest-benchmark", str(bad), "-o", str(tmp_path / "p.json")],
                 ["expected", "check", str(bad), "--file", str(tmp_path / "e.json")]):
        line = _one_error(capsys, argv, cli.EXIT_USAGE)
        assert str(bad) in line, (argv, line)
    assert sorted(p.name for p in tmp_path.iterdir()) == [bad.name]  # nothing written
    # inside runs/, a rebuild lists it and goes on; the file itself stays
    out = _results(tmp_path, nights=2)
    shutil.copy(bad, out / "runs" / bad.name)
    code, _, stdout = _call(capsys, ["store", "rebuild", "--out", str(out)])
    assert code == cli.EXIT_OK and "2 run(s)" in stdout and f"left out (not a readable run file): {out / 'runs' / bad.name}" in stdout
    assert (out / "runs" / bad.name).read_text() == bad.read_text()


# ---------------------------------------------------------------- nothing measured

def test_a_run_whose_every_case_was_skipped_exits_3_and_says_why(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA: every cuda case must be skipped")
    argv = ["run", "-w", "mlp-classic,mlp-deep", "--scenario", "forward", "-c", "eager", "--device", "cuda",
            "--no-ingest", "--out", str(tmp_path)]
    code, err, out = _call(capsys, argv)
    assert code == cli.EXIT_HARNESS
    assert err[-1].startswith("compilebench: error: nothing measured: all 2 case(s) were skipped")
    for workload in ("mlp-classic", "mlp-deep"):  # each case's reason, in the summary
        assert any(line.startswith(f"{workload}/forward/eager/cuda") and "skipped: cuda not available" in line
                   for line in out.splitlines()), out
    assert len(list((tmp_path / "runs").glob("*.json"))) == 1  # the run file is still written
    assert _call(capsys, [*argv, "--allow-skips"])[0] == cli.EXIT_OK


def test_a_shard_with_no_case_is_nothing_to_run(capsys, tmp_path):
    argv = ["run", "-w", "mlp-classic", "--scenario", "forward", "-c", "eager", "--shard", "2/2", "--no-ingest",
            "--out", str(tmp_path)]
    code, err, out = _call(capsys, argv)  # the shard did its whole job: exit 0 (tests/test_empty_shard.py)
    assert code == cli.EXIT_OK and not err
    assert "shard 2/2 holds no case of this plan (1 planned case(s) over 2 shards): nothing to run" in out


# ---------------------------------------------------------------- CI logs: tables never cut

LONG_ID = "zz-workload-with-a-very-long-name/forward/inductor/cpu/bf16x"  # 60 characters


def test_a_table_into_a_pipe_keeps_a_long_case_id_and_the_verdict_whole_on_one_line(capsys):
    from rich.table import Table
    from rich.text import Text

    from harness.report.display import make_console, print_table

    assert len(LONG_ID) == 60
    table = Table(title="comparison")
    extra = [f"extra column {i}" for i in range(8)]  # wider than any fixed console width (220 was the old one)
    for column in ("case", "metric", "base", "head", "change", "verdict", *extra):
        table.add_column(column)
    table.add_row(Text(LONG_ID), "latency", "1.00ms", "1.30ms", "+30.0%", "[bold red]slower (eager too)[/]",
                  *(f"value {'x' * 20}" for _ in extra))
    table.add_row("short", "speedup", "2.00x", "2.01x", "+0.5%", Text("unchanged"), *("-" for _ in extra))
    for fmt in ("auto", "plain", "markdown"):
        print_table(make_console(), table, fmt)  # capsys: stdout is not a terminal
        lines = capsys.readouterr().out.splitlines()
        assert any(LONG_ID in line and "slower (eager too)" in line for line in lines), (fmt, lines)
        assert not any("…" in line for line in lines)


def test_show_into_a_pipe_never_cuts_a_case_id(capsys, tmp_path):
    run = load_run(V1_RUN)
    record = run.records[0]
    record.case = type(record.case)(**{**record.case.__dict__, "workload": "w" * 70})
    path = save_run(run, tmp_path / "long.json")
    code, _, out = _call(capsys, ["show", str(path)])
    assert code == cli.EXIT_OK
    assert any(record.case.case_id in line and record.status in line for line in out.splitlines())
    code, _, out = _call(capsys, ["show", str(path), "--format", "markdown"])
    assert code == cli.EXIT_OK and any(line.startswith(f"| {record.case.case_id} |") for line in out.splitlines())


def test_json_means_json_on_stdout(capsys, tmp_path):
    for argv in (["list", "--json"], ["show", str(V1_RUN), "--json"], ["env", "list", "--json"]):
        code, _, out = _call(capsys, argv)
        assert code == cli.EXIT_OK and json.loads(out), argv


def test_a_coldstart_whose_every_row_was_skipped_exits_3(capsys, tmp_path, monkeypatch):
    """The row runner faked (its real path is tests/test_lifecycle.py): every row skipped, as on
    a torch without aot_compile / AOTInductor."""
    from harness.experiments import lifecycle

    def all_skipped(opts, progress):
        rows = [{"row": r, "kind": "load", "status": "skipped", "error": f"{r}: this torch lacks it"} for r in opts.rows]
        return {"config": {"workload": opts.workload, "size": opts.size, "batch_size": 1, "device": "cpu",
                           "dtype": "float32"}, "rows": rows, "builds": []}

    monkeypatch.setattr(lifecycle, "coldstart", all_skipped)
    argv = ["coldstart", "-w", "mlp-classic", "--rows", "aot_compile,aoti", "--json-file", str(tmp_path / "c.json")]
    line = _one_error(capsys, argv, cli.EXIT_HARNESS)
    assert line.startswith("compilebench: error: nothing measured: all 2 row(s) were skipped")
    assert json.loads((tmp_path / "c.json").read_text())["rows"][1]["status"] == "skipped"  # the result still written
    assert _call(capsys, [*argv, "--allow-skips"])[0] == cli.EXIT_OK



@pytest.mark.parametrize("args, code", [(["-k", "no_test_has_this_name"], 3), ([], 1)])
def test_ci_pytest_wrapper_turns_no_tests_ran_into_an_explained_failure(tmp_path, args, code):
    """tox's test env runs .ci/pytest_strict.py: pytest's exit 5 (collected nothing: a bad path,
    a -k/-m that matches nothing) must fail CI with a reason, never pass it; other codes pass through."""
    (tmp_path / "test_two.py").write_text("def test_passes():\n    pass\n\n\ndef test_fails():\n    assert False\n")
    proc = subprocess.run([sys.executable, str(ROOT / ".ci" / "pytest_strict.py"), "-q", "-p", "no:cacheprovider",
                           "test_two.py", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})  # a bare pytest: seconds less
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert ("collected no tests (exit 5)" in proc.stderr) == (code == 3)


def test_a_resume_is_refused_on_a_damaged_store_before_any_case(capsys, tmp_path):
    """As `run` is: a resume used to measure every missing case and only then fail its ingest."""
    from harness.model.schema import Run
    from harness.run.journal import Journal, journal_header
    from harness.run.runner import RunOptions, plan_cases

    out = _results(tmp_path, nights=2)
    opts = RunOptions(workloads=["mlp-classic"], scenarios=["forward"], compilers=["eager"], sizes=["tiny"],
                      devices=["cpu"], out_dir=str(out))
    cases, _ = plan_cases(opts)
    run_id = "20300101-000000-cut-aaaaaa"
    run = Run(run_id, "2030-01-01T00:00:00+00:00", "cut", {}, {})
    Journal.create(out / "runs" / f"{run_id}.journal.jsonl", journal_header(run, cases, opts)).close()
    _damage(out / "history.sqlite", "garbage")
    line = _one_error(capsys, ["run", "--resume", run_id, "--out", str(out)], cli.EXIT_HARNESS)
    assert "is damaged" in line and "compilebench store rebuild" in line, line
    assert not (out / "runs" / f"{run_id}.json").exists()  # no case ran: its run file would be written first


def test_a_failed_ingest_after_the_run_file_leaves_no_journal_to_resume(tmp_path):
    """The complete run file holds everything: a journal left beside it let `--resume` rewrite
    a finished run (its wall time and servers lost)."""
    from harness.run import runner
    from harness.run.store import StoreError

    out = tmp_path / "results"
    out.mkdir()
    (out / "history.sqlite").write_bytes(b"this is not an sqlite file " * 200)  # found at the ingest
    opts = runner.RunOptions(workloads=["mlp-classic"], scenarios=["forward"], compilers=["eager"], sizes=["tiny"],
                             devices=["cpu"], out_dir=str(out), preload=False,
                             policy={"min_time_s": 0.01, "min_samples": 3, "warmup": 1})
    with pytest.raises(StoreError) as caught:
        runner.execute(opts)
    run = caught.value.run
    assert (out / "runs" / f"{run.run_id}.json").is_file()
    assert not list((out / "runs").glob("*.journal.jsonl"))


def test_a_harness_error_between_cases_still_writes_the_finished_cases_run_file(tmp_path, monkeypatch):
    """An exception in the parent (a bug, a full disk) used to end the run with only a journal."""
    from harness.model.schema import load_run
    from harness.run import runner

    real, calls = runner.run_worker, []

    def failing_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom between cases")
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "run_worker", failing_second)
    out = tmp_path / "results"
    opts = runner.RunOptions(workloads=["mlp-classic"], scenarios=["forward", "train"], compilers=["eager"],
                             sizes=["tiny"], devices=["cpu"], out_dir=str(out), preload=False, ingest=False,
                             policy={"min_time_s": 0.01, "min_samples": 3, "warmup": 1})
    with pytest.raises(RuntimeError, match="boom between cases"):
        runner.execute(opts)
    (path,) = (out / "runs").glob("*.json")
    run = load_run(path)
    assert len(run.records) == 1 and run.records[0].status == "ok"
    assert run.config["interrupted"] is True and run.config["error"] == "RuntimeError: boom between cases"
    assert list((out / "runs").glob("*.journal.jsonl"))  # kept: --resume runs the case that never ran


def test_following_merge_ingests_rebuild_hint_keeps_every_run(capsys, tmp_path):
    """The hint names both the run files' folder and the merged file: `--runs` replaces the
    default folder, so naming the merged file alone rebuilt a store without the nights."""
    import re
    import shlex

    out = _results(tmp_path, nights=3)
    db = out / "history.sqlite"
    _damage(db, "garbage")
    last = sorted((out / "runs").glob("*.json"))[-1]
    line = _one_error(capsys, ["merge", str(last), "-o", str(tmp_path / "merged.json"), "--ingest", str(db),
                               "--allow-mixed"], cli.EXIT_HARNESS)
    (hint,) = re.findall(r"`(compilebench store rebuild --db [^`]*)`", line)
    code, _, stdout = _call(capsys, shlex.split(hint)[1:])
    assert code == cli.EXIT_OK, stdout
    with HistoryStore(db) as store:
        assert len(store.run_ids()) == 4  # the three nights and the merged run


def test_a_harness_error_in_a_gpu_pool_run_stops_the_pool_and_keeps_what_finished(tmp_path, monkeypatch):
    """As an interrupt does: cases finished on other GPUs are journaled and in the run file,
    and no slot starts another case after the run raised (they ran on, unrecorded, before)."""
    import time

    from harness.model.schema import load_run
    from harness.run import runner
    from harness.run.journal import Journal

    monkeypatch.setenv("COMPILEBENCH_TEST_FAKE_GPUS", "2")
    real_append, appended = Journal.append, []

    def full_disk_once(self, record):
        appended.append(record.case_id)
        if len(appended) == 1:
            raise OSError("No space left on device (simulated)")
        return real_append(self, record)

    monkeypatch.setattr(Journal, "append", full_disk_once)
    starts, real_worker = [], runner.run_worker

    def counted(case, *args, **kwargs):
        starts.append(time.monotonic())
        return real_worker(case, *args, **kwargs)

    monkeypatch.setattr(runner, "run_worker", counted)
    out = tmp_path / "results"
    opts = runner.RunOptions(workloads=["mlp-classic"], scenarios=["forward"], compilers=["eager"], sizes=["tiny"],
                             batch_sizes=[2, 4, 8, 16], devices=["cpu"], out_dir=str(out), preload=False,
                             ingest=False, gpus=[0, 1], policy={"min_time_s": 0.01, "min_samples": 3, "warmup": 1})
    with pytest.raises(OSError, match="simulated"):
        runner.execute(opts)
    raised = time.monotonic()
    time.sleep(3)
    assert not [t for t in starts if t > raised], "a slot started a case after the run raised"
    (path,) = (out / "runs").glob("*.json")
    run = load_run(path)
    assert run.config["interrupted"] is True and "simulated" in run.config["error"]
    journaled = {json.loads(line)["record"]["case_id"] for line in
                 next((out / "runs").glob("*.journal.jsonl")).read_text().splitlines()[1:]}
    assert {r.case_id for r in run.records} == journaled  # the run file holds what the journal holds
