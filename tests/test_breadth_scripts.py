"""benchmarks/zoo_cpu.py and benchmarks/breadth_cpu.py read run files: per-compiler
summaries (the compiled-pass mode), the 150-architecture target's scope, pooling suites
run apart (--analyse). SYNTHETIC run files; the real runs are the scripts' own."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from harness.model.schema import Case, Run, save_run
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_record

ROOT = Path(__file__).resolve().parents[1]


def script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def case(workload: str, compiler: str, suite: str, scenario: str = "forward") -> Case:
    return Case(workload, scenario, compiler, "cpu", "float32", 2, "tiny", suite)


def zoo_run(tmp_path: Path, suite: str = "transformers-zoo-tiny") -> Path:
    """Three architectures: eager all ok; inductor ok, ok with 2 graph breaks, fail_accuracy."""
    rng = np.random.default_rng(0)
    records = []
    for name in ("zoo-a-causal", "zoo-b-causal", "zoo-c-masked"):
        eager = synthetic_record(case(name, "eager", suite), rng)
        eager.metrics = {}  # an eager case has no compile figures
        eager.worker = {"wall_s": 4.0}
        records.append(eager)
    for name, status, breaks, compile_s in (("zoo-a-causal", "ok", 0, 10.0), ("zoo-b-causal", "ok", 2, 20.0),
                                            ("zoo-c-masked", "fail_accuracy", 0, 30.0)):
        rec = synthetic_record(case(name, "inductor", suite), rng, status=status, graph_breaks=breaks,
                               accuracy="pass" if status == "ok" else "fail", compile_time=compile_s,
                               compile_spread=0.0)
        rec.worker = {"wall_s": compile_s + 5}
        records.append(rec)
    path = tmp_path / f"{suite}.json"
    save_run(Run("r1", "2026-12-01T00:00:00+00:00", "r1", dict(SYNTHETIC_ENV), {"suite": suite}, records), path)
    return path


def test_zoo_cpu_summarises_each_compiler_apart(tmp_path, capsys):
    zoo = script("zoo_cpu")
    out = tmp_path / "summary.json"
    assert zoo.main(["--analyse", str(zoo_run(tmp_path)), "--json", str(out)]) == 1  # 3 eager ok < 150
    data = json.loads(out.read_text())["by_compiler"]
    assert list(data) == ["eager", "inductor"]
    assert data["eager"]["by_status"] == {"ok": 3} and "compile_s" not in data["eager"]
    inductor = data["inductor"]
    assert inductor["by_status"] == {"ok": 2, "fail_accuracy": 1}
    assert inductor["pass_rate_all"] == pytest.approx(2 / 3)
    assert inductor["compile_s"]["n"] == 2 and inductor["compile_s"]["median"] == pytest.approx(15.0)
    assert inductor["accuracy"] == {"pass": 2, "fail": 1}
    assert (inductor["graph_breaks_total"], inductor["cases_with_graph_breaks"]) == (2, 1)
    text = capsys.readouterr().out
    assert "== compiler inductor" in text and "cold compile (ok cases): median 15.0s" in text
    assert "| transformers-zoo-tiny | cpu | inductor | 67% (2/3) |" in text  # the HUD-style headline row


def test_zoo_cpu_target_only_for_a_whole_eager_zoo_plan(tmp_path):
    zoo = script("zoo_cpu")
    few = {"eager": {"ok_architectures": 3}}
    assert zoo.target_exit(few, whole_plan=True, zoo=True) == 1
    assert zoo.target_exit({"eager": {"ok_architectures": 150}}, whole_plan=True, zoo=True) == 0
    assert zoo.target_exit(few, whole_plan=False, zoo=True) == 0  # a shard cannot reach it
    assert zoo.target_exit({"inductor": {"ok_architectures": 3}}, whole_plan=True, zoo=True) == 0
    assert zoo.main(["--analyse", str(zoo_run(tmp_path, suite="diffusers-tiny"))]) == 0  # not the zoo's target


def test_zoo_cpu_missing_run_file_is_exit_2(tmp_path, capsys):
    assert script("zoo_cpu").main(["--analyse", str(tmp_path / "nope.json")]) == 2
    assert "no such run file" in capsys.readouterr().err


def model_run(tmp_path: Path, suite: str, outcomes: dict[str, list[str]], env: dict) -> Path:
    rng = np.random.default_rng(1)
    records = []
    for name, statuses in outcomes.items():
        for scenario, status in zip(("forward", "train")[: len(statuses)], statuses, strict=True):
            rec = synthetic_record(case(name, "eager", suite, scenario), rng, status=status)
            rec.worker = {"wall_s": 2.0}
            records.append(rec)
    path = tmp_path / f"{suite}.json"
    save_run(Run(suite, "2026-12-01T00:00:00+00:00", suite, env, {"suite": suite}, records), path)
    return path


def test_breadth_cpu_pools_suites_run_by_different_pythons(tmp_path, capsys):
    breadth = script("breadth_cpu")
    hf = model_run(tmp_path, "hf-tiny", {"hf-A": ["ok", "ok"], "hf-B": ["ok", "fail_run"]},
                   {**SYNTHETIC_ENV, "packages": {"transformers": "5.24.0"}})
    timm = model_run(tmp_path, "timm-tiny", {"timm-x": ["ok"], "timm-y": ["ok"]},
                     {**SYNTHETIC_ENV, "torch_version": "2.14.1", "packages": {"timm": "1.0.31"}})
    out = tmp_path / "out"
    assert breadth.main(["--analyse", str(hf), "--analyse", str(timm), "--target", "3", "--out", str(out)]) == 0
    data = json.loads((out / "breadth_cpu.json").read_text())
    assert (data["passed"], data["models"]) == (3, 4)  # hf-B failed its train step: not passed
    assert data["suites"]["hf-tiny"]["versions"] == {"torch": "2.13.0+cpu", "transformers": "5.24.0"}
    assert data["suites"]["timm-tiny"]["versions"] == {"torch": "2.14.1", "timm": "1.0.31"}
    assert list(data["suites"]["hf-tiny"]["not_passed"]) == ["hf-B"]
    assert "3/4 models built and ran eager (target 3): MET" in capsys.readouterr().out
    assert breadth.main(["--analyse", str(hf), "--analyse", str(timm), "--target", "4", "--out", str(out)]) == 1
    assert breadth.main(["--analyse", str(tmp_path / "none.json")]) == 2


def test_zoo_cpu_passes_compilers_and_workloads_to_the_runner(tmp_path, monkeypatch):
    zoo = script("zoo_cpu")
    seen = []

    def fake_run(cmd, **kwargs):  # the runner, as far as the script sees it: a run file appears
        seen.append(cmd)
        runs = Path(cmd[cmd.index("--out") + 1]) / "runs"
        runs.mkdir(parents=True)
        zoo_run(tmp_path).rename(runs / "r1.json")

    monkeypatch.setattr(zoo.subprocess, "run", fake_run)
    assert zoo.main(["-c", "eager,inductor", "-w", "zoo-a-causal,zoo-b-causal", "--out", str(tmp_path / "o")]) == 0
    cmd = seen[0]
    assert cmd[cmd.index("-c") + 1] == "eager,inductor" and cmd[cmd.index("-w") + 1] == "zoo-a-causal,zoo-b-causal"
