"""bisect forks its measurements from a preloaded server of each env's own python
(harness/cli/envs.py cmd_bisect), as ab and versions do."""

from __future__ import annotations

import json
import sys

import pytest

from harness.cli.main import main
from tests.test_forkserver_python import copied_interpreter


@pytest.mark.slow
def test_bisect_measurements_fork_from_a_server_of_their_env(tmp_path):
    other = copied_interpreter(tmp_path / "venv")
    state = tmp_path / "state.json"
    code = main(["bisect", "-w", "mlp-classic", "--scenario", "forward", "-c", "eager", "--size", "tiny",
                 "--metric", "latency", "--repeats", "0", "--min-time", "0.02", "--min-samples", "3",
                 "--state", str(state), "--out", str(tmp_path / "out"), "--env", f"good={sys.executable}",
                 "--env", f"bad={other}"])
    assert code in (0, 1, 3)  # the same torch on both sides: whatever it finds is not the point
    records = [rec for entry in json.loads(state.read_text())["measurements"].values() for rec in entry]
    assert {rec["worker"]["python"] for rec in records} == {sys.executable, other}
    assert all(rec["worker"]["start"] == "preloaded" for rec in records), [rec["worker"] for rec in records]
