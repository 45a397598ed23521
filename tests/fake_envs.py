"""Fake interpreters for env tests: executables that act as Python, except that a worker
(`-m harness.run.isolation SPEC OUT`) writes a synthetic record instead of compiling.

Each fake is a small script beside the test; `FAKE_SLOWDOWN` in its body makes its
compiled timings that fraction slower, `FAKE_GRAPH_BREAKS` sets the graph-break count. So
a bisect or a sweep over fakes runs the real runner, state file, judge and report in
milliseconds per "measurement", with a known answer.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

FAKE = '''#!{python}
import json, os, sys
if sys.argv[1:3] == ["-m", "harness.run.forkserver"]:  # no preloaded server: every worker takes the path below
    sys.exit("fake interpreter: no fork server, its workers are synthetic")
if sys.argv[1:3] == ["-m", "harness.run.isolation"]:
    import numpy as np
    from harness.model.schema import Case
    from harness.testing.synthetic import synthetic_record
    spec = json.load(open(sys.argv[3]))
    case = Case.from_dict(spec["case"])
    counter = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls-" + os.path.basename(__file__))
    with open(counter, "a") as fh:
        fh.write("x")
    seed = os.path.getsize(counter)
    record = synthetic_record(case, np.random.default_rng(seed), compiled_median=5e-4 * (1 + {slowdown}),
                              spread={spread}, n=60, graph_breaks={graph_breaks})
    record.notes.append("FAKE interpreter: synthetic samples, nothing was measured")
    json.dump(record.to_dict(), open(sys.argv[4], "w"))
    sys.exit(0)
os.execv({python!r}, [{python!r}, *sys.argv[1:]])
'''


def make_fake_python(folder: Path, name: str, slowdown: float = 0.0, graph_breaks: int = 0,
                     spread: float = 0.03) -> Path:
    """An executable at folder/name that behaves as described in the module doc."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(FAKE.format(python=sys.executable, slowdown=slowdown, graph_breaks=graph_breaks, spread=spread))
    os.chmod(path, 0o755)
    return path


def calls(path: Path) -> int:
    """How many workers this fake ran."""
    counter = path.parent / f"calls-{path.name}"
    return counter.stat().st_size if counter.exists() else 0
