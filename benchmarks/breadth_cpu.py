"""Target: at least 90 of the 104 models of the `hf` and `timm` lists build and run eager on CPU
at tiny size.

    python benchmarks/breadth_cpu.py [--suite hf-tiny --suite timm-tiny:forward] [--scenario forward] [--out DIR]
    python benchmarks/breadth_cpu.py --analyse HF_RUN.json --analyse TIMM_RUN.json   # pool runs made apart

Runs each suite through the real runner, one fresh worker per case, exactly as a user would:
`python -m harness run --suite S -c eager --no-ingest --out DIR/S`, then reads the run file and
prints, per suite, how many models passed (every case of the model `ok`), the time per model
(the workers' wall time over the model's cases), and every model that did not pass with its
status and reason (a skip names why; nothing may crash). Writes DIR/breadth_cpu.json. Exit 1
when fewer than --target models passed over all suites.

timm needs a torchvision that matches the torch build (the vision extra); run the script with
a python that has both, e.g. `--python /path/to/venv/bin/python`. Suites run by different
pythons (hf-tiny on the CI's torch, timm-tiny on a vision venv) are pooled with --analyse,
which reads the run files and prints the same summary without running anything. Each
suite's summary names the torch and model-library versions its run had and the 1-minute
load average before and after it (the box is shared: worker wall times inflate with load).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.model.schema import load_run  # noqa: E402

DEFAULT_SUITES = ("hf-tiny", "timm-tiny")
VERSION_PACKAGES = ("transformers", "timm", "torchvision", "diffusers")


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def run_suite(python: str, suite: str, out: Path, scenarios: list[str], timeout: float | None) -> tuple[Path, float]:
    """One `harness run` of the suite in eager; returns (run file, wall seconds)."""
    cmd = [python, "-m", "harness", "run", "--suite", suite, "-c", "eager", "--no-ingest", "--out", str(out)]
    for sc in scenarios:
        cmd += ["--scenario", sc]
    if timeout:
        cmd += ["--timeout", str(timeout)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - started
    (out / f"run-{suite}.log").write_text(proc.stdout)
    runs = sorted((out / "runs").glob("*.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise SystemExit(f"{suite}: the run wrote no run file (exit {proc.returncode}); see {out}/run-{suite}.log")
    return runs[-1], wall


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def summarise(run_file: Path) -> dict[str, Any]:
    """Per model: its cases' statuses and wall time; which models passed; why the rest did not."""
    run = load_run(run_file)
    env = run.environment
    models: dict[str, dict[str, Any]] = defaultdict(lambda: {"statuses": {}, "wall_s": 0.0, "reasons": []})
    for record in run.records:
        entry = models[record.case.workload]
        entry["statuses"][record.case.scenario] = record.status
        entry["wall_s"] += float((record.worker or {}).get("wall_s") or 0.0)
        if record.status != "ok" and record.error is not None:
            message = (record.error.message or "").strip().splitlines()
            entry["reasons"].append(f"{record.case.scenario}: {record.status} {record.error.type}: "
                                    f"{message[0][:160] if message else ''}")
    passed = sorted(name for name, e in models.items() if all(s == "ok" for s in e["statuses"].values()))
    times = [e["wall_s"] for e in models.values()]
    suites = sorted({r.case.suite for r in run.records if r.case.suite})
    return {
        "run_file": str(run_file),
        "suite": suites[0] if len(suites) == 1 else ",".join(suites),
        "versions": {"torch": env.get("torch_version"),
                     **{k: v for k, v in (env.get("packages") or {}).items() if k in VERSION_PACKAGES and v}},
        "models": len(models),
        "passed": len(passed),
        "cases": len(run.records),
        "case_statuses": dict(sorted(_count(r.status for r in run.records).items())),
        "seconds_per_model_mean": round(statistics.fmean(times), 1) if times else None,
        "seconds_per_model_median": round(statistics.median(times), 1) if times else None,
        "not_passed": {name: {"statuses": e["statuses"], "reasons": e["reasons"]}
                       for name, e in sorted(models.items()) if name not in passed},
        "per_model_s": {name: round(e["wall_s"], 1) for name, e in sorted(models.items())},
    }


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for v in values:
        out[v] += 1
    return out


def print_summary(suite: str, summary: dict[str, Any], wall: float | None) -> None:
    rate = 100.0 * summary["passed"] / summary["models"] if summary["models"] else 0.0
    wall_text = f"wall {wall:.0f}s, " if wall is not None else ""
    print(f"\n== {suite}: {summary['passed']}/{summary['models']} models passed ({rate:.0f}%), "
          f"{summary['cases']} cases {summary['case_statuses']}; {wall_text}per model mean "
          f"{summary['seconds_per_model_mean']}s median {summary['seconds_per_model_median']}s")
    slowest = sorted(summary["per_model_s"].items(), key=lambda kv: -kv[1])[:3]
    print(f"   slowest: {', '.join(f'{name} {s}s' for name, s in slowest)}")
    print(f"   versions {summary['versions']}" + (f"; load average {summary['load_before']} before, "
                                                   f"{summary['load_after']} after" if "load_before" in summary else ""))
    print(f"   run file {summary['run_file']}")
    for name, info in summary["not_passed"].items():
        print(f"   NOT PASSED {name} {info['statuses']}")
        for reason in info["reasons"]:
            print(f"      {reason}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", action="append", metavar="NAME[:SCENARIO,...]",
                        help=f"suite to run, optionally only some scenarios (repeatable; default {', '.join(DEFAULT_SUITES)})")
    parser.add_argument("--scenario", action="append", default=[],
                        help="only these scenarios in every suite (default: all of each model)")
    parser.add_argument("--python", default=sys.executable, help="python that runs the harness (default: this one)")
    parser.add_argument("--out", default=None, help="results folder (default: a temporary folder)")
    parser.add_argument("--timeout", type=float, default=None, help="per-case timeout (default: the suite's)")
    parser.add_argument("--target", type=int, default=90, help="models that must pass over all suites (default 90)")
    parser.add_argument("--analyse", action="append", default=[], metavar="RUN.json",
                        help="summarise these run files (one suite each) instead of running")
    args = parser.parse_args(argv)
    if args.analyse:
        missing = [a for a in args.analyse if not Path(a).is_file()]
        if missing:
            print(f"breadth_cpu: no such run file {', '.join(missing)}; pass OUT/SUITE/runs/<run id>.json",
                  file=sys.stderr)
            return 2
    out = Path(args.out or tempfile.mkdtemp(prefix="breadth-cpu-"))
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for run_file in map(Path, args.analyse):
        summary = summarise(run_file)
        results[summary["suite"]] = summary
        print_summary(summary["suite"], summary, None)
    for spec in [] if args.analyse else (args.suite or DEFAULT_SUITES):
        suite, _, only = spec.partition(":")
        scenarios = [s for s in only.split(",") if s] or args.scenario
        suite_out = out / suite
        suite_out.mkdir(parents=True, exist_ok=True)
        load_before = load_average()
        run_file, wall = run_suite(args.python, suite, suite_out, scenarios, args.timeout)
        summary = summarise(run_file)
        summary.update(wall_s=round(wall, 1), load_before=load_before, load_after=load_average())
        summary["scenarios"] = scenarios or "all"
        results[suite] = summary
        print_summary(suite, summary, wall)
    passed = sum(s["passed"] for s in results.values())
    total = sum(s["models"] for s in results.values())
    verdict = "MET" if passed >= args.target else "MISSED"
    print(f"\n{passed}/{total} models built and ran eager (target {args.target}): {verdict}")
    (out / "breadth_cpu.json").write_text(json.dumps({"suites": results, "passed": passed, "models": total,
                                                      "target": args.target}, indent=1))
    print(f"summary: {out / 'breadth_cpu.json'}")
    return 0 if passed >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
