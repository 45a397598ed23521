"""Adaptive A/B rounds: the sequential stopping rule (harness/analysis/sequential.py) keeps the
gate's error rates (simulations with a fixed seed) and ab's round loop stops decided cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.compare import compare_runs
from harness.analysis.sequential import (
    SequentialDesign,
    case_decision,
    look,
    operating_characteristics,
    stop_rule,
)
from harness.analysis.thresholds import ThresholdConfig
from harness.testing.synthetic import synthetic_case, synthetic_record

DESIGN = SequentialDesign()
SESSIONS = 400


def slack(rate: float, n: int = SESSIONS) -> float:
    """Three binomial standard errors (at least 1.5%): simulation noise, not a tolerance."""
    return max(3 * math.sqrt(max(rate, 0.01) * (1 - rate) / n), 0.015)


@pytest.mark.parametrize("sigma", [0.02, 0.04])
def test_aa_false_failures_stay_at_the_fixed_design_and_below_alpha(sigma):
    oc = operating_characteristics(DESIGN, 0.0, sigma, SESSIONS, seed=11)
    interim = len(DESIGN.interim_looks) * DESIGN.interim_alpha
    assert oc["sequential_fail_rate"] <= oc["fixed_fail_rate"] + interim + slack(oc["fixed_fail_rate"])
    assert oc["sequential_fail_rate"] <= DESIGN.alpha
    assert oc["sequential_processes"] < oc["fixed_processes"]  # the point: fewer processes for the same answer


def test_aa_false_failures_near_alpha_stay_at_the_fixed_design():
    """An A/A arm where the fixed design itself fails about alpha/2 of sessions (no threshold
    to hide behind): a looser interim boundary would show here, as it cannot at a 5% threshold."""
    oc = operating_characteristics(DESIGN, 0.0, 0.04, SESSIONS, seed=21, threshold=0.0)
    interim = len(DESIGN.interim_looks) * DESIGN.interim_alpha
    assert 0.005 < oc["fixed_fail_rate"] <= DESIGN.alpha
    assert oc["sequential_fail_rate"] <= oc["fixed_fail_rate"] + interim + slack(oc["fixed_fail_rate"])


@pytest.mark.parametrize("change, sigma", [(0.10, 0.02), (0.134, 0.02), (0.10, 0.04), (0.134, 0.04)])
def test_detection_holds_and_costs_fewer_processes(change, sigma):
    oc = operating_characteristics(DESIGN, change, sigma, SESSIONS, seed=12)
    assert oc["sequential_fail_rate"] >= oc["fixed_fail_rate"] - slack(oc["fixed_fail_rate"])
    assert oc["sequential_processes"] < oc["fixed_processes"] - 1  # big changes stop well before round 8


def test_an_unchanged_stop_at_the_threshold_is_rarer_than_beta():
    """beta bounds the chance that the rule stops 'unchanged' when the true change is the
    threshold itself (the hardest case for that boundary)."""
    rng = np.random.default_rng(13)
    threshold, sigma = 0.05, 0.02
    unchanged = 0
    for _ in range(SESSIONS):
        b = np.exp(rng.normal(0, sigma, DESIGN.max_rounds))
        h = np.exp(rng.normal(math.log1p(threshold), sigma, DESIGN.max_rounds))
        for k in DESIGN.interim_looks:
            decision = look(b[:k], h[:k], threshold, DESIGN).decision
            if decision is not None:
                unchanged += decision == "unchanged"
                break
    assert unchanged / SESSIONS <= DESIGN.beta


def test_look_on_exact_values():
    assert look([1.0] * 4, [1.0] * 4, 0.05, DESIGN).decision == "unchanged"
    assert look([1.0] * 4, [1.2] * 4, 0.05, DESIGN).decision == "changed"
    assert look([1.0] * 4, [1.02] * 4, 0.05, DESIGN).decision == "unchanged"  # exact, inside the threshold
    noisy = look([1.0, 1.3, 0.8, 1.1], [1.05, 0.9, 1.25, 1.0], 0.05, DESIGN)
    assert noisy.decision is None and noisy.ci[0] < -0.05 < 0.05 < noisy.ci[1]


def records(median: float, n: int, seed: int, spread: float = 0.01, status: str = "ok"):
    rng = np.random.default_rng(seed)
    case = synthetic_case(0)
    out = []
    for _ in range(n):
        process = median * float(np.exp(rng.normal(0, spread)))  # process-to-process noise
        out.append(synthetic_record(case, rng, compiled_median=process, eager_median=2 * process, spread=0.01,
                                    n=40, status=status))
    return out


def test_case_decision_on_records():
    config = ThresholdConfig()
    same = case_decision(records(1e-3, 4, 1), records(1e-3, 4, 2), config, DESIGN)
    assert same and "latency unchanged" in same
    slower = case_decision(records(1e-3, 4, 1), records(1.5e-3, 4, 2), config, DESIGN)
    assert slower and "latency changed +5" in slower
    assert case_decision(records(1e-3, 3, 1), records(1e-3, 3, 2), config, DESIGN) is None  # below the floor
    assert case_decision(records(1e-3, 8, 1), records(1e-3, 8, 2), config, DESIGN) is None  # the gate decides round 8
    failing = records(1e-3, 4, 2)
    failing[0].status = "failed"
    assert case_decision(records(1e-3, 4, 1), failing, config, DESIGN) is None  # a failure never stops early
    contended = records(1e-3, 4, 2)
    contended[1].metrics["contention"] = {"contended": True, "cpu_wait_fraction": 0.6, "threads": 2}
    assert case_decision(records(1e-3, 4, 1), contended, config, DESIGN) is None  # the gate cannot judge it either
    assert case_decision(records(1e-3, 4, 1, spread=0.2), records(1e-3, 4, 2, spread=0.2), config, DESIGN) is None


def test_a_changed_stop_waits_for_the_round_the_gates_test_can_confirm_at_its_alpha(tmp_path):
    """Under alpha 0.01 the gate's U test cannot confirm anything at 4 vs 4 (smallest p 2/70):
    a stop there would be judged `noisy`, a pass, where fixed rounds fail; at 5 vs 5 (2/252) it can."""
    from harness.analysis.sequential import smallest_u_p
    from harness.analysis.thresholds import load_thresholds

    assert smallest_u_p(4, 4) == pytest.approx(2 / 70) and smallest_u_p(5, 5) == pytest.approx(2 / 252)
    path = tmp_path / "t.toml"
    path.write_text("[defaults]\nalpha = 0.01\n")
    strict = load_thresholds(str(path))
    design = SequentialDesign(alpha=strict.alpha)
    rng = np.random.default_rng(4)
    base, head = ([synthetic_record(synthetic_case(0), rng, compiled_median=median * float(np.exp(rng.normal(0, 0.01))),
                                    eager_median=2e-3, spread=0.01, n=40) for _ in range(5)] for median in (1e-3, 1.5e-3))
    assert case_decision(base[:4], head[:4], strict, design) is None
    assert "latency changed" in case_decision(base, head, strict, design)
    assert "latency changed" in case_decision(base[:4], head[:4], ThresholdConfig(), DESIGN)  # alpha 0.05: at 4
    cmp = compare_runs([_run("b", [r]) for r in base], [_run("h", [r]) for r in head], strict)
    (latency,) = [m for m in cmp.cases[0].metrics if m.metric == "latency"]
    assert str(latency.verdict) == "regression"  # what the stop at 5 hands the gate: confirmed at alpha 0.01


def _run(run_id: str, recs):
    from harness.model.schema import Run
    from harness.testing.synthetic import SYNTHETIC_ENV

    return Run(run_id, "2026-01-01T00:00:00+00:00", run_id, dict(SYNTHETIC_ENV), {}, list(recs))


def test_a_metric_some_process_lacks_keeps_the_case_measuring():
    """One head process without valid latency samples: the gate would judge the others (and
    fall back to another test); the rule does not stop on the remaining metrics."""
    config = ThresholdConfig()
    base, head = records(1e-3, 4, 1), records(1.08e-3, 4, 2)
    for r in (*base, *head):
        r.metrics["compile_time_s"] = 2.0  # exact: decided on its own, as the other metrics would leave it
    assert "latency changed" in case_decision(base, head, config, DESIGN)  # complete: decided
    for samples in ([], [float("nan")] * 40):  # (latency falls back to eager samples: both go)
        head[3].compiled = head[3].compiled.with_fields(samples_s=samples)
        head[3].eager = head[3].eager.with_fields(samples_s=samples)
        assert case_decision(base, head, config, DESIGN) is None


def test_memory_counts_and_accuracy_are_part_of_the_decision():
    config = ThresholdConfig()
    base, head = records(1e-3, 4, 1), records(1e-3, 4, 2)
    assert "peak_memory unchanged" in case_decision(base, head, config, DESIGN)
    for r in head:
        r.compiled = r.compiled.with_fields(peak_memory_bytes=150 << 20)  # +50%: a memory regression, latency unchanged
    assert "peak_memory changed +50" in case_decision(base, head, config, DESIGN)
    head = records(1e-3, 4, 2)
    head[2].metrics["recompiles"] = 1  # one process recompiled: the gate takes the worst round
    assert case_decision(base, head, config, DESIGN) is None
    head = records(1e-3, 4, 2)
    head[0].metrics["accuracy"] = {"status": "fail"}
    assert case_decision(base, head, config, DESIGN) is None
    assert case_decision(base, head, config, DESIGN, metrics=["latency"]) is not None  # --metric latency: not gated
    for r in base:
        r.metrics["compile_peak_rss_bytes"] = 1 << 30
    both = records(1e-3, 4, 2)
    for r in both:
        r.metrics["compile_peak_rss_bytes"] = 1 << 30
    assert "compile_host_memory unchanged" in case_decision(base, both, config, DESIGN)


def test_compile_time_is_judged_on_the_same_seconds_on_both_sides_as_the_gate_does():
    """CPU seconds only when every process of both sides has them (compare's rule): a head
    process without them puts both sides on wall seconds, not one side on each."""
    rng = np.random.default_rng(3)
    case = synthetic_case(0)
    base = [synthetic_record(case, rng, compile_time=10.0, compile_cpu=2.0, compile_spread=0.001) for _ in range(4)]
    head = [synthetic_record(case, rng, compile_time=10.0, compile_cpu=2.0, compile_spread=0.001) for _ in range(4)]
    del head[1].metrics["compile_cpu_s"]
    decided = case_decision(base, head, ThresholdConfig(), DESIGN)
    assert decided and "compile_time unchanged" in decided


def test_the_rule_normalises_latency_only_when_the_gate_would(monkeypatch):
    import harness.analysis.sequential as sequential

    seen = []
    real = sequential.machine_probe

    def spy(base, head, thresholds, torch_differs=False):
        seen.append(torch_differs)
        return real(base, head, thresholds, torch_differs=torch_differs)

    monkeypatch.setattr(sequential, "machine_probe", spy)
    rule = stop_rule()
    rule(synthetic_case(0), records(1e-3, 4, 1), records(1e-3, 4, 2), 4, torch_differs=False)
    rule(synthetic_case(0), records(1e-3, 4, 1), records(1e-3, 4, 2), 4)
    assert seen == [False, True]  # told by ab from the two sides' environments; unknown: raw latency


def test_ab_round_loop_stops_decided_cases_and_the_gate_still_judges(tmp_path, monkeypatch):
    import harness.experiments.ab as ab
    from harness.run.runner import RunOptions

    rng = np.random.default_rng(5)

    def fake_worker(case, spec, timeout, python=None, extra_env=None, trace=None):
        slow = 1.5 if python == "head" and case.workload == "mlp-classic" else 1.0
        spread = 0.01 if case.workload == "mlp-classic" else 0.25  # mlp-deep: too noisy to decide early
        process = 1e-3 * slow * float(np.exp(rng.normal(0, spread)))
        return synthetic_record(case, rng, compiled_median=process, eager_median=2e-3, spread=0.01, n=40)

    monkeypatch.setattr(ab, "run_worker", fake_worker)
    run_opts = RunOptions(workloads=["mlp-classic", "mlp-deep"], scenarios=["forward"], compilers=["inductor"],
                          devices=["cpu"], sizes=["tiny"], out_dir=str(tmp_path))
    opts = ab.AbOptions(run_opts, "base", "head", rounds=8, stop_rule=stop_rule(), stop_design=DESIGN.describe())
    base, head, folder = ab.run_ab(opts, environments={"base": {}, "head": {}})
    per_case = {c: sum(1 for run in base for r in run.records if r.case.workload == c) for c in ("mlp-classic", "mlp-deep")}
    assert per_case == {"mlp-classic": 4, "mlp-deep": 8}
    stopped = base[-1].config["ab"]["stopped"]
    assert [v["after_rounds"] for v in stopped.values()] == [4] and "latency changed" in next(iter(stopped.values()))["why"]
    assert len(list((folder / "head").glob("round-*.json"))) == 8
    cmp = compare_runs(base, head)
    verdicts = {c.case_id.split("/")[0]: c.verdict for c in cmp.cases}
    assert str(verdicts["mlp-classic"]).startswith("regression")


@pytest.mark.parametrize("head_torch, differs", [("2.13.0", False), ("2.14.1", True)])
def test_ab_tells_the_rule_whether_the_sides_run_one_torch(tmp_path, monkeypatch, head_torch, differs):
    import harness.experiments.ab as ab
    from harness.run.runner import RunOptions

    rng = np.random.default_rng(7)
    monkeypatch.setattr(ab, "run_worker", lambda case, spec, timeout, **kw: synthetic_record(case, rng, n=20))
    told = []

    def rule(case, base, head, rounds, torch_differs=True):
        told.append(torch_differs)
        return None

    run_opts = RunOptions(workloads=["mlp-classic"], scenarios=["forward"], compilers=["inductor"], devices=["cpu"],
                          sizes=["tiny"], out_dir=str(tmp_path))
    envs = {"base": {"torch_version": "2.13.0"}, "head": {"torch_version": head_torch}}
    ab.run_ab(ab.AbOptions(run_opts, "a", "b", rounds=5, stop_rule=rule, stop_design=DESIGN.describe()), environments=envs)
    assert told and set(told) == {differs}


def test_ab_without_a_rule_runs_every_round(tmp_path, monkeypatch):
    import harness.experiments.ab as ab
    from harness.run.runner import RunOptions

    rng = np.random.default_rng(6)
    monkeypatch.setattr(ab, "run_worker", lambda case, spec, timeout, **kw: synthetic_record(case, rng, n=20))
    run_opts = RunOptions(workloads=["mlp-classic"], scenarios=["forward"], compilers=["inductor"], devices=["cpu"],
                          sizes=["tiny"], out_dir=str(tmp_path))
    base, head, _ = ab.run_ab(ab.AbOptions(run_opts, "a", "b", rounds=5), environments={"base": {}, "head": {}})
    assert [len(r.records) for r in base] == [1] * 5 and base[0].config["ab"]["stopped"] == {}


@pytest.mark.parametrize("flag, adaptive", [(["--adaptive"], True), ([], True), (["--no-adaptive"], False)])
def test_ab_cli_passes_the_rule_by_default_and_not_with_no_adaptive(monkeypatch, tmp_path, flag, adaptive):
    import sys

    import harness.experiments.ab as ab
    from harness.cli.main import main

    seen = {}

    def fake_run_ab(opts, progress=None, environments=None):
        seen["opts"] = opts
        raise KeyboardInterrupt  # stop before any process: the wiring is what is tested

    monkeypatch.setattr(ab, "run_ab", fake_run_ab)
    code = main(["ab", *flag, "--rounds", "6", "--base-python", sys.executable, "--head-python", sys.executable,
                 "-w", "mlp-classic", "--size", "tiny", "--out", str(tmp_path)])
    assert code == 130
    opts = seen["opts"]
    assert (opts.stop_rule is not None) is adaptive
    if adaptive:
        assert opts.stop_design["max_rounds"] == 6 and opts.stop_design["interim_alpha"] == 0.001
