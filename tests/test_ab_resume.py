"""A resumable A/B session (harness/experiments/ab.py): every finished side-round is journaled
before the next one starts, a stop signal keeps it, and `ab --resume AB_ID` runs only what
is missing, refusing a session whose plan or machine changed."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.experiments import ab
from harness.model.schema import Case, Record
from harness.run import runner
from harness.run.journal import Journal, ResumeError
from harness.run.signals import PAUSE_ENV, set_checkpoint_hook

ROOT = Path(__file__).resolve().parent.parent

ENV = {"host": "test-host", "python_executable": sys.executable, "torch_version": "2.13.0", "cpu_model": "cpu",
       "packages": {}, "devices": {}}
POLICY = {"min_time_s": 0.02, "min_samples": 3, "max_samples": 20, "warmup": 1, "max_time_s": 1.0}


def _opts(tmp_path: Path, rounds: int = 2, **kw) -> ab.AbOptions:
    run = runner.RunOptions(workloads=["mlp-classic"], scenarios=["forward"], compilers=["eager", "inductor"],
                            devices=["cpu"], sizes=["tiny"], out_dir=str(tmp_path / "out"), ingest=False,
                            policy=POLICY, **kw)
    return ab.AbOptions(run, sys.executable, sys.executable, rounds)


class StopAt:
    """Checkpoint hook: a real signal the `nth` time the session reaches `point`."""

    def __init__(self, point: str, nth: int, sig: signal.Signals):
        self.point, self.nth, self.sig, self.seen = point, nth, sig, 0

    def __call__(self, name: str) -> None:
        if name == self.point:
            self.seen += 1
            if self.seen == self.nth:
                signal.raise_signal(self.sig)


@pytest.fixture
def fake_workers(monkeypatch):
    """Stand-in workers: a record per call, numbered, so a test can tell which call made which record."""
    calls = itertools.count()
    started: list[tuple[str, int]] = []

    def fake(case: Case, spec, timeout_s, **kw) -> Record:
        n = next(calls)
        started.append((case.case_id, n))
        return Record(case, "ok", metrics={"latency_s": 0.001 * (n + 1)}, worker={"call": n})

    monkeypatch.setattr(ab, "run_worker", fake)
    yield started
    set_checkpoint_hook(None)


@pytest.mark.parametrize(("point", "nth", "sig", "kept"), [
    ("record-in-hand", 3, signal.SIGINT, 3),  # the third worker exited, its record not journaled yet: kept
    ("next-case", 4, signal.SIGTERM, 3),  # between side-rounds (a CI cancel): three finished, none in flight
])
def test_a_stopped_session_keeps_its_finished_side_rounds_and_resumes_the_rest(tmp_path, fake_workers, point, nth,
                                                                               sig, kept):
    opts = _opts(tmp_path)
    set_checkpoint_hook(StopAt(point, nth, sig))
    with pytest.raises(KeyboardInterrupt) as stopped:
        ab.run_ab(opts, environments={"base": ENV, "head": ENV})
    set_checkpoint_hook(None)
    folder = stopped.value.ab_session
    assert stopped.value.ab_resumable and (folder / ab.JOURNAL_NAME).is_file()
    saved = [r for side in ab.SIDES for f in sorted((folder / side).glob("round-*.json"))
             for r in json.loads(f.read_text())["records"]]
    assert len(saved) == kept == len(fake_workers)  # the round files hold what the journal holds

    journal = ab.load_ab_journal(folder.name, opts.run.out_dir)
    assert journal.finished == kept and journal.opts.rounds == 2
    base, head, again = ab.run_ab(journal.opts, environments={"base": ENV, "head": ENV}, resume=journal)
    assert again == folder and not (folder / ab.JOURNAL_NAME).exists()  # finished: the journal is gone
    assert len(fake_workers) == 2 * 2 * 2  # 2 cases x 2 sides x 2 rounds, each run once over both calls
    records = [r for runs in (base, head) for run in runs for r in run.records]
    assert sorted(r.worker["call"] for r in records) == list(range(8))  # the journaled ones kept as they were
    assert {(r.case_id, r.worker["ab_side"], r.worker["ab_round"]) for r in records} == {
        (c, s, n) for c in {r.case_id for r in records} for s in ab.SIDES for n in range(2)}
    (entry,) = base[0].config["ab"]["resumed"]
    assert entry["side_rounds_from_journal"] == kept
    on_disk = json.loads((folder / "head" / "round-01.json").read_text())
    assert len(on_disk["records"]) == 2 and on_disk["config"]["ab"]["resumed"][0]["side_rounds_from_journal"] == kept


def test_a_session_that_finished_leaves_no_journal_and_cannot_be_resumed(tmp_path, fake_workers):
    opts = _opts(tmp_path, rounds=1)
    _, _, folder = ab.run_ab(opts, environments={"base": ENV, "head": ENV})
    assert not (folder / ab.JOURNAL_NAME).exists()
    with pytest.raises(ResumeError, match="finished"):
        ab.load_ab_journal(folder.name, opts.run.out_dir)
    with pytest.raises(ResumeError, match="no ab session of that id"):
        ab.load_ab_journal("20990101-000000-ab-000000", opts.run.out_dir)


def _interrupted(tmp_path: Path) -> ab.AbJournal:
    opts = _opts(tmp_path)
    set_checkpoint_hook(StopAt("next-case", 2, signal.SIGINT))
    with pytest.raises(KeyboardInterrupt) as stopped:
        ab.run_ab(opts, environments={"base": ENV, "head": ENV})
    set_checkpoint_hook(None)
    return ab.load_ab_journal(str(stopped.value.ab_session), opts.run.out_dir)  # by folder path, too


def test_a_resume_on_another_stack_is_refused_with_the_difference_named(tmp_path, fake_workers):
    journal = _interrupted(tmp_path)
    other = {**ENV, "torch_version": "2.14.1"}
    with pytest.raises(ResumeError, match=r"torch_version differs.*2\.13\.0.*2\.14\.1"):
        ab.run_ab(journal.opts, environments={"base": ENV, "head": other}, resume=journal)
    assert (journal.path).is_file() and len(fake_workers) == 1  # nothing ran, the journal is intact


def test_a_resume_whose_cases_plan_differently_is_refused(tmp_path, fake_workers):
    journal = _interrupted(tmp_path)
    journal.opts.run.compilers = ["eager"]  # as if a suite or workload file had changed under the session
    with pytest.raises(ResumeError, match="plan differently"):
        ab.run_ab(journal.opts, environments={"base": ENV, "head": ENV}, resume=journal)


def test_a_resume_measures_under_the_sessions_own_stop_policy(tmp_path, fake_workers, monkeypatch):
    """The journal keeps the resolved policy (suite defaults included): a suite whose POLICY
    changed between the interruption and the resume (the gpu suite's warm-up budget, say) does
    not change how the remaining side-rounds measure; a journal from before that is resumed
    under the suite as it is now, and the resume's entry says so."""
    specs: list[dict] = []
    real_make_spec = ab.make_spec

    def recording_make_spec(*args, **kwargs):
        spec = real_make_spec(*args, **kwargs)
        specs.append(spec.policy)
        return spec

    monkeypatch.setattr(ab, "make_spec", recording_make_spec)
    journal = _interrupted(tmp_path)
    assert journal.policy is not None and journal.policy["warmup"] == 1 and "warmup_budget_s" in journal.policy
    before = list(specs)
    real_plan = ab.plan_cases
    monkeypatch.setattr(ab, "plan_cases", lambda opts: (real_plan(opts)[0], {"warmup": 5, "warmup_budget_s": 1.0}))
    journal.opts.run.policy = {}  # what the CLI's options left: only the suite's policy would be merged
    base, _, _ = ab.run_ab(journal.opts, environments={"base": ENV, "head": ENV}, resume=journal)
    assert specs[len(before):] and all(p == journal.policy for p in specs[len(before):])
    assert base[0].config["ab"]["resumed"][0]["notes"] == []


def test_a_resume_of_a_journal_without_a_policy_says_it_took_the_suites(tmp_path, fake_workers):
    journal = _interrupted(tmp_path)
    journal.policy = None  # as load_ab_journal reads a journal written before policies were kept
    base, _, _ = ab.run_ab(journal.opts, environments={"base": ENV, "head": ENV}, resume=journal)
    (note,) = base[0].config["ab"]["resumed"][0]["notes"]
    assert note.startswith("stop policy taken from the suite as it is now")


def test_a_session_being_resumed_elsewhere_is_refused(tmp_path, fake_workers):
    journal = _interrupted(tmp_path)
    with Journal.reopen(journal.path), pytest.raises(ResumeError, match="another compilebench process"):
        ab.run_ab(journal.opts, environments={"base": ENV, "head": ENV}, resume=journal)


def test_ab_resume_refuses_the_options_the_session_fixed(capsys):
    from harness.cli import main as cli

    code = cli.main(["ab", "--resume", "whatever", "--rounds", "3", "--base-python", sys.executable])
    assert code == 2
    assert "drop --base-python, --rounds" in capsys.readouterr().err


@pytest.mark.parametrize("changed", ["thresholds", "metric", "none", "old journal"])
def test_ab_resume_refuses_another_stop_rule_and_names_what_differs(capsys, tmp_path, fake_workers, changed):
    """The rule's error rates hold only if the resumed rounds stop by the session's rule: other
    thresholds or --metric are refused (a journal from before they were kept is judged on what
    it has)."""
    import argparse

    from harness.cli import compare as cli_compare
    from harness.cli import main as cli

    strict = tmp_path / "strict.toml"
    strict.write_text("[defaults]\nlatency = 0.5\n")
    start = argparse.Namespace(thresholds=None, metric=None)
    opts = _opts(tmp_path)
    opts.stop_rule, opts.stop_design = cli_compare._stop_rule(start, opts.rounds)
    if changed == "old journal":
        opts.stop_design = {k: v for k, v in opts.stop_design.items() if k != "gated"}
    set_checkpoint_hook(StopAt("next-case", 2, signal.SIGINT))
    with pytest.raises(KeyboardInterrupt) as stopped:
        ab.run_ab(opts, environments={"base": ENV, "head": ENV})
    set_checkpoint_hook(None)
    extra = {"thresholds": ["--thresholds", str(strict)], "metric": ["--metric", "latency"]}.get(changed, [])
    parsed = cli.build_parser().parse_args(["ab", "--resume", stopped.value.ab_session.name, *extra,
                                            "--out", opts.run.out_dir])
    if changed in ("thresholds", "metric"):
        with pytest.raises(cli.CliError, match="the stop rule differs from the session's in gated"):
            cli_compare._ab_options(parsed)
    else:
        resumed, journal = cli_compare._ab_options(parsed)
        assert journal is not None and resumed.stop_rule is not None


@pytest.mark.slow
def test_a_ci_job_killed_by_sigterm_finishes_with_ab_resume(tmp_path):
    """The real command (real workers, tiny eager MLP, 2 rounds): SIGTERM after the first
    side-round, as a CI timeout sends it; exit 130 naming the resume; the resume runs the
    other three side-rounds and compares."""
    from tests.test_resume import wait_for_marker

    out, paused = tmp_path / "out", tmp_path / "paused"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", PAUSE_ENV: f"next-case:2:{paused}"}
    argv = [sys.executable, "-m", "harness", "ab", "--base-python", sys.executable, "--head-python", sys.executable,
            "-w", "mlp-classic", "--scenario", "forward", "--compiler", "eager", "--device", "cpu", "--size", "tiny",
            "--rounds", "2", "--no-adaptive", "--min-time", "0.02", "--min-samples", "3", "--out", str(out)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_marker(proc, paused)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    resume = re.search(r"compilebench ab --resume (\S+) --out (\S+)", stderr)
    assert resume and resume.group(2) == str(out), stderr
    folder = out / "ab" / resume.group(1)
    (first,) = json.loads((folder / "base" / "round-00.json").read_text())["records"]

    env.pop(PAUSE_ENV)
    done = subprocess.run([sys.executable, "-m", "harness", "ab", "--resume", resume.group(1), "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1, 3), done.stderr  # the verdict of 2 rounds is not the point here
    assert f"ab session: {folder}" in done.stderr and not (folder / ab.JOURNAL_NAME).exists()
    records = {(side, n): json.loads((folder / side / f"round-{n:02d}.json").read_text())["records"]
               for side in ab.SIDES for n in range(2)}
    assert all(len(recs) == 1 and recs[0]["status"] == "ok" for recs in records.values()), records
    assert records["base", 0][0]["worker"]["pid"] == first["worker"]["pid"]  # journaled, not run again
    assert all(recs[0]["worker"]["start"] == "preloaded" for recs in records.values())
    resumed = json.loads((folder / "head" / "round-01.json").read_text())["config"]["ab"]["resumed"]
    assert [entry["side_rounds_from_journal"] for entry in resumed] == [1]
