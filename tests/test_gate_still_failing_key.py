"""The thresholds file's `still_failing` key (harness/analysis/thresholds.py): a team sets
`still_failing = "fail"` in its committed file, in any layer, and `--still-failing` on the
command line beats it either way."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.analysis.thresholds import ThresholdConfigError, config_from_dict
from harness.cli.main import main
from harness.model.schema import Run, save_run
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record

FAILING = {1: "fail_compile", 2: "crashed"}  # on both sides: two still-failing cases


def _save(tmp_path, run_id: str, seed: int) -> str:
    rng = np.random.default_rng(seed)
    records = [synthetic_record(synthetic_case(i), rng, status=FAILING.get(i, "ok")) for i in range(3)]
    path = tmp_path / f"{run_id}.json"
    save_run(Run(run_id, "2026-01-01T00:00:00+00:00", run_id, dict(SYNTHETIC_ENV), {}, records), path)
    return str(path)


def _thresholds(tmp_path, text: str) -> str:
    path = tmp_path / "thresholds.toml"
    path.write_text(text)
    return str(path)


def _gate(tmp_path, *extra: str) -> tuple[int, dict, str]:
    base, head = _save(tmp_path, "base", 1), _save(tmp_path, "head", 2)
    js, md = tmp_path / "gate.json", tmp_path / "gate.md"
    code = main(["gate", base, head, "--json-file", str(js), "--markdown", str(md), *extra])
    return code, json.loads(js.read_text()), md.read_text()


def test_the_defaults_key_fails_every_still_failing_case(tmp_path, capsys):
    code, data, md = _gate(tmp_path, "--thresholds", _thresholds(tmp_path, '[defaults]\nstill_failing = "fail"\n'))
    assert code == 1 and data["outcome"] == "fail"
    assert data["failed"] == data["still_failing"] == [synthetic_case(1).case_id, synthetic_case(2).case_id]
    assert '### Still failing (2: fail the gate (still_failing = "fail" / --still-failing fail))' in md
    assert 'fails the gate (still_failing = "fail")' in capsys.readouterr().out  # each case's flag line


def test_a_case_layer_key_fails_that_case_only(tmp_path):
    text = f'[case."{synthetic_case(2).case_id}"]\nstill_failing = "fail"\n'
    code, data, md = _gate(tmp_path, "--thresholds", _thresholds(tmp_path, text))
    assert code == 1 and data["failed"] == [synthetic_case(2).case_id]
    assert "### Still failing (2: 1 fail the gate)" in md


def test_the_flag_beats_the_file_both_ways(tmp_path):
    failing_file = _thresholds(tmp_path, '[defaults]\nstill_failing = "fail"\n')
    code, data, _ = _gate(tmp_path, "--thresholds", failing_file, "--still-failing", "pass")
    assert code == 0 and data["failed"] == [] and len(data["still_failing"]) == 2
    passing_file = _thresholds(tmp_path, '[defaults]\nstill_failing = "pass"\n')
    code, data, _ = _gate(tmp_path, "--thresholds", passing_file, "--still-failing", "fail")
    assert code == 1 and len(data["failed"]) == 2
    code, data, _ = _gate(tmp_path, "--thresholds", passing_file)  # the file's "pass" is the default
    assert code == 0 and data["failed"] == []


def test_a_bad_value_is_one_line_naming_the_key(tmp_path, capsys):
    bad = _thresholds(tmp_path, '[suite.smoke]\nstill_failing = "maybe"\n')
    code = main(["gate", _save(tmp_path, "base", 1), _save(tmp_path, "head", 2), "--thresholds", bad])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "suite.smoke.still_failing" in err and '"pass" (default) or "fail"' in err


def test_layers_resolve_most_specific_first():
    config = config_from_dict({"defaults": {"still_failing": "fail"}, "suite": {"nightly": {"still_failing": "pass"}}})
    assert config.for_case("a", "w", "smoke").still_failing == "fail"
    assert config.for_case("a", "w", "nightly").still_failing == "pass"
    assert config_from_dict({}).for_case("a").still_failing == "pass"
    with pytest.raises(ThresholdConfigError, match="still-failing policy"):
        config_from_dict({"defaults": {"still_failing": True}})
