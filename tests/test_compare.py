"""compare/gate statistics and plumbing, on synthetic runs with known distributions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.analysis.compare import (
    DEFAULT_FAIL_ON,
    EAGER_FASTER,
    FASTER_EAGER_TOO,
    IMPROVEMENT,
    MACHINE_DRIFT,
    MISSING,
    NEW,
    NOISY,
    NOW_FAILING,
    NOW_PASSING,
    REGRESSION,
    SLOWER_EAGER_TOO,
    SLOWER_EAGER_TOO_NO_PROBE,
    STILL_FAILING,
    UNCHANGED,
    EnvironmentMismatchError,
    bootstrap_ratio_of_medians,
    compare_case,
    compare_runs,
)
from harness.analysis.thresholds import ThresholdConfig, config_from_dict
from harness.cli.main import main
from harness.model.schema import Run, save_run
from harness.model.stats import ratio_of_medians_ci
from harness.report.gate_output import markdown
from harness.testing.synthetic import SYNTHETIC_ENV, synthetic_case, synthetic_record, synthetic_run


def _case_run(run_id: str, *records) -> Run:
    return Run(run_id, "2026-01-01T00:00:00+00:00", run_id, dict(SYNTHETIC_ENV), {}, list(records))


def _pair(seed: int = 0, **head_kwargs):
    rng = np.random.default_rng(seed)
    case = synthetic_case(0)
    return case, synthetic_record(case, rng), synthetic_record(case, rng, **head_kwargs)


def _defaults(case_id: str = ""):
    return ThresholdConfig().for_case(case_id)


# ---------------------------------------------------------------- false alarms and power

def test_aa_comparisons_raise_no_regression():
    """200 A/A cases with 5% log-normal spread: the 5% threshold plus significance means none
    is called a regression (a coin-flip gate would flag ~5% of them on p alone)."""
    cmp = compare_runs([synthetic_run(200, 11)], [synthetic_run(200, 12)])
    assert cmp.failing() == []
    assert cmp.counts() == {UNCHANGED: 200}


@pytest.mark.parametrize("slowdown", [0.10, 0.15, 0.30])
def test_slowdowns_beyond_threshold_are_flagged_everywhere(slowdown):
    cmp = compare_runs([synthetic_run(50, 21)], [synthetic_run(50, 22, slowdown=slowdown)])
    assert cmp.counts() == {REGRESSION: 50}
    case = cmp.cases[0]
    assert case.metric("latency").verdict == REGRESSION
    assert case.metric("speedup").verdict == REGRESSION  # speedup down is bad
    assert case.metric("latency").change == pytest.approx(slowdown, abs=0.04)


def test_significant_change_within_threshold_is_unchanged():
    """2% slower with 1000 samples is statistically real but below the 5% threshold."""
    case, base, head = _pair(compiled_median=5e-4 * 1.02)
    rng = np.random.default_rng(1)
    base = synthetic_record(case, rng, n=1000, spread=0.01)
    head = synthetic_record(case, rng, n=1000, spread=0.01, compiled_median=5e-4 * 1.02)
    latency = compare_case(case.case_id, [base], [head], _defaults()).metric("latency")
    assert latency.verdict == UNCHANGED
    assert latency.change == pytest.approx(0.02, abs=0.005)


def test_big_change_that_is_not_significant_is_noisy_not_regression():
    """Two samples per side at 60% spread: a +20% median difference is not evidence."""
    rng = np.random.default_rng(3)
    case = synthetic_case(0)
    base = synthetic_record(case, rng, n=4, spread=0.6)
    head = synthetic_record(case, rng, n=4, spread=0.6, compiled_median=6e-4)
    latency = compare_case(case.case_id, [base], [head], _defaults()).metric("latency")
    assert latency.verdict == NOISY and latency.mdc > latency.threshold  # undecidable at the threshold, and said so


def test_improvement_direction():
    cmp = compare_runs([synthetic_run(5, 1)], [synthetic_run(5, 2, slowdown=-0.3)])
    assert cmp.counts() == {IMPROVEMENT: 5}
    assert cmp.cases[0].metric("speedup").change > 0.3


def test_process_level_test_with_rounds():
    """Five processes per side: the test runs on per-process medians, so a process-to-
    process spread of 10% hides a 5% shift (noisy/unchanged) but not a 40% one."""
    rng = np.random.default_rng(5)
    case = synthetic_case(0)

    def procs(factor: float) -> list:
        return [synthetic_record(case, rng, compiled_median=5e-4 * factor * float(np.exp(rng.normal(0, 0.10))))
                for _ in range(5)]

    small = compare_case(case.case_id, procs(1.0), procs(1.05), _defaults()).metric("latency")
    assert small.note.startswith("per-process medians") and small.n_base == 5
    assert small.verdict != REGRESSION
    big = compare_case(case.case_id, procs(1.0), procs(1.4), _defaults()).metric("latency")
    assert big.verdict == REGRESSION


# ---------------------------------------------------------------- statuses and exact metrics

def test_case_statuses():
    rng = np.random.default_rng(0)
    c = [synthetic_case(i) for i in range(6)]
    base = _case_run("b", synthetic_record(c[0], rng), synthetic_record(c[1], rng),
                     synthetic_record(c[2], rng, status="fail_compile"), synthetic_record(c[3], rng, status="crashed"),
                     synthetic_record(c[4], rng))
    head = _case_run("h", synthetic_record(c[0], rng, status="timeout"), synthetic_record(c[2], rng),
                     synthetic_record(c[3], rng, status="crashed"), synthetic_record(c[4], rng),
                     synthetic_record(c[5], rng))
    verdicts = {r.case_id: r.verdict for r in compare_runs([base], [head]).cases}
    assert verdicts == {c[0].case_id: NOW_FAILING, c[1].case_id: MISSING, c[2].case_id: NOW_PASSING,
                        c[3].case_id: STILL_FAILING, c[4].case_id: UNCHANGED, c[5].case_id: NEW}


def test_counts_and_accuracy_are_exact():
    case, base, head = _pair(graph_breaks=1, recompiles=0)
    result = compare_case(case.case_id, [base], [head], _defaults())
    assert result.verdict == REGRESSION and result.metric("graph_breaks").verdict == REGRESSION
    _, base, head = _pair(recompiles=0)
    base.metrics["recompiles"] = 2
    assert compare_case(case.case_id, [base], [head], _defaults()).metric("recompiles").verdict == IMPROVEMENT
    _, base, head = _pair(accuracy="fail")
    assert compare_case(case.case_id, [base], [head], _defaults()).metric("accuracy").verdict == REGRESSION


def test_compile_time_and_memory_thresholds():
    case, base, head = _pair(compile_time=2.0 * 1.30, peak_memory=int((100 << 20) * 1.2))
    result = compare_case(case.case_id, [base], [head], _defaults())
    assert result.metric("compile_time").verdict == REGRESSION  # +30% > 15%
    assert result.metric("peak_memory").verdict == REGRESSION  # +20% > 10%
    _, base, head = _pair(compile_time=2.0 * 1.08)
    assert compare_case(case.case_id, [base], [head], _defaults()).metric("compile_time").verdict == UNCHANGED


def test_overrides_change_the_verdict():
    case, base, head = _pair(compiled_median=5e-4 * 1.15)
    loose = config_from_dict({"workload": {"synth0": {"latency": "25%", "speedup": "off"}}})
    result = compare_case(case.case_id, [base], [head], loose.for_case(case.case_id, "synth0", "synthetic"))
    assert result.metric("latency").verdict == UNCHANGED
    assert result.metric("speedup") is None  # switched off


# ---------------------------------------------------------------- bootstrap and environment

def test_exact_bootstrap_matches_resampling():
    rng = np.random.default_rng(9)
    for n_a, n_b in ((101, 100), (30, 31), (8, 9)):
        a, b = rng.lognormal(0, 0.2, n_a), rng.lognormal(0.1, 0.2, n_b)
        fast = bootstrap_ratio_of_medians(a, b, n_boot=20000)
        slow = ratio_of_medians_ci(a, b, n_boot=20000)
        assert fast[0] == pytest.approx(slow[0])
        assert fast[1] == pytest.approx(slow[1], rel=0.02) and fast[2] == pytest.approx(slow[2], rel=0.02)


def test_environment_mismatch_refused_then_warned():
    other = dict(SYNTHETIC_ENV, torch_version="2.14.0", cpu_model="Other CPU")
    base, head = synthetic_run(2, 1), synthetic_run(2, 2, environment=other)
    with pytest.raises(EnvironmentMismatchError, match="cpu_model.*torch_version"):
        compare_runs([base], [head])
    cmp = compare_runs([base], [head], allow_mismatch=True)
    assert "cpu_model" in cmp.warnings[0] and "torch_version" in cmp.warnings[0]
    assert "WARNING" in markdown(cmp, [])


# ---------------------------------------------------------------- outputs and CLI

def test_markdown_puts_regressions_first_and_folds_the_rest():
    base = synthetic_run(4, 1)
    head = synthetic_run(4, 2, slowdown=0.2, slow_cases=1)
    cmp = compare_runs([base], [head])
    text = markdown(cmp, cmp.failing())
    attention, details = text.index("### Needs attention"), text.index("<details>")
    assert attention < text.index("synth0/") < details < text.index("synth1/")
    assert "FAIL: 1 case(s)" in text


def test_cli_exit_codes_and_outputs(tmp_path, capsys):
    save_run(synthetic_run(3, 1, run_id="base"), tmp_path / "base.json")
    save_run(synthetic_run(3, 2, run_id="same"), tmp_path / "same.json")
    save_run(synthetic_run(3, 3, slowdown=0.2, run_id="slow"), tmp_path / "slow.json")
    assert main(["compare", str(tmp_path / "base.json"), str(tmp_path / "same.json")]) == 0
    md, js = tmp_path / "out.md", tmp_path / "out.json"
    rc = main(["gate", str(tmp_path / "base.json"), str(tmp_path / "slow.json"), "--markdown", str(md), "--json-file", str(js)])
    assert rc == 1
    data = json.loads(js.read_text())
    assert data["counts"] == {REGRESSION: 3} and len(data["failed"]) == 3
    assert "regression" in md.read_text()
    # a folder of run files is one side with several processes
    folder = tmp_path / "many"
    for i in range(3):
        save_run(synthetic_run(3, 10 + i, run_id=f"b{i}"), folder / f"b{i}.json")
    assert main(["compare", str(folder), str(tmp_path / "same.json")]) == 0


@pytest.mark.parametrize("argv, message", [
    (["compare", "nope.json", "nope2.json"], "no such run file"),
    (["compare", "{base}", "{base}", "--fail-on", "regresion"], "is not a verdict"),
    (["compare", "{base}", "{base}", "--metric", "latncy"], "is unknown"),
    (["compare", "{base}", "{base}", "--thresholds", "{bad}"], "latency"),
    (["compare", "{base}", "{other}"], "torch_version"),
])
def test_cli_usage_errors_exit_2(tmp_path, capsys, argv, message):
    save_run(synthetic_run(2, 1, run_id="base"), tmp_path / "base.json")
    save_run(synthetic_run(2, 1, run_id="other", environment=dict(SYNTHETIC_ENV, torch_version="9.9")),
             tmp_path / "other.json")
    (tmp_path / "bad.toml").write_text('[suite.smoke]\nlatency = "fast"\n')
    paths = {"base": tmp_path / "base.json", "other": tmp_path / "other.json", "bad": tmp_path / "bad.toml"}
    argv = [a.format(**paths) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_machine_drift_seen_by_the_probe_is_normalised_out():
    """Head's process ran on a machine 40% slower (probe, eager and compiled alike): the
    latency verdict is `machine drift` with the probe's change, and the gate passes. Speedup
    (paired ratios) is unchanged."""
    rng = np.random.default_rng(8)
    case = synthetic_case(0)
    base = synthetic_record(case, rng, probe_median=1e-4)
    slow_machine = synthetic_record(case, rng, eager_median=1e-3 * 1.4, compiled_median=5e-4 * 1.4, probe_median=1.4e-4)
    result = compare_case(case.case_id, [base], [slow_machine], _defaults())
    latency = result.metric("latency")
    assert result.probe_change == pytest.approx(0.4, abs=0.05)
    assert latency.verdict == MACHINE_DRIFT and "probe +4" in latency.note
    assert latency.raw_change == pytest.approx(0.4, abs=0.05) and abs(latency.change) < 0.05
    assert result.metric("speedup").verdict == UNCHANGED
    assert result.verdict == MACHINE_DRIFT and result.verdict not in DEFAULT_FAIL_ON


def test_eager_moving_on_a_steady_machine_is_a_whole_model_regression():
    """Probe steady, eager and compiled both 40% slower: a real change in torch or the model,
    `slower (eager too)`, failing by default; whole_model = "warn" keeps it visible but
    passing. A compiled-only slowdown of the same size stays a plain regression."""
    rng = np.random.default_rng(9)
    case = synthetic_case(0)
    base = synthetic_record(case, rng, probe_median=1e-4)
    whole = synthetic_record(case, rng, eager_median=1e-3 * 1.4, compiled_median=5e-4 * 1.4, probe_median=1e-4)
    result = compare_case(case.case_id, [base], [whole], _defaults())
    assert result.verdict == SLOWER_EAGER_TOO and not result.warn_only
    assert "machine probe steady" in result.metric("latency").note
    warn = config_from_dict({"defaults": {"whole_model": "warn"}})
    cmp = compare_runs([_case_run("b", base)], [_case_run("h", whole)], warn)
    assert cmp.cases[0].verdict == SLOWER_EAGER_TOO and cmp.cases[0].warn_only and cmp.failing() == []
    assert any("warn only" in f for f in cmp.cases[0].flags)
    slower_code = synthetic_record(case, rng, compiled_median=5e-4 * 1.4, probe_median=1e-4)
    result = compare_case(case.case_id, [base], [slower_code], _defaults())
    assert result.metric("latency").verdict == REGRESSION and result.verdict == REGRESSION


def test_eager_too_without_a_probe_warns_and_does_not_fail(tmp_path):
    """No usable probe (none recorded: older run files; or too few probe samples per kernel:
    short --min-time policies): eager and compiled 40% slower together may be the machine,
    so the verdict says `no probe`, warns, and the gate passes; the same change with a steady
    probe fails (test above)."""
    rng = np.random.default_rng(10)
    case = synthetic_case(0)
    base = synthetic_record(case, rng)
    both = synthetic_record(case, rng, eager_median=1e-3 * 1.4, compiled_median=5e-4 * 1.4)
    result = compare_case(case.case_id, [base], [both], _defaults())
    assert result.verdict == SLOWER_EAGER_TOO_NO_PROBE and SLOWER_EAGER_TOO_NO_PROBE not in DEFAULT_FAIL_ON
    assert "no usable machine probe" in result.metric("latency").note
    assert "machine probe steady" not in result.metric("latency").note
    short_base = synthetic_record(case, rng, probe_median=1e-4, probe_n=3)  # under MIN_SAMPLES per kernel
    short_head = synthetic_record(case, rng, eager_median=1.4e-3, compiled_median=7e-4, probe_median=1e-4, probe_n=3)
    assert compare_case(case.case_id, [short_base], [short_head], _defaults()).verdict == SLOWER_EAGER_TOO_NO_PROBE
    save_run(_case_run("b", base), tmp_path / "b.json")
    save_run(_case_run("h", both), tmp_path / "h.json")
    assert main(["compare", str(tmp_path / "b.json"), str(tmp_path / "h.json")]) == 0
    assert main(["compare", str(tmp_path / "b.json"), str(tmp_path / "h.json"),
                 "--fail-on", SLOWER_EAGER_TOO_NO_PROBE]) == 1
    # a compiled-only slowdown needs no probe: eager held still, it stays a failing regression
    code = synthetic_record(case, rng, compiled_median=5e-4 * 1.4)
    assert compare_case(case.case_id, [base], [code], _defaults()).verdict == REGRESSION


def _torch_env(version: str) -> dict:
    from harness.testing.synthetic import SYNTHETIC_ENV

    return {**SYNTHETIC_ENV, "torch_version": version}


@pytest.mark.parametrize("version", ["gpu-1", "cpu-1"])
def test_a_torch_bound_probe_is_not_divided_out_across_torch_builds(version):
    """A probe set that calls torch moved +40% with eager and compiled, and head ran another
    torch build: the probe may be timing the torch change itself, so compare does not
    normalise (no `machine drift`), says why, and does not claim a steady machine. The same
    records from one torch build are machine drift; a steady torch-bound probe still vouches
    for the machine (a whole-model failure)."""
    rng = np.random.default_rng(15)
    case = synthetic_case(0)
    base = synthetic_record(case, rng, probe_median=1e-4, probe_version=version)
    slow = synthetic_record(case, rng, eager_median=1.4e-3, compiled_median=7e-4, probe_median=1.4e-4,
                            probe_version=version)
    steady = synthetic_record(case, rng, eager_median=1.4e-3, compiled_median=7e-4, probe_median=1e-4,
                              probe_version=version)

    def cmp(head, head_torch):
        return compare_runs([Run("b", "2026-01-01T00:00:00+00:00", "b", _torch_env("2.13.0"), {}, [base])],
                            [Run("h", "2026-01-01T00:00:00+00:00", "h", _torch_env(head_torch), {}, [head])],
                            allow_mismatch=True).cases[0]

    across = cmp(slow, "2.14.0")
    latency = across.metric("latency")
    assert latency.raw_change is None and latency.change == pytest.approx(0.4, abs=0.05)
    assert "not normalised" in latency.note and f"probe set {version} runs on torch" in latency.note
    assert across.verdict == SLOWER_EAGER_TOO_NO_PROBE and "machine probe steady" not in latency.note
    assert cmp(slow, "2.13.0").verdict == MACHINE_DRIFT
    held = cmp(steady, "2.14.0")
    assert held.verdict == SLOWER_EAGER_TOO and "machine probe steady" in held.metric("latency").note
    # compare_case callers across builds (versions, bisect) say so themselves
    direct = compare_case(case.case_id, [base], [slow], _defaults(), torch_differs=True)
    assert direct.verdict == SLOWER_EAGER_TOO_NO_PROBE


def test_the_torch_free_cpu_probe_normalises_across_torch_builds():
    """cpu-2 calls no torch: a +40% probe across torch builds is the machine, divided out."""
    rng = np.random.default_rng(16)
    case = synthetic_case(0)
    base = synthetic_record(case, rng, probe_median=1e-4)
    slow = synthetic_record(case, rng, eager_median=1.4e-3, compiled_median=7e-4, probe_median=1.4e-4)
    result = compare_case(case.case_id, [base], [slow], _defaults(), torch_differs=True)
    assert result.verdict == MACHINE_DRIFT and result.metric("latency").raw_change == pytest.approx(0.4, abs=0.05)


def test_per_process_drift_is_normalised_in_ab_compares():
    """Four processes per side whose machine speed drifts by up to 30% between processes:
    without the probe a 15% whole-model slowdown drowns (noisy); normalised by each
    process's probe it is found, and the A/A stays clean."""
    rng = np.random.default_rng(11)
    case = synthetic_case(0)
    drift = [1.0, 1.3, 0.9, 1.2, 1.25, 0.95, 1.1, 1.0]

    def side(factors, slowdown):
        return [synthetic_record(case, rng, eager_median=1e-3 * f * slowdown, compiled_median=5e-4 * f * slowdown,
                                 probe_median=1e-4 * f, spread=0.02) for f in factors]

    base, aa, slow = side(drift[:4], 1.0), side(drift[4:], 1.0), side(drift[4:], 1.15)
    no_probe = config_from_dict({"defaults": {"probe": "off"}}).for_case("")
    assert compare_case(case.case_id, base, slow, no_probe).metric("latency").verdict in (NOISY, UNCHANGED)
    found = compare_case(case.case_id, base, slow, _defaults())
    assert found.verdict == SLOWER_EAGER_TOO and found.metric("latency").change == pytest.approx(0.15, abs=0.03)
    assert compare_case(case.case_id, base, aa, _defaults()).verdict in (UNCHANGED, MACHINE_DRIFT)


def test_cold_compile_time_is_judged_on_cpu_seconds_when_recorded():
    rng = np.random.default_rng(12)
    case = synthetic_case(0)
    base = synthetic_record(case, rng, compile_time=2.0, compile_cpu=1.0)
    loaded = synthetic_record(case, rng, compile_time=3.0, compile_cpu=1.0)  # waited for a core, same work
    ct = compare_case(case.case_id, [base], [loaded], _defaults()).metric("compile_time")
    assert ct.verdict == UNCHANGED and ct.note.startswith("CPU seconds")
    more_work = synthetic_record(case, rng, compile_time=3.0, compile_cpu=1.5)
    assert compare_case(case.case_id, [base], [more_work], _defaults()).metric("compile_time").verdict == REGRESSION
    wall_only = compare_case(case.case_id, [synthetic_record(case, rng)], [synthetic_record(case, rng)], _defaults())
    assert wall_only.metric("compile_time").note.startswith("wall seconds")


def test_gpu_compile_time_is_judged_on_wall_seconds():
    """On a GPU compile_cpu_s misses the Triton compiles in Inductor's compile-worker pool:
    compare judges wall seconds there, even when both sides recorded CPU seconds, and says why.
    Here the pool's work doubled (wall +50%) while the partial CPU seconds held still."""
    import dataclasses

    rng = np.random.default_rng(17)
    case = dataclasses.replace(synthetic_case(0), device="cuda")
    base = synthetic_record(case, rng, compile_time=2.0, compile_cpu=1.0)
    head = synthetic_record(case, rng, compile_time=3.0, compile_cpu=1.0)
    ct = compare_case(case.case_id, [base], [head], _defaults()).metric("compile_time")
    assert ct.verdict == REGRESSION and ct.note.startswith("wall seconds (not CPU seconds on a non-CPU device")
    assert ct.change == pytest.approx(0.5, abs=0.05)
    on_cpu = dataclasses.replace(case, device="cpu")
    cpu_base = synthetic_record(on_cpu, rng, compile_time=2.0, compile_cpu=1.0)
    cpu_head = synthetic_record(on_cpu, rng, compile_time=3.0, compile_cpu=1.0)
    assert compare_case(on_cpu.case_id, [cpu_base], [cpu_head], _defaults()).metric("compile_time").verdict == UNCHANGED


@pytest.mark.parametrize("toml,message", [
    ({"defaults": {"whole_model": "maybe"}}, "not a whole-model policy"),
    ({"defaults": {"probe": "fast"}}, "not a threshold"),
])
def test_attribution_keys_are_validated(toml, message):
    from harness.analysis.thresholds import ThresholdConfigError

    with pytest.raises(ThresholdConfigError, match=message):
        config_from_dict(toml)


def test_cli_whole_model_flag_makes_eager_too_warn_only(tmp_path, capsys):
    rng = np.random.default_rng(13)
    case = synthetic_case(0)
    base = synthetic_record(case, rng, probe_median=1e-4)
    whole = synthetic_record(case, rng, eager_median=1.3e-3, compiled_median=5e-4 * 1.3, probe_median=1e-4)
    save_run(_case_run("b", base), tmp_path / "b.json")
    save_run(_case_run("h", whole), tmp_path / "h.json")
    assert main(["compare", str(tmp_path / "b.json"), str(tmp_path / "h.json")]) == 1
    assert main(["compare", str(tmp_path / "b.json"), str(tmp_path / "h.json"), "--whole-model", "warn"]) == 0
    out = capsys.readouterr().out
    assert "slower (eager too)" in out and "warn-only" in out


def test_geomeans_only_over_cases_ok_on_both_sides():
    """A case that fails in head (and one only in base) stays out of the geomean, named."""
    rng = np.random.default_rng(14)
    cases = [synthetic_case(i) for i in range(4)]
    base = [synthetic_record(c, rng) for c in cases[:3]] + [synthetic_record(cases[3], rng)]
    head = [synthetic_record(cases[0], rng, compiled_median=5e-4 * 1.1), synthetic_record(cases[1], rng),
            synthetic_record(cases[2], rng, status="fail_run")]
    cmp = compare_runs([_case_run("b", *base)], [_case_run("h", *head)])
    g = cmp.geomeans()
    assert g["cases"] == 2 and g["latency"]["cases"] == 2
    assert g["latency"]["ratio"] == pytest.approx(1.1 ** 0.5, abs=0.02)
    assert {e["case_id"]: e["reason"] for e in g["excluded"]} == {
        cases[2].case_id: "status ok -> fail_run", cases[3].case_id: "missing: not in head"}
    assert "Excluded 2" in markdown(cmp, cmp.failing())


def test_no_machine_drift_verdict_while_the_probe_held_still():
    """Per-process compares always divide by the probe; a raw change the test cannot confirm
    on a steady probe is `noisy`/`unchanged`, never `machine drift`."""
    rng = np.random.default_rng(15)
    case = synthetic_case(0)
    base = [synthetic_record(case, rng, probe_median=1e-4, spread=0.3) for _ in range(4)]
    head = [synthetic_record(case, rng, probe_median=1e-4, spread=0.3, compiled_median=5e-4 * 1.10) for _ in range(4)]
    result = compare_case(case.case_id, base, head, _defaults())
    latency = result.metric("latency")
    assert abs(result.probe_change) < 0.03 and latency.raw_change > 0.05  # beyond the threshold before dividing
    assert latency.verdict == NOISY


def test_a_change_left_after_normalising_is_not_machine_drift():
    """The probe moved +20% but head's latency moved +45%: after dividing, +21% is left.
    Undecided or not, that is no drift (the machine explains only part of it); and a probe
    moving the other way never explains a slowdown."""
    rng = np.random.default_rng(21)
    case = synthetic_case(0)
    base = [synthetic_record(case, rng, probe_median=1e-4, spread=0.25, n=6) for _ in range(1)]
    head = [synthetic_record(case, rng, probe_median=1.2e-4, spread=0.25, n=6, eager_median=1e-3 * 1.45,
                             compiled_median=5e-4 * 1.45)]
    latency = compare_case(case.case_id, base, head, _defaults()).metric("latency")
    assert latency.raw_change > 0.3 and latency.change > 0.05
    assert latency.verdict != MACHINE_DRIFT
    # the probe says the head's machine was 10% FASTER while latency rose: not drift either
    faster_machine = [synthetic_record(case, rng, probe_median=0.9e-4, spread=0.01, n=6, eager_median=1e-3 * 1.08,
                                       compiled_median=5e-4 * 1.08)]
    steady = [synthetic_record(case, rng, probe_median=1e-4, spread=0.01, n=6)]
    result = compare_case(case.case_id, steady, faster_machine, _defaults())
    assert result.probe_change < -0.05 and result.metric("latency").verdict != MACHINE_DRIFT


def test_speedup_moved_by_eager_alone_is_not_a_compiler_regression():
    """Torch made eager 25% faster, the compiled code held still: speedup drops ~20%, but the
    compiled code did not regress. `eager faster`, with both changes in the note; the gate
    passes (an eager-only change is not a latency or throughput regression)."""
    rng = np.random.default_rng(22)
    case = synthetic_case(0)
    base = synthetic_record(case, rng, probe_median=1e-4, spread=0.02)
    head = synthetic_record(case, rng, probe_median=1e-4, spread=0.02, eager_median=1e-3 * 0.75)
    result = compare_case(case.case_id, [base], [head], _defaults())
    speedup = result.metric("speedup")
    assert speedup.verdict == EAGER_FASTER and speedup.change == pytest.approx(-0.25, abs=0.03)
    assert "eager moved -2" in speedup.note and result.metric("latency").verdict == UNCHANGED
    assert result.verdict == EAGER_FASTER and result.verdict not in DEFAULT_FAIL_ON
    # the compiled code slower with eager steady is still the compiler's regression
    slower = synthetic_record(case, rng, probe_median=1e-4, spread=0.02, compiled_median=5e-4 * 1.25)
    assert compare_case(case.case_id, [base], [slower], _defaults()).metric("speedup").verdict == REGRESSION
    # compiled +4.5% (under the latency threshold) with eager's own process noise at -3%: the
    # speedup drop is mostly the compiled code's, so it stays a regression
    mostly_compiled = synthetic_record(case, rng, probe_median=1e-4, spread=0.02, eager_median=1e-3 * 0.97,
                                       compiled_median=5e-4 * 1.045)
    result = compare_case(case.case_id, [base], [mostly_compiled], _defaults())
    assert result.metric("latency").verdict == UNCHANGED and result.metric("speedup").verdict == REGRESSION


def test_eager_only_cases_get_the_whole_model_verdicts():
    """`-c eager` cases have no compiled block: their latency is eager's, so a slowdown on a
    steady machine is a change in torch or the model (`slower (eager too)`, failing by
    default, warn-only under whole_model = "warn"), not a compiler `regression`."""
    rng = np.random.default_rng(23)
    case = synthetic_case(0)

    def eager_only(median: float):
        record = synthetic_record(case, rng, eager_median=median, probe_median=1e-4, spread=0.02)
        record.compiled = None
        return record

    result = compare_case(case.case_id, [eager_only(1e-3)], [eager_only(1.3e-3)], _defaults())
    assert result.verdict == SLOWER_EAGER_TOO and result.eager_change == pytest.approx(0.3, abs=0.03)
    warn = config_from_dict({"defaults": {"whole_model": "warn"}})
    cmp = compare_runs([_case_run("b", eager_only(1e-3))], [_case_run("h", eager_only(1.3e-3))], warn)
    assert cmp.cases[0].warn_only and cmp.failing() == []
    faster = compare_case(case.case_id, [eager_only(1e-3)], [eager_only(0.7e-3)], _defaults())
    assert faster.verdict == FASTER_EAGER_TOO


def test_four_processes_against_one_are_tested_on_raw_samples_both_sides():
    """Per-process medians only when both sides have 4+ processes: 4 medians against one
    process's 100 raw samples would test unlike things."""
    rng = np.random.default_rng(24)
    case = synthetic_case(0)
    base = [synthetic_record(case, rng) for _ in range(4)]
    head = [synthetic_record(case, rng)]
    latency = compare_case(case.case_id, base, head, _defaults()).metric("latency")
    assert latency.note.startswith("raw samples") and (latency.n_base, latency.n_head) == (400, 100)


def test_descheduled_samples_are_left_out():
    """Half of head's samples spanned a neighbour's 20 ms time slice (wall 20 ms, CPU 0.5 ms,
    as measured on the loaded 2-core box): with per-sample CPU seconds they are left out and
    the A/A stays unchanged; without them the same samples read as a huge regression."""
    rng = np.random.default_rng(16)
    case = synthetic_case(0)
    base, head = synthetic_record(case, rng), synthetic_record(case, rng)
    for rec in (base, head):  # the blocks are frozen payloads: a copy with the extra key
        rec.eager, rec.compiled = (b.with_fields(cpu_samples_s=list(b["samples_s"])) for b in (rec.eager, rec.compiled))
    for i in range(0, 100, 2):
        head.compiled["samples_s"][i] = 0.02  # the call took 0.5 ms of CPU, the sample 20 ms of wall
    result = compare_case(case.case_id, [base], [head], _defaults())
    assert result.metric("latency").verdict == UNCHANGED and result.metric("speedup").n_head == 50
    head.eager, head.compiled = (b.without("cpu_samples_s") for b in (head.eager, head.compiled))
    assert compare_case(case.case_id, [base], [head], _defaults()).metric("latency").verdict == REGRESSION


def test_descheduled_filter_stands_down_when_almost_nothing_ran():
    from harness.analysis.metrics import clean_samples as _samples

    wall = [1e-3] * 10
    assert _samples({"samples_s": wall, "cpu_samples_s": [1e-5] * 9 + [1e-3]}).size == 10
    assert _samples({"samples_s": wall, "cpu_samples_s": [1e-5] * 5 + [1e-3] * 5}).size == 5
    assert _samples({"samples_s": wall, "cpu_samples_s": [1e-3] * 3}).size == 10  # misaligned: ignored


def test_probes_of_different_versions_are_not_normalised_and_compare_says_why():
    """gpu-1 sampled between rounds, gpu-2 at the edges: the same kernels read 26-50 us vs
    20-27 us on the H200, so a head probe 30% 'faster' is the schedule, not the machine.
    Across versions compare leaves latency raw (unchanged here) and names the mismatch; the
    same pair under one version is normalised into a false regression (what it did before
    the version bump)."""
    rng = np.random.default_rng(17)
    case = synthetic_case(0)
    base = [synthetic_record(case, rng, probe_median=1e-4, probe_version="gpu-1") for _ in range(2)]
    head = [synthetic_record(case, rng, probe_median=0.7e-4, probe_version=v) for v in ("gpu-2", "gpu-2")]
    result = compare_case(case.case_id, base, head, _defaults())
    latency = result.metric("latency")
    assert result.verdict == latency.verdict == UNCHANGED and latency.raw_change is None and result.probe_change is None
    assert "probe versions differ (base gpu-1, head gpu-2)" in latency.note
    assert result.probe_caveat.startswith("not normalised: probe versions differ")
    same = [synthetic_record(case, rng, probe_median=0.7e-4, probe_version="gpu-1") for _ in range(2)]
    normalised = compare_case(case.case_id, base, same, _defaults())
    latency = normalised.metric("latency")
    assert latency.verdict == SLOWER_EAGER_TOO and latency.change > 0.3 and not normalised.probe_caveat


def test_latency_of_unnormalised_processes_stands_only_with_the_in_process_speedup():
    """Old (7edde66) vs new on an H200, 3 processes a side, probe versions that differ: one slow
    new process moved the pooled reduce-overhead forward latency +14.7% while every process's
    speedup stayed in the other side's range: `noisy`, not a regression (the real run files)."""
    from pathlib import Path

    from harness.model.schema import load_run

    folder = Path(__file__).resolve().parents[1] / "results/baselines/h200-2026-12-01e/oldnew-mlp-deep-x3"
    old = [load_run(p) for p in sorted(folder.glob("*-old-*.json"))]
    new = [load_run(p) for p in sorted(folder.glob("*-new-*.json"))]
    cmp = compare_runs(old, new)
    ro = next(c for c in cmp.cases if c.case_id.startswith("mlp-deep/forward/inductor-reduce-overhead"))
    assert ro.processes == (3, 3) and ro.probe_change is None
    assert ro.metric("latency").verdict == NOISY and ro.metric("latency").change > 0.1
    assert ro.metric("speedup").verdict not in (REGRESSION, IMPROVEMENT)
    assert any("host speed, not judged" in f for f in ro.flags)


def test_a_compiled_only_slowdown_in_every_process_still_fails_without_a_probe():
    """The same shape, 3 processes a side and no probe, but the compiled code 30% slower in each
    head process and eager unchanged: the in-process speedup drops too, so latency stays a
    regression (the rule above never hides a change the speedup confirms)."""
    rng = np.random.default_rng(21)
    case = synthetic_case(0)
    base = [synthetic_record(case, rng) for _ in range(3)]
    head = [synthetic_record(case, rng, compiled_median=5e-4 * 1.3) for _ in range(3)]
    result = compare_case(case.case_id, base, head, _defaults())
    assert result.processes == (3, 3) and result.probe_change is None
    assert result.metric("speedup").verdict == REGRESSION
    assert result.metric("latency").verdict == REGRESSION and result.verdict == REGRESSION
