"""Environments as an input: parsing --env, interpreters as given, SPEC venvs built once and
reused from the cache (with a tiny local wheel standing in for torch: no multi-GB installs
in tests), and `ab` across two envs."""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import zipfile
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.experiments import envs as envs_mod
from harness.experiments.envs import EnvError, EnvSpec, cache_key, parse_env, parse_envs, resolve_env
from tests.fake_envs import make_fake_python


def test_parse_env_forms(tmp_path):
    assert parse_env("old=torch==2.12.1") == EnvSpec("old", requirements=("torch==2.12.1",))
    assert parse_env("torch==2.12.1") == EnvSpec("torch-2.12.1", requirements=("torch==2.12.1",))
    assert parse_env("n=torch==2.12.1 numpy<2").requirements == ("torch==2.12.1", "numpy<2")
    assert parse_env(f"mine={sys.executable}").python == sys.executable
    assert parse_env("rel=./venv/bin/python").python == "./venv/bin/python"


@pytest.mark.parametrize("text, message", [
    ("justaname", "is not NAME=PYTHON or NAME=SPEC"),
    ("bad name=torch==2.1", "must be letters"),
    ("x=", "has no value"),
    ("x=torch===", "is not a pip requirement"),
])
def test_parse_env_errors_name_the_fix(text, message):
    with pytest.raises(EnvError, match=message):
        parse_env(text)


def test_duplicate_names_and_too_few_are_refused():
    with pytest.raises(EnvError, match="given twice"):
        parse_envs(["a=torch==2.1.0", "a=torch==2.2.0"])
    with pytest.raises(EnvError, match="at least 2"):
        parse_envs(["a=torch==2.1.0"], minimum=2)


def test_interpreter_env_records_versions():
    env = resolve_env(parse_env(f"here={sys.executable}"))
    import torch

    assert env.kind == "python" and env.torch == torch.__version__ and env.python_version
    assert set(env.to_dict()["packages"]) >= {"torch", "triton", "transformers", "diffusers"}
    assert env.label() == f"here (torch {torch.__version__})"


@pytest.mark.parametrize("text, requirements", [
    ("torch>=2.12", ("torch>=2.12",)),
    ("torch~=2.12.0", ("torch~=2.12.0",)),
    ("torch!=2.12.0", ("torch!=2.12.0",)),
    ("torch<2.13", ("torch<2.13",)),
    ("torch<=2.13 numpy<2", ("torch<=2.13", "numpy<2")),
])
def test_bare_specs_with_any_operator_are_requirements(text, requirements):
    spec = parse_env(text)
    assert spec.requirements == requirements and spec.python is None
    assert envs_mod.NAME_RE.match(spec.name)


def test_named_specs_with_operators_keep_their_name():
    assert parse_env("new=torch>=2.12") == EnvSpec("new", requirements=("torch>=2.12",))
    assert parse_env("x=torch~=2.12.0 numpy!=2.0") == EnvSpec("x", requirements=("torch~=2.12.0", "numpy!=2.0"))


def test_bare_spec_names_and_cache_folders_keep_the_operator(tmp_path):
    texts = ["torch==2.13", "torch<2.13", "torch<=2.13", "torch>2.13", "torch>=2.13", "torch~=2.13", "torch!=2.13"]
    specs = [parse_env(t) for t in texts]
    assert len({s.name for s in specs}) == len(texts)  # parse_envs would call two of them 'given twice'
    folder_slugs = {envs_mod.env_dir(s, tmp_path).name.rsplit("-", 1)[0] for s in specs}
    assert len(folder_slugs) == len(texts)
    assert parse_env("torch==2.13").name == "torch-2.13"  # unchanged for the common pin


def test_cache_key_follows_the_spec():
    a, b = parse_env("a=torch==2.12.1"), parse_env("b=torch==2.13.0")
    assert cache_key(a) == cache_key(parse_env("other=torch==2.12.1")) != cache_key(b)


def _fake_torch_wheel(folder: Path, version: str = "0.0.1") -> Path:
    """A minimal pure-Python wheel named torch (pip installs it in a second, offline)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"torch-{version}-py3-none-any.whl"
    dist = f"torch-{version}.dist-info"
    files = {"torch/__init__.py": f"__version__ = '{version}'\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    with zipfile.ZipFile(folder / name, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
        zf.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return folder / name


def test_spec_env_is_built_once_then_reused_from_cache(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    _fake_torch_wheel(wheels)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setattr(envs_mod, "WORKER_REQUIREMENTS", ())  # numpy would cost the test seconds
    root = tmp_path / "cache"
    stages = []
    env = resolve_env(parse_env("fake=torch==0.0.1"), progress=lambda s, m: stages.append(s), root=root)
    assert env.torch == "0.0.1" and not env.from_cache and Path(env.python).exists()
    assert {"venv", "install", "done"} <= set(stages)
    assert json.loads((Path(env.cache_dir) / envs_mod.MARKER).read_text())["requirements"] == ["torch==0.0.1"]

    # a cache hit builds nothing (no venv, no pip): that is what keeps it cheap; how cheap
    # (the < 5 s budget) is timed by benchmarks/env_cache.py, not asserted on a loaded runner
    builds = []
    real_build = envs_mod._build
    monkeypatch.setattr(envs_mod, "_build", lambda *a, **k: builds.append(a) or real_build(*a, **k))
    again_stages = []
    again = resolve_env(parse_env("again=torch==0.0.1"), progress=lambda s, m: again_stages.append(s), root=root)
    assert again.from_cache and again.python == env.python and again.torch == "0.0.1"
    assert builds == [] and not {"venv", "install"} & set(again_stages)
    assert [e["requirements"] for e in envs_mod.cached_envs(root)] == [["torch==0.0.1"]]

    # a venv without its marker is a half-built one: rebuilt, not trusted
    (Path(env.cache_dir) / envs_mod.MARKER).unlink()
    rebuilt = resolve_env(parse_env("fake=torch==0.0.1"), root=root)
    assert not rebuilt.from_cache and rebuilt.torch == "0.0.1"
    assert len(builds) == 1


SETUPTOOLS_AFTER_A_BUILD = """
import sys
from pathlib import Path
from harness.experiments import envs
envs.WORKER_REQUIREMENTS = ()
env = envs.resolve_env(envs.parse_env("fake=torch==0.0.1"), root=Path(sys.argv[1]))
import setuptools  # what Inductor's C++ builds import (the CPU ISA probe of an in-process case)
print(env.torch, "pip" in sys.modules)
"""


def test_building_an_env_leaves_setuptools_importable_in_the_same_process(tmp_path):
    """A build once ran `import pip` in-process; on Python < 3.12 that turns setuptools'
    distutils shim off for good, so the next in-process CPU Inductor case failed its ISA
    probe (an AssertionError naming stdlib distutils/core.py): test_compilers after test_envs."""
    import os
    import subprocess

    wheels = tmp_path / "wheels"
    _fake_torch_wheel(wheels)
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels),
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.run([sys.executable, "-c", SETUPTOOLS_AFTER_A_BUILD, str(tmp_path / "cache")], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["0.0.1", "False"]


def test_failed_install_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.setattr(envs_mod, "WORKER_REQUIREMENTS", ())
    with pytest.raises(EnvError, match="pip install torch==0.0.7 failed"):
        resolve_env(parse_env("x=torch==0.0.7"), root=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*/" + envs_mod.MARKER))


def _hanging_pip(folder: Path) -> Path:
    """A stand-in pip that prints a line, then hangs with its output still open."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "pip"
    script.write_text("#!/bin/sh\necho 'Collecting torch==2.13.0'\nexec sleep 60\n")
    script.chmod(0o755)
    return script


def test_a_pip_that_hangs_with_its_output_open_is_one_clear_error(tmp_path):
    spec = EnvSpec("x", requirements=("torch==2.13.0",))
    lines = []
    with pytest.raises(EnvError, match=r"--env x: pip install torch==2.13.0 did not finish in 0s .*Collecting torch"):
        envs_mod._stream([str(_hanging_pip(tmp_path))], spec, lambda stage, line: lines.append(line), timeout_s=0.3)
    assert lines == ["Collecting torch==2.13.0"]  # output still reached the display before the deadline


def test_a_venv_step_that_hangs_is_one_clear_error(tmp_path):
    spec = EnvSpec("x", requirements=("torch==2.13.0",))
    with pytest.raises(EnvError, match="--env x: creating the venv did not finish in 0s"):
        envs_mod._check_call([str(_hanging_pip(tmp_path))], spec, "creating the venv", timeout_s=0.3)


def test_ab_across_two_envs_names_them(tmp_path, capsys):
    """ab with --env twice: per-case verdicts, env names in the summary and the run files."""
    old = make_fake_python(tmp_path / "py", "old")
    new = make_fake_python(tmp_path / "py", "new", slowdown=0.4)
    out, verdict = tmp_path / "results", tmp_path / "ab.json"
    rc = main(["ab", "--env", f"old={old}", "--env", f"new={new}", "-w", "mlp-classic", "--scenario", "forward",
               "--rounds", "1", "--out", str(out), "--json-file", str(verdict)])
    assert rc == 1  # the 40% slower compiled code is a regression
    printed = capsys.readouterr().out
    assert "versions: base old (torch" in printed and "-> head new (torch" in printed
    (session,) = list((out / "ab").iterdir())
    head = json.loads(next((session / "head").glob("*.json")).read_text())
    assert head["environment"]["env"]["name"] == "new" and head["environment"]["env"]["packages"]["torch"]
    case = json.loads(verdict.read_text())["cases"][0]
    assert case["verdict"] == "regression"


def test_ab_env_and_python_options_do_not_mix(tmp_path, capsys):
    assert main(["ab", "--env", f"a={sys.executable}", "-w", "mlp-classic"]) == 2
    assert "--env twice" in capsys.readouterr().err


def test_env_command_create_and_list(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COMPILEBENCH_ENV_CACHE", str(tmp_path / "cache"))
    assert main(["env", "create", "--env", f"here={sys.executable}"]) == 0
    assert "here" in capsys.readouterr().out
    assert main(["env", "list"]) == 0
    assert str(tmp_path / "cache") in capsys.readouterr().out.replace("\n", "")
