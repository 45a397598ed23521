"""benchmarks/hud_expected.py: our hf/timm cases beside PyTorch's expected-results CSVs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

from harness.model.schema import load_run

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("hud_expected", ROOT / "benchmarks" / "hud_expected.py")
hud = importlib.util.module_from_spec(_spec)
sys.modules["hud_expected"] = hud  # its dataclasses look their module up there
_spec.loader.exec_module(hud)


def _record(workload, scenario="forward", compiler="inductor", status="ok", accuracy="pass", breaks=0):
    case = SimpleNamespace(workload=workload, scenario=scenario, compiler=compiler)
    return SimpleNamespace(case=case, status=status, metrics={"accuracy": {"status": accuracy}, "graph_breaks": breaks})


def test_every_shipped_csv_loads_with_the_dashboard_models():
    expected = hud.load_expected()
    assert set(expected) == {("hf", "forward"), ("hf", "train"), ("timm", "forward"), ("timm", "train")}
    assert expected[("hf", "forward")]["GPT2ForSequenceClassification"] == hud.Expected("pass", 2)
    assert expected[("timm", "train")]["dm_nfnet_f0"] == hud.Expected("pass", 7)
    assert len(expected[("timm", "forward")]) == 61 and len(expected[("timm", "train")]) == 18


def test_outcome_and_breaks_are_judged_apart():
    expected = hud.load_expected()
    rows = hud.compare_records([
        _record("hf-BertForMaskedLM"),                                  # pass, 0: both agree
        _record("hf-GPT2ForSequenceClassification", breaks=0),         # the CSV has 2 breaks
        _record("timm-levit_128"),                                      # the CSV: fail_to_run
        _record("hf-BertForMaskedLM", scenario="train", breaks=7),     # the training CSV's 7
        _record("hf-BertForMaskedLM", compiler="eager"),               # not the compiler asked for
        _record("hf-NotOnTheDashboard"),                                # no entry: left out
    ], expected)
    got = {(r.model, r.scenario): (r.outcome_agrees, r.breaks_equal) for r in rows}
    assert got == {("BertForMaskedLM", "forward"): (True, True),
                   ("GPT2ForSequenceClassification", "forward"): (True, False),
                   ("levit_128", "forward"): (False, True),
                   ("BertForMaskedLM", "train"): (True, True)}
    assert hud.summary(rows)["hf forward"] == {"models": 2, "outcome_agrees": 2, "breaks_equal": 1}


def test_a_failed_case_disagrees_with_a_pass_entry():
    rows = hud.compare_records([_record("hf-BertForMaskedLM", status="fail_compile", accuracy="-")],
                               hud.load_expected())
    assert [(r.status, r.outcome_agrees) for r in rows] == [("fail_compile", False)]


def test_the_h200_timm_run_beside_the_csv(capsys):
    run = ROOT / "results/baselines/h200-2026-12-01d/timm-forward-first8-dynamo-merged.json"
    rows = hud.compare_records(load_run(run).records, hud.load_expected())
    assert len(rows) == 8 and all(r.outcome_agrees and r.breaks_equal for r in rows)
    assert hud.main([str(run)]) == 0
    assert "timm forward: 8 models beside the CSV; outcome agrees for 8, graph breaks equal for 8" in capsys.readouterr().out


def test_unreadable_input_and_nothing_to_compare_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert hud.main([str(bad)]) == 2
    smoke = ROOT / "results/baselines/h200-2026-12-01d/bench-gpu-tox-21of21.json"
    assert hud.main([str(smoke)]) == 2
    assert "no hf-*/timm-* case" in capsys.readouterr().err
