"""Gate thresholds: how big a change must be, per metric, before compare calls it a regression.

Defaults follow what compiler CI can actually resolve: speedup and latency 5%, cold compile
time 15% (one sample per process, noisier), peak memory 10%, graph breaks and recompiles any
increase (they are deterministic), accuracy pass -> fail and status ok -> anything else.
Host memory during compile (`compile_host_memory`, the worker's peak RSS while compiling)
follows `peak_memory` wherever it is not set itself.

Overrides come from a TOML file, most specific first: `[case."<case_id>"]`, then
`[workload.<name>]`, then `[suite.<name>]`, then `[defaults]`:

    [defaults]
    latency = "5%"          # a percentage string or a fraction (0.05)
    alpha = 0.05            # significance level of the statistical tests

    [suite.smoke]
    compile_time = "25%"

    [workload.mlp-deep]
    latency = "8%"
    peak_memory = "off"     # do not gate this metric for this workload

    [case."mlp-deep/forward/inductor/cpu/float32/bs64/tiny"]
    graph_breaks = 2        # counts: the increase allowed before it is a regression

Two keys are about attribution, not size (docs/GATING.md, "Machine drift and whole-model
changes"): `probe = "3%"` is how far the machine-speed probe must move before a one-process
compare normalises latency by it ("off": never use the probe), and `whole_model = "warn"`
makes `slower (eager too)` verdicts warn-only, for gates that judge the compiler alone
(default "fail": a torch or model change that slows eager too is a real regression).
Three more say what the gate does with a case it could not compare: `missing = "warn"` (a
case measured in base and not in head; default "fail": a model that stopped running is a
failure, as HUD counts it), `contended = "warn"` (the machine was contended while the
case was timed; default "cannot-judge": the gate exits 3, it neither passes nor fails) and
`still_failing = "fail"` (a case that failed in base and fails in head; default "pass": a
failure that was there before is not this change's regression; "fail" for a gate that wants
every case green, e.g. `[suite.smoke]`). The CLI flags `--whole-model`, `--missing`,
`--contended` and `--still-failing` beat every layer of the file.

A malformed file is refused with one line naming the file and the key (exit 2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.model.errors import UserError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

# metric -> default threshold; relative metrics are fractions, count metrics are the
# increase allowed (0: any increase regresses)
RELATIVE_METRICS: dict[str, float] = {
    "speedup": 0.05,
    "latency": 0.05,
    "compile_time": 0.15,
    "peak_memory": 0.10,
    "compile_host_memory": 0.10,
}
# a metric without a threshold of its own in any section uses another's: host memory during
# compile is memory, so `peak_memory = "20%"` (or "off") covers it unless it is set itself
FALLBACKS: dict[str, str] = {"compile_host_memory": "peak_memory"}
COUNT_METRICS: dict[str, int] = {"graph_breaks": 0, "recompiles": 0}
# gated exactly, no threshold to tune (listed so a config can switch them off)
EXACT_METRICS = ("status", "accuracy")
DEFAULT_ALPHA = 0.05
# the probe must move this much before a one-process-per-side compare normalises by it:
# below, its own process-to-process spread (about 1-2% here) would leak into steady compares
DEFAULT_PROBE_MOVED = 0.03
WHOLE_MODEL_FAIL, WHOLE_MODEL_WARN = "fail", "warn"
MISSING_FAIL, MISSING_WARN = "fail", "warn"
CONTENDED_CANNOT_JUDGE, CONTENDED_WARN = "cannot-judge", "warn"
STILL_FAILING_PASS, STILL_FAILING_FAIL = "pass", "fail"
# policy key -> its values, the default first: what the gate does with a kind of case
POLICIES: dict[str, tuple[str, ...]] = {
    "whole_model": (WHOLE_MODEL_FAIL, WHOLE_MODEL_WARN),
    "missing": (MISSING_FAIL, MISSING_WARN),
    "contended": (CONTENDED_CANNOT_JUDGE, CONTENDED_WARN),
    "still_failing": (STILL_FAILING_PASS, STILL_FAILING_FAIL),
}
SETTINGS = ("alpha", *POLICIES)  # per-layer settings that are not metric thresholds
SECTIONS = ("defaults", "suite", "workload", "case")
OFF = None  # a metric switched off


class ThresholdConfigError(UserError, ValueError):
    """A thresholds file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Thresholds:
    """Resolved thresholds for one case: metric -> fraction / count / None (off)."""

    values: Mapping[str, float | int | None]
    alpha: float = DEFAULT_ALPHA
    whole_model: str = WHOLE_MODEL_FAIL  # "warn": slower (eager too) does not fail the gate
    missing: str = MISSING_FAIL  # "warn": a case missing in head does not fail the gate
    contended: str = CONTENDED_CANNOT_JUDGE  # "warn": a contended case does not stop the gate (exit 3)
    still_failing: str = STILL_FAILING_PASS  # "fail": a case failing in base and head fails the gate

    def get(self, metric: str) -> float | int | None:
        return self.values.get(metric)

    def enabled(self, metric: str) -> bool:
        return metric not in self.values or self.values[metric] is not OFF


def default_values() -> dict[str, float | int | None]:
    values: dict[str, float | int | None] = {**RELATIVE_METRICS, **COUNT_METRICS}
    values.update({m: 0 for m in EXACT_METRICS})
    values["probe"] = DEFAULT_PROBE_MOVED
    return values


@dataclass
class ThresholdConfig:
    """Defaults plus per-suite / per-workload / per-case overrides."""

    defaults: dict[str, Any] = field(default_factory=default_values)
    alpha: float = DEFAULT_ALPHA
    suites: dict[str, dict[str, Any]] = field(default_factory=dict)
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = "<defaults>"
    explicit_defaults: set[str] = field(default_factory=set)  # metrics the [defaults] table set itself
    whole_model: str = WHOLE_MODEL_FAIL
    whole_model_override: str | None = None  # --whole-model: beats every layer of the file
    # the [defaults] table's missing / contended / still_failing policies (whole_model has its own field)
    policies: dict[str, str] = field(default_factory=dict)
    # --missing / --contended / --still-failing (and --whole-model, also kept above): beat every layer of the file
    policy_overrides: dict[str, str] = field(default_factory=dict)

    def for_case(self, case_id: str, workload: str = "", suite: str = "") -> Thresholds:
        values = dict(self.defaults)
        alpha = self.alpha
        policies = {name: choices[0] for name, choices in POLICIES.items()}
        policies.update(self.policies)
        policies["whole_model"] = self.whole_model
        layers = [self.suites.get(str(suite)), self.workloads.get(str(workload)), self.cases.get(str(case_id))]
        explicit = set(self.explicit_defaults)
        for layer in layers:
            if layer:
                alpha = layer.get("alpha", alpha)
                policies.update({k: v for k, v in layer.items() if k in POLICIES})
                values.update({k: v for k, v in layer.items() if k not in SETTINGS})
                explicit.update(layer)
        for metric, source in FALLBACKS.items():
            if metric not in explicit:
                values[metric] = values.get(source)
        policies.update({k: v for k, v in self.policy_overrides.items() if v})
        if self.whole_model_override:
            policies["whole_model"] = self.whole_model_override
        return Thresholds(values, alpha, **policies)


def parse_value(metric: str, raw: Any, where: str) -> float | int | None:
    """One threshold value -> fraction (relative metrics), count, or None (off)."""
    if raw is False or (isinstance(raw, str) and raw.strip().lower() == "off"):
        return OFF
    if metric in RELATIVE_METRICS or metric == "probe":
        return _fraction(raw, where)
    if metric in COUNT_METRICS:
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise ThresholdConfigError(f"{where}: {raw!r} is not a count; use an integer >= 0 (0: any increase) or 'off'")
        return raw
    if metric in EXACT_METRICS:
        if raw is True or raw == "on":
            return 0
        raise ThresholdConfigError(f"{where}: {metric} is gated exactly; the only values are 'on' or 'off'")
    raise ThresholdConfigError(f"{where}: unknown metric {metric!r}; known: {', '.join(known_keys())}")


def _fraction(raw: Any, where: str) -> float:
    value: float | None = None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        value = float(raw)
    elif isinstance(raw, str) and raw.strip().endswith("%"):
        try:
            value = float(raw.strip()[:-1]) / 100.0
        except ValueError:
            value = None
    if value is None or not math.isfinite(value) or value < 0 or value >= 10:
        raise ThresholdConfigError(f"{where}: {raw!r} is not a threshold; use a percentage like '5%' or a fraction like 0.05")
    return value


def _alpha(raw: Any, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 < raw < 0.5:
        raise ThresholdConfigError(f"{where}: {raw!r} is not a significance level; use a number in (0, 0.5), e.g. 0.05")
    return float(raw)


def whole_model_policy(raw: Any, where: str) -> str:
    """'fail' or 'warn' (what a whole-model change does to the gate)."""
    return policy("whole_model", raw, where)


def policy(name: str, raw: Any, where: str) -> str:
    """One of POLICIES[name]'s values (what a kind of case does to the gate)."""
    choices = POLICIES[name]
    if raw in choices:
        return str(raw)
    listed = " or ".join(f'"{c}"' + (" (default)" if i == 0 else "") for i, c in enumerate(choices))
    raise ThresholdConfigError(f"{where}: {raw!r} is not a {name.replace('_', '-')} policy; use {listed}")


def known_keys() -> list[str]:
    return [*RELATIVE_METRICS, *COUNT_METRICS, *EXACT_METRICS, "probe", *SETTINGS]


def _parse_table(table: Any, where: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ThresholdConfigError(f"{where}: expected a table of metric = threshold, got {type(table).__name__}")
    out: dict[str, Any] = {}
    for key, raw in table.items():
        if key == "alpha":
            out["alpha"] = _alpha(raw, f"{where}.alpha")
        elif key in POLICIES:
            out[key] = policy(key, raw, f"{where}.{key}")
        else:
            out[key] = parse_value(key, raw, f"{where}.{key}")
    return out


def load_thresholds(path: str | Path | None) -> ThresholdConfig:
    """Read a thresholds TOML file (None: the defaults)."""
    if path is None:
        return ThresholdConfig()
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ThresholdConfigError(f"{path}: no such thresholds file; pass an existing .toml file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ThresholdConfigError(f"{path}: cannot be read ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ThresholdConfigError(f"{path}: invalid TOML: {exc}") from None
    return config_from_dict(data, str(path))


def config_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> ThresholdConfig:
    unknown = [k for k in data if k not in SECTIONS]
    if unknown:
        raise ThresholdConfigError(f"{source}: unknown section [{unknown[0]}]; sections are {', '.join(SECTIONS)}")
    config = ThresholdConfig(source=source)
    defaults = _parse_table(data.get("defaults", {}), f"{source}: defaults")
    config.alpha = defaults.pop("alpha", config.alpha)
    config.whole_model = defaults.pop("whole_model", config.whole_model)
    config.policies = {k: defaults.pop(k) for k in list(defaults) if k in POLICIES}
    config.defaults.update(defaults)
    config.explicit_defaults = set(defaults)
    for section, target in (("suite", config.suites), ("workload", config.workloads), ("case", config.cases)):
        tables = data.get(section, {})
        if not isinstance(tables, dict):
            raise ThresholdConfigError(f"{source}: [{section}] must hold named tables, e.g. [{section}.NAME]")
        for name, table in tables.items():
            target[name] = _parse_table(table, f"{source}: {section}.{name}")
    return config
