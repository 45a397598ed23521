"""`coldstart` and `sweep` take run's `--override-workloads` and `--warmup`, with run's
meaning: a workload file may replace a built-in, and N untimed calls per variant come before
the steady-state samples, in the child process that measures them."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.common import OVERRIDE_WORKLOADS_HELP, WARMUP_HELP
from harness.cli.main import build_parser, main
from harness.experiments.lifecycle import steady_medians

ROOT = Path(__file__).resolve().parent.parent

# a user's file that redefines the built-in mlp-deep; every forward call appends a byte to $CB_TEST_CALLS
# (outside Dynamo, so a compiled call counts too), so the test can count the child's calls
USER_WORKLOAD = '''
import os

import torch

from harness import workload


@torch._dynamo.disable
def _count() -> None:
    with open(os.environ["CB_TEST_CALLS"], "a") as fh:
        fh.write("x")


class Counted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        _count()
        return self.lin(x)


@workload("mlp-deep", scenarios=("forward",), sizes=("tiny",))
def mlp_deep(ctx):
    return Counted().to(ctx.device, ctx.dtype), (torch.randn(ctx.batch_size, 8, device=ctx.device, dtype=ctx.dtype),)
'''


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _help(parser: argparse.ArgumentParser, flag: str) -> str:
    return next(a.help for a in parser._actions if flag in a.option_strings)


@pytest.mark.parametrize("command", ["coldstart", "sweep"])
def test_the_flags_are_runs_with_its_help_text(command):
    parser, run = _subparser(command), _subparser("run")
    assert _help(parser, "--override-workloads") == _help(run, "--override-workloads") == OVERRIDE_WORKLOADS_HELP
    assert _help(parser, "--warmup").startswith(f"{WARMUP_HELP} (default 3), as in run")
    assert _help(run, "--warmup").startswith(WARMUP_HELP)
    assert parser.parse_args(["--warmup", "0"]).warmup == 0 and parser.parse_args([]).warmup == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["--warmup", "-1"])


@pytest.mark.parametrize("command", ["coldstart", "sweep"])
def test_a_workload_file_that_redefines_a_builtin_is_refused_without_the_flag(command, tmp_path, capsys):
    user = tmp_path / "user_wl.py"
    user.write_text(USER_WORKLOAD)
    assert main([command, "--workload-file", str(user)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "redefines workload 'mlp-deep'" in err and "--override-workloads" in err


def test_steady_medians_makes_warmup_untimed_calls_of_each_variant_first():
    class Device:
        def synchronize(self) -> None:
            pass

    calls = {"a": 0, "b": 0}

    def call(name: str):
        return lambda: calls.__setitem__(name, calls[name] + 1)

    medians = steady_medians({"a": call("a"), "b": call("b")}, Device(), calls=3, warmup=2)
    assert calls == {"a": 5, "b": 5} and set(medians) == {"a", "b"}
    calls.update(a=0, b=0)
    steady_medians({"a": call("a"), "b": call("b")}, Device(), calls=3, warmup=0)
    assert calls == {"a": 3, "b": 3}


def _cli(tmp_path: Path, *argv: str) -> tuple[int, str]:
    """`compilebench ARGV` with the user's workload file, in a process of its own (the workload
    registry and its counter stay out of this one); returns the exit code and the call count."""
    user = tmp_path / "user_wl.py"
    user.write_text(USER_WORKLOAD)
    counter = tmp_path / "calls"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "CB_TEST_CALLS": str(counter)}
    proc = subprocess.run([sys.executable, "-m", "harness", *argv, "--workload-file", str(user), "--override-workloads"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return len(counter.read_text()), proc.stdout


def test_sweep_runs_the_users_workload_with_its_warmup(tmp_path):
    out = tmp_path / "sweep.json"
    calls, _ = _cli(tmp_path, "sweep", "-c", "eager", "--policies", "static", "--batch-sizes", "2", "--steady-calls", "2",
                    "--warmup", "2", "--json-file", str(out))
    # one shape: its first (compiling) call, the eager reference, 2 warm-up calls, 2 steady calls
    assert calls == 1 + 1 + 2 + 2
    result = json.loads(out.read_text())
    assert result["config"]["warmup"] == 2 and result["policies"][0]["status"] == "ok"


def test_coldstart_runs_the_users_workload_with_its_warmup(tmp_path):
    calls, _ = _cli(tmp_path, "coldstart", "--rows", "jit_cold", "--steady-calls", "2", "--warmup", "2")
    # the eager reference, the first (compiling) call, then eager and the compiled artifact interleaved:
    # 2 warm-up calls and 2 steady calls each
    assert calls == 1 + 1 + 2 * (2 + 2)
