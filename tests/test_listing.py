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


def suite_row(lines: list[str], name: str) -> list[str]:
    return next(line for line in lines if line.startswith(f"  {name}\t")).split("\t")


def test_a_long_suite_shows_its_count_and_where_the_full_list_is(capsys):
    from suites import SUITES

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    cell = suite_row(lines, "transformers-zoo-tiny")[-1]
    total = len(SUITES["transformers-zoo-tiny"].entries[0].workloads)
    assert cell.startswith(f"{total} workloads: ") and len(cell.split(" and ")[0].split(", ")) == 5
    assert f"and {total - 5} more (`compilebench list --suite transformers-zoo-tiny` lists all)" in cell
    assert suite_row(lines, "smoke")[-1] == "mlp-classic, mlp-deep, sdxl-unet, llama-3.1-8b"  # short: every name


def test_list_suite_lists_every_workload_of_that_suite_one_a_line(capsys):
    from suites import SUITES

    assert main(["list", "--suite", "transformers-zoo-tiny"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0].strip() for line in lines if line.startswith("  ")][0] == "transformers-zoo-tiny"
    start = next(i for i, line in enumerate(lines) if line.startswith("workloads:"))
    end = next(i for i, line in enumerate(lines) if line.startswith("compilers:"))
    workloads = lines[start + 1:end]
    names = [line.split("\t")[0].strip() for line in workloads if line.startswith("  ")]
    assert sorted(names) == sorted(SUITES["transformers-zoo-tiny"].entries[0].workloads)
    assert "(all listed under workloads)" in suite_row(lines, "transformers-zoo-tiny")[-1]
    assert main(["list", "--suite", "transformers-zoo-tiny", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in data["suites"]] == ["transformers-zoo-tiny"]
    assert sorted(data["suites"][0]["workloads"]) == sorted(names) == sorted(w["name"] for w in data["workloads"])


def test_list_unknown_suite_is_one_line_exit_2(capsys):
    assert main(["list", "--suite", "zoo-tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown suite 'zoo-tiny'" in err[0] and "transformers-zoo-tiny" in err[0]
