"""What a finished bisect prints: the `first bad: NAME` line, the evidence, issue markdown."""

from __future__ import annotations

from typing import Any

from harness.report.display import fmt_bytes, fmt_seconds

UNIT_NOTES = ("raw samples", "per-process medians")  # what compare tested on: no news for a reader


def fmt_value(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    if metric in ("latency", "compile_time"):
        return fmt_seconds(value)
    if metric == "speedup":
        return f"{value:.3f}x"
    if metric == "peak_memory":
        return fmt_bytes(int(value))
    return f"{value:g}"


def side_text(metric: str, side: dict[str, Any] | None) -> str:
    """'1.23 ms [1.20 ms, 1.26 ms] (n=40, 1 process)'."""
    if not side:
        return "-"
    if metric == "status":
        return f"status {side.get('status')} ({side.get('processes')} process(es))"
    ci = side.get("ci")
    ci_text = f" [{fmt_value(metric, ci[0])}, {fmt_value(metric, ci[1])}]" if ci else " (no CI: one value)"
    return (f"{fmt_value(metric, side.get('value'))}{ci_text} (n={side.get('n', 0)}, "
            f"{side.get('processes')} process(es), status {side.get('status')})")


def _env_line(env: dict[str, Any]) -> str:
    packages = env.get("packages") or {}
    extra = ", ".join(f"{k} {v}" for k, v in packages.items() if v and k in ("triton", "transformers", "diffusers"))
    return f"`{env['name']}`: torch {packages.get('torch') or '?'}{', ' + extra if extra else ''} ({env.get('spec', '')})"


def summary_lines(state: dict[str, Any]) -> list[str]:
    """The terminal summary: `first bad: NAME` first (scripts grep it), then the evidence."""
    result, key = state["result"], state["key"]
    metric = key["metric"]
    head = f"{result['measurements']} measurement(s) over {result['envs']} envs, {result['probes']} probe(s)"
    if not result.get("found"):
        return [f"no first bad env: {result['message']}", head]
    bad = result["bad_step"]
    good_name = result["good_neighbour"]
    lines = [f"first bad: {result['first_bad']}",
             f"good neighbour: {good_name}" + (" (the reference)" if result["good_index"] == 0 else ""),
             f"case {key['case']}, metric {metric}" + (f", threshold {key['threshold']:g}" if key.get("threshold")
                                                       is not None else "") + f", direction {key['direction']}",
             f"  reference {state['envs'][0]['name']}: {side_text(metric, bad['reference'])}",
             f"  first bad {result['first_bad']}: {side_text(metric, bad['candidate'])}"]
    good = result.get("good_step")
    if good:
        lines.append(f"  good neighbour {good_name}: {side_text(metric, good['candidate'])}")
    lines.append("  verdict " + verdict_text(bad))
    lines.append(head)
    return lines


def verdict_text(step: dict[str, Any]) -> str:
    parts = [f"{step['verdict']} (compare: {step.get('compare_verdict', '-')})"]
    if step.get("change") is not None:
        metric = step.get("metric", "")
        parts.append(f"change {step['change']:+g}" if metric in ("graph_breaks", "recompiles")
                     else f"change {step['change']:+.1%}")
    if step.get("ratio_ci"):
        lo, hi = step["ratio_ci"]
        parts.append(f"ratio CI [{lo:.3f}, {hi:.3f}]")
    if step.get("p_value") is not None:
        parts.append(f"p={step['p_value']:.2g}")
    if step.get("noisy"):
        parts.append(f"NOISY after {step.get('repeats')} repeat(s): decided by the point estimate")
    elif step.get("repeats"):
        parts.append(f"{step['repeats']} repeat(s) for a noisy verdict")
    return ", ".join(parts)


def issue_markdown(state: dict[str, Any]) -> str:
    """Markdown ready to paste into an issue."""
    result, key, envs = state["result"], state["key"], state["envs"]
    metric = key["metric"]
    if not result.get("found"):
        return f"### compilebench bisect: no regression found\n\n{result['message']}\n"
    bad, good = result["bad_step"], result.get("good_step")
    by_name = {e["name"]: e for e in envs}
    rows = [("reference (good)", envs[0]["name"], bad["reference"])]
    if good:
        rows.append(("good neighbour", result["good_neighbour"], good["candidate"]))
    rows.append(("first bad", result["first_bad"], bad["candidate"]))
    lines = [f"### {metric} {'regression' if key['direction'] == 'worse' else 'change'} in `{key['case']}` "
             f"between {_torch(by_name[result['good_neighbour']])} and {_torch(by_name[result['first_bad']])}", "",
             f"`compilebench bisect` over {len(envs)} environments ({result['measurements']} measurements): "
             f"**first bad: `{result['first_bad']}`**, good neighbour `{result['good_neighbour']}`.", "",
             f"| role | env | {metric} [95% CI] | n | processes | status |", "|---|---|---|---|---|---|"]
    for role, name, side in rows:
        ci = side.get("ci")
        value = fmt_value(metric, side.get("value")) + (f" [{fmt_value(metric, ci[0])}, {fmt_value(metric, ci[1])}]"
                                                        if ci else "")
        lines.append(f"| {role} | `{name}` | {value if metric != 'status' else '-'} | {side.get('n', '-')} | "
                     f"{side.get('processes')} | {side.get('status')} |")
    lines += ["", f"Verdict: {verdict_text(bad)}.", "", "Environments:", ""]
    lines += [f"- {_env_line(e)}" for e in envs]
    if bad.get("note") and bad["note"] not in UNIT_NOTES:
        lines += ["", f"Note: {bad['note']}"]
    return "\n".join(lines) + "\n"


def _torch(env: dict[str, Any]) -> str:
    return f"torch {(env.get('packages') or {}).get('torch') or env['name']}"
