"""Target: at least 90 of the 104 models of the `hf` and `timm` lists build and run eager on CPU
at tiny size.

    python benchmarks/breadth_cpu.py [--suite hf-tiny --suite timm-tiny:forward] [--scenario forward] [--out DIR]

Runs each suite through the real runner, one fresh worker per case, exactly as a user would:
`python -m harness run --suite S -c eager --no-ingest --out DIR/S`, then reads the run file and
prints, per suite, how many models passed (every case of the model `ok`), the time per model
(the workers' wall time over the model's cases), and every model that did not pass with its
status and reason (a skip names why; nothing may crash). Writes DIR/breadth_cpu.json. Exit 1
when fewer than --target models passed over all suites.

timm needs a torchvision that matches the torch build (the vision extra); run the script with
a python that has both, e.g. `--python /path/to/venv/bin/python`.
"""

from __future__ import annotations

import argparse
import json
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
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def summarise(run_file: Path) -> dict[str, Any]:
    """Per model: its cases' statuses and wall time; which models passed; why the rest did not."""
    run = load_run(run_file)
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
    return {
        "run_file": str(run_file),
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


def print_summary(suite: str, summary: dict[str, Any], wall: float) -> None:
    rate = 100.0 * summary["passed"] / summary["models"] if summary["models"] else 0.0
    print(f"\n== {suite}: {summary['passed']}/{summary['models']} models passed ({rate:.0f}%), "
          f"{summary['cases']} cases {summary['case_statuses']}; wall {wall:.0f}s, per model mean "
          f"{summary['seconds_per_model_mean']}s median {summary['seconds_per_model_median']}s")
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
    args = parser.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="breadth-cpu-"))
    results: dict[str, Any] = {}
    for spec in args.suite or DEFAULT_SUITES:
        suite, _, only = spec.partition(":")
        scenarios = [s for s in only.split(",") if s] or args.scenario
        suite_out = out / suite
        suite_out.mkdir(parents=True, exist_ok=True)
        run_file, wall = run_suite(args.python, suite, suite_out, scenarios, args.timeout)
        summary = summarise(run_file)
        summary["wall_s"] = round(wall, 1)
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
