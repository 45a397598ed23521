"""A preloaded worker per interpreter: an `ab` / `versions` / `bisect` side that runs another
python forks its cases from a server started with that python (harness/run/runner.py
_server_for), falls back to spawn (with a start_note) where that server cannot start, and a
server whose import-time cache folder a case wrote into forks no more cases."""

from __future__ import annotations

import os
import site
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.experiments.ab import AbOptions, run_ab
from harness.run import runner

POLICY = {"min_time_s": 0.02, "min_samples": 3, "max_samples": 20, "warmup": 1, "max_time_s": 1.0}


def copied_interpreter(where: Path) -> str:
    """Another interpreter binary (a venv made with --copies, so its realpath is not the
    runner's) that sees this venv's packages through a .pth file: what a conda env or a
    second venv of another build looks like to the runner, without installing torch twice."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--copies", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    Path(purelib, "runner_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    assert os.path.realpath(python) != os.path.realpath(sys.executable)
    return str(python)


def _ab(tmp_path: Path, base: str, head: str, rounds: int = 1, **run_kw) -> tuple[list, list]:
    opts = runner.RunOptions(workloads=["mlp-classic"], scenarios=["forward"], compilers=["eager"], devices=["cpu"],
                             sizes=["tiny"], out_dir=str(tmp_path / "out"), ingest=False, policy=POLICY, **run_kw)
    env = {"host": "test"}  # skips probe_environment: what is under test is how the workers start
    base_runs, head_runs, _ = run_ab(AbOptions(opts, base, head, rounds), environments={"base": env, "head": env})
    return base_runs, head_runs


@pytest.mark.slow
def test_each_ab_side_forks_from_a_server_of_its_own_python(tmp_path):
    other = copied_interpreter(tmp_path / "venv")
    base_runs, head_runs = _ab(tmp_path, sys.executable, other)
    for runs, python in ((base_runs, sys.executable), (head_runs, other)):
        (record,) = runs[0].records
        assert record.status == "ok", record.error
        assert record.worker["start"] == "preloaded", record.worker
        assert record.worker["python"] == python
        assert record.metrics["phase_s"]["setup"] < 1.0  # the imports were paid by that side's server
        (server,) = runs[0].config["worker_start"]["servers"]
        assert server["python"] == python and "torch" in server["preloaded"] and server["broken"] is None


def failing_server_wrapper(where: Path) -> str:
    """An interpreter (a wrapper script, as --env NAME=PYTHON allows) in which the fork server
    cannot start, as where harness is not importable or an old torch breaks the preload."""
    script = where / "python"
    script.write_text("#!/bin/sh\n"
                      'case " $* " in *" harness.run.forkserver "*) echo "no forkserver here" >&2; exit 3;; esac\n'
                      f'exec "{sys.executable}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.mark.slow
def test_a_side_whose_server_cannot_start_is_spawned_and_says_why(tmp_path):
    wrapper = failing_server_wrapper(tmp_path)
    _, head_runs = _ab(tmp_path, sys.executable, wrapper)
    (record,) = head_runs[0].records
    assert record.status == "ok", record.error
    assert record.worker["start"] == "spawn"
    assert "fork server unusable" in record.worker["start_note"] and "no forkserver here" in record.worker["start_note"]
    (server,) = head_runs[0].config["worker_start"]["servers"]
    assert server["broken"] and server["python"] == wrapper


@pytest.mark.slow
def test_an_interpreter_that_prints_to_stdout_is_spawned_and_says_why(tmp_path):
    """A wrapper that says something on stdout before exec (an activation script): the server's
    control pipe carries it, so the side is spawned, with the line named, not a crashed run."""
    script = tmp_path / "python-chatty"
    script.write_text(f'#!/bin/sh\necho "activating env"\nexec "{sys.executable}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    _, head_runs = _ab(tmp_path, sys.executable, str(script))
    (record,) = head_runs[0].records
    assert record.status == "ok", record.error
    assert record.worker["start"] == "spawn" and "activating env" in record.worker["start_note"]


def env_setting_wrapper(where: Path) -> str:
    """An interpreter that sets a variable before Python starts (a conda activation shim):
    a spawned worker sees it, a forked case would get the runner's environment instead."""
    script = where / "python-shim"
    script.write_text(f'#!/bin/sh\nexport CB_SHIM_SETTING=1\nexec "{sys.executable}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.mark.slow
def test_a_side_whose_interpreter_changes_its_environment_is_spawned(tmp_path):
    _, head_runs = _ab(tmp_path, sys.executable, env_setting_wrapper(tmp_path))
    (record,) = head_runs[0].records
    assert record.status == "ok", record.error
    assert record.worker["start"] == "spawn" and "CB_SHIM_SETTING" in record.worker["start_note"]


def test_only_what_the_interpreter_itself_sets_at_start_up_is_allowed():
    from harness.run.forkserver import start_env_changed

    passed = {"PATH": "/bin", "A": "1"}
    assert start_env_changed(passed, {**passed, "LC_CTYPE": "C.UTF-8"}) is None  # PEP 538, spawned workers too
    assert start_env_changed(passed, None) is None  # an older server that does not say
    assert "PATH" in start_env_changed(passed, {**passed, "PATH": "/opt/conda/bin:/bin"})
    assert "A" in start_env_changed(passed, {"PATH": "/bin"})


LEAKY = '''
import glob, os
import torch
from harness import workload

@workload("fs-cache-leak", batch_size=2, scenarios=("forward",), sizes=("tiny",))
def cache_leak(ctx):
    """what a module-level copy of the server's cache path, not re-pointed per case, would do"""
    for folder in glob.glob(os.path.join(os.environ["CB_TEST_TMP"], "cb-preload-cache-*")):
        open(os.path.join(folder, f"leak-{os.getpid()}"), "w").close()
    return torch.nn.Linear(4, 4), (torch.randn(ctx.batch_size, 4),)
'''


@pytest.mark.slow
def test_a_case_that_writes_into_the_servers_cache_folder_stops_the_server(tmp_path, monkeypatch):
    server_tmp = tmp_path / "tmp"  # the server's tempfile folder: its sentinel lands here, no one else's
    server_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(server_tmp))
    monkeypatch.setenv("CB_TEST_TMP", str(server_tmp))
    leaky = tmp_path / "fs_leaky.py"
    leaky.write_text(LEAKY)
    opts = runner.RunOptions(workloads=["fs-cache-leak", "mlp-classic"], workload_files=[str(leaky)],
                             scenarios=["forward"], compilers=["eager"], devices=["cpu"], sizes=["tiny"],
                             out_dir=str(tmp_path / "out"), ingest=False, policy=POLICY, eager_from_twin=False)
    run = runner.execute(opts)
    leak, after = sorted(run.records, key=lambda r: r.case.workload != "fs-cache-leak")  # run in that order too
    assert leak.case.workload == "fs-cache-leak" and leak.status == "ok"
    assert leak.worker["start"] == "preloaded" and leak.worker["server_cache_written"][0].startswith("leak-")
    assert any("fork server's import-time folder" in note for note in leak.notes)
    assert after.worker["start"] == "spawn" and "wrote into the server's import-time" in after.worker["start_note"]
    assert not list(server_tmp.glob("cb-preload-cache-*"))  # the pool's close removed the folder
