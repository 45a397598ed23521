"""`compilebench list` and `show`: names are never cut, and both have a JSON form."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rich.console import Console

from harness.cli.listing import catalog, print_tables
from harness.cli.main import main

DATA = Path(__file__).resolve().parent / "data"
LONG_NAMES = ("inductor-max-autotune", "inductor-max-autotune-freezing", "inductor-max-autotune-no-cudagraphs")


def test_list_into_a_pipe_prints_whole_names_one_per_line(capsys):
    assert main(["list"]) == 0  # capsys: stdout is not a terminal
    lines = capsys.readouterr().out.splitlines()
    names = {line.split("\t")[0].strip() for line in lines if line.startswith("  ")}
    assert set(LONG_NAMES) <= names and not any("…" in line for line in lines)
    diffusion = next(line for line in lines if line.startswith("  diffusion\t")).split("\t")[-1].split(", ")
    assert len(diffusion) == len(set(diffusion))


def test_list_on_a_narrow_terminal_folds_names_instead_of_cutting_them():
    console = Console(width=60, record=True, force_terminal=True)
    print_tables(catalog([], []), console)
    text = console.export_text()
    assert "…" not in text
    for name in LONG_NAMES:  # a folded name reads whole once its cell's lines are joined
        assert name in "".join(line.split("│")[1].strip() for line in text.splitlines() if line.count("│") > 2)


def test_list_json_is_the_catalog(capsys):
    assert main(["list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(LONG_NAMES) <= {c["name"] for c in data["compilers"]}
    assert {"suites", "workloads", "scenarios", "devices"} <= set(data)


def test_show_json_prints_the_run_and_the_run_ids(tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    shutil.copy(DATA / "run_v1_faults.json", tmp_path / "runs" / "r1.json")
    assert main(["show", "--json", "--out", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out) == ["r1"]
    assert main(["show", "r1", "--json", "--out", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads((DATA / "run_v1_faults.json").read_text())
