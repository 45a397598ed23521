"""The version sweep: one run file per env (ingested), a manifest, and an HTML report with a
column per env where changes beyond the noise floor between adjacent envs are highlighted."""

from __future__ import annotations

import json

import numpy as np

from harness.cli.main import main
from harness.model.schema import Run
from harness.report.versions import render_versions_report, sweep_blocks
from harness.run.store import HistoryStore
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record
from tests.fake_envs import make_fake_python


def _run(name, torch, compiled_median, graph_breaks=0, compile_time=2.0, status="ok"):
    rng = np.random.default_rng(len(name))
    case = synthetic_case(0)
    record = synthetic_record(case, rng, compiled_median=compiled_median, graph_breaks=graph_breaks,
                              compile_time=compile_time, status=status)
    record.metrics["compile_breakdown_s"] = {"dynamo": 0.5, "aot_autograd": 0.7, "inductor": 0.8}
    env = {**SYNTHETIC_ENV, "torch_version": torch, "env": {"name": name, "spec": f"torch=={torch}",
                                                              "packages": {"torch": torch}}}
    return Run(f"run-{name}", "2026-01-01T00:00:00+00:00", name, env, {}, [record])


def test_adjacent_changes_beyond_the_noise_floor_are_highlighted():
    runs = [_run("t211", "2.11.0", 5e-4), _run("t212", "2.12.1", 5e-4, graph_breaks=2, compile_time=3.0),
            _run("t213", "2.13.0", 4e-4, graph_breaks=2, compile_time=3.0)]
    (block,) = sweep_blocks(runs)
    rows = dict(block.rows)
    assert [c.css for c in rows["graph breaks"]] == ["", "v-regression", ""]  # 0 -> 2 at 2.12.1, then unchanged
    assert rows["compile time"][1].css == "v-regression" and "+50" in rows["compile time"][1].change
    assert "dyn" in rows["compile time"][0].detail and "ind" in rows["compile time"][0].detail
    assert rows["speedup"][2].css == "v-improvement" and rows["speedup"][1].css == ""
    assert [c.text for c in rows["status"]] == ["pass", "pass", "pass"]
    html = render_versions_report(runs, title="sweep")
    assert html.count('class="env"') >= 6 and "2.12.1" in html and "v-regression" in html


def test_failing_env_shows_as_now_failing():
    runs = [_run("a", "2.11.0", 5e-4), _run("b", "2.12.1", 5e-4, status="fail_compile")]
    rows = dict(sweep_blocks(runs)[0].rows)
    assert rows["status"][1].text == "fail_compile" and rows["status"][1].css == "v-regression"


def test_cli_versions_sweep_over_fake_envs(tmp_path, capsys):
    fakes = [make_fake_python(tmp_path / "py", f"v{i}", slowdown=0.5 if i == 2 else 0.0) for i in range(3)]
    out = tmp_path / "results"
    rc = main(["versions", "-w", "mlp-classic", "--scenario", "forward", "-c", "inductor", "--out", str(out),
               *[a for i, f in enumerate(fakes) for a in ("--env", f"v{i}={f}")]])
    assert rc == 0
    printed = capsys.readouterr().out
    report = next((out / "versions").glob("*.html"))
    assert f"versions report: {report}" in printed
    manifest = json.loads(next((out / "versions").glob("*.json")).read_text())
    assert [r["env"] for r in manifest["runs"]] == ["v0", "v1", "v2"]
    with HistoryStore(out / "history.sqlite") as store:
        assert set(store.run_ids()) == {r["run_id"] for r in manifest["runs"]}
    html = report.read_text()
    assert "v-regression" in html  # v2's compiled code is 50% slower than v1's
    # re-rendered from the manifest without measuring
    again = tmp_path / "again.html"
    assert main(["versions", "--from-manifest", str(next((out / "versions").glob("*.json"))),
                 "--report", str(again)]) == 0
    assert "v-regression" in again.read_text()


def test_cli_versions_needs_envs(capsys):
    assert main(["versions", "-w", "mlp-classic"]) == 2
    assert "--env for each environment" in capsys.readouterr().err
