"""The capability layer: one probe per version-dependent feature, cheap, and a missing
feature skips what needs it with a reason (never a failure)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiler import CompilerConfig
from harness.measure import capabilities as caps
from harness.measure.capabilities import FEATURES, Capability, Inspector, probe
from harness.measure.worker import run_case

# torch-version-sensitive: `pytest -m compat` / `tox -e compat` run these on the installed torch
pytestmark = pytest.mark.compat

ROOT = Path(__file__).resolve().parent.parent
FAST_POLICY = {"warmup": 1, "min_samples": 3, "min_time_s": 0.0, "max_samples": 5, "max_time_s": 2.0}


def fake_missing(monkeypatch, *names: str) -> None:
    """Make `names` look absent from the installed torch (as on an older release)."""
    real = caps.capability

    def capability(name: str) -> Capability:
        cap = real(name)
        if name in names:
            return Capability(name, cap.package, False, cap.needs, "absent (test)", cap.used_for)
        return cap

    monkeypatch.setattr(caps, "capability", capability)


def test_source_and_live_probes_agree_on_the_installed_packages():
    # the parent reads source (cheap); workers, which import the modules anyway, read live
    source = {f.name: probe(f, Inspector("source")) for f in FEATURES}
    live = {f.name: probe(f, Inspector("live")) for f in FEATURES}
    assert source == live


def test_everything_the_harness_uses_is_available_on_a_supported_torch():
    summary = caps.capabilities_summary()
    assert summary["missing"] == [], {n: f["detail"] for n, f in summary["features"].items() if not f["available"]}
    assert summary["versions"]["torch"]


def test_probe_in_a_fresh_process_imports_nothing_heavy_and_costs_under_a_second():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "capability_probe.py"), "--repeats", "1"],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert "heavy modules imported by the probe: none" in out.stdout, out.stdout + out.stderr
    # CPU seconds: stable under a loaded CI box where wall time is not
    cpu = float(out.stdout.split("cpu:  median ", 1)[1].split(" s", 1)[0])
    assert cpu < 1.0, out.stdout


def test_missing_feature_reason_names_the_feature_the_release_and_this_version(monkeypatch):
    fake_missing(monkeypatch, "aot_compile")
    reason = caps.missing_reason("torch.compile", "aot_compile")
    import torch

    assert reason.startswith("aot_compile needs torch >= 2.11") and f"this is torch {torch.__version__}" in reason
    with pytest.raises(caps.FeatureMissing, match="aot_compile needs torch"):
        caps.require("aot_compile")


def test_case_whose_compiler_needs_a_missing_feature_is_skipped_with_the_reason(monkeypatch):
    fake_missing(monkeypatch, "module_compile")
    config = CompilerConfig("inplace", inplace=True)
    case = {"workload": "mlp-classic", "scenario": "forward", "compiler": config.name, "device": "cpu",
            "dtype": "float32", "batch_size": 4, "size": "tiny", "suite": "test", "options": []}
    record = run_case({"case": case, "compiler": config.to_dict(), "policy": FAST_POLICY,
                       "workload_modules": ["suites.mlp"], "seed": 0})
    assert record.status == "skipped"
    assert record.error["message"].startswith("module_compile needs torch >= 2.2")


def test_coldstart_rows_needing_missing_features_are_skipped_without_a_process(monkeypatch, tmp_path):
    from harness.experiments.lifecycle import ColdStartOptions, coldstart

    fake_missing(monkeypatch, "aot_compile", "aoti")
    seen = []
    result = coldstart(ColdStartOptions(rows=["aot_compile", "aot_compile_warm", "aoti"], workdir=str(tmp_path)),
                       progress=seen.append)
    assert [r["status"] for r in result["rows"]] == ["skipped"] * 3
    assert all("needs torch" in r["error"] for r in result["rows"]), result["rows"]
    assert {r["row"] for r in seen} == {"aot_compile", "aoti"}  # the two builds, reported as they end
    assert not list(tmp_path.glob("*.out.json"))  # no process ran


def test_train_on_a_module_without_parameters_is_skipped_not_failed(tmp_path):
    path = tmp_path / "noparams.py"
    path.write_text("import torch\nfrom harness import workload\n\n"
                    "@workload('no-params')\ndef f(ctx):\n"
                    "    return torch.nn.ReLU(), (torch.randn(ctx.batch_size, 4),)\n")
    case = {"workload": "no-params", "scenario": "train", "compiler": "eager", "device": "cpu", "dtype": "float32",
            "batch_size": 2, "size": "tiny", "suite": "test", "options": []}
    record = run_case({"case": case, "compiler": CompilerConfig("eager", backend=None).to_dict(), "policy": FAST_POLICY,
                       "workload_modules": [], "workload_files": [str(path)], "seed": 0})
    assert record.status == "skipped", record.error
    assert "has no parameters" in record.error["message"] and "scenario forward" in record.error["message"]


def test_capabilities_go_into_the_environment_and_the_report(monkeypatch):
    from harness.measure.environment import capture_environment
    from harness.report.report import render_report
    from harness.testing.synthetic_history import SyntheticSpec, synthetic_run

    env = capture_environment([])
    assert env["capabilities"]["features"]["aot_compile"]["available"] in (True, False)
    run = synthetic_run(SyntheticSpec(cases=2), night=0)
    env["capabilities"]["missing"] = ["aot_compile"]
    env["capabilities"]["features"]["aot_compile"]["available"] = False
    run.environment = env
    html = render_report(run)
    table = html.split('id="capabilities-table"', 1)[1].split("</table>", 1)[0]
    assert "<code>aot_compile</code>" in table and ">no<" in table
    assert "Missing here: <b>aot_compile</b>" in html


class StubInspector(Inspector):
    """A torch release described by what it has: {module: {attr: value}} (no other module)."""

    def __init__(self, modules: dict[str, dict[str, object]]) -> None:
        super().__init__("source")
        self.modules = modules

    def _ask(self, method, module, *args):
        attrs = self.modules.get(module, {})
        if method == "has":
            return args[0] in attrs
        if method == "value":
            return attrs.get(args[0], caps.MISSING)
        raise AssertionError(f"the aot_compile probe asked {method}")


AOT_RELEASE = {"torch.compiler": {"load_compiled_function": object()},
               "torch._dynamo.aot_compile": {"aot_compile_fullgraph": object(), "AOTCompiledFunction": object()},
               "torch._dynamo.config": {"enable_aot_compile": True}}
AOT_FEATURE = next(f for f in FEATURES if f.name == "aot_compile")


def test_aot_compile_probe_needs_its_entry_points_not_mega_cache():
    # no save_cache_artifacts anywhere in AOT_RELEASE: aot_compile is still there
    assert AOT_FEATURE.probe(StubInspector(AOT_RELEASE)) == (True, "on by default")
    off = {**AOT_RELEASE, "torch._dynamo.config": {"enable_aot_compile": False}}  # torch 2.11
    ok, detail = AOT_FEATURE.probe(StubInspector(off))
    assert ok and "sets torch._dynamo.config.enable_aot_compile = True" in detail


@pytest.mark.parametrize("module, attr", [("torch.compiler", "load_compiled_function"),
                                          ("torch._dynamo.aot_compile", "aot_compile_fullgraph"),
                                          ("torch._dynamo.aot_compile", "AOTCompiledFunction"),
                                          ("torch._dynamo.config", "enable_aot_compile")])
def test_aot_compile_probe_is_missing_without_any_entry_point(module, attr):
    release = {m: dict(attrs) for m, attrs in AOT_RELEASE.items()}
    del release[module][attr]
    ok, detail = AOT_FEATURE.probe(StubInspector(release))
    assert not ok and f"{module}.{attr}" in detail


def test_probe_json_is_serialisable():
    json.dumps(caps.capabilities_summary())
