"""The gate's own error rates on this machine: false failures in A/A, detection of known slowdowns.

    python benchmarks/gate_error_rates.py --setup separate --rounds 20 --json sep.json
    python benchmarks/gate_error_rates.py --setup separate --rounds 20 --workers 1 --calibrate 16
    python benchmarks/gate_error_rates.py --setup ab --ab-sessions 10 --ab-warm-cache --ab-parallel 2 --json ab.json
    python benchmarks/gate_error_rates.py --analyse DIR [DIR ...] [--noise noise.json]

Workload: benchmarks/gate_workloads.py's `gate-mlp-deep` (the smoke suite's deep MLP on 4
stacked batches), one OpenMP thread per worker, a short policy (0.5 s, 50 samples) so the
study fits in well under an hour on a loaded 2-core machine. Slowdowns are real extra work:
`COMPILEBENCH_GATE_EXTRA_WORK=f` (compiled code only: a compiler regression) and
`COMPILEBENCH_GATE_WHOLE_WORK=f` (eager and compiled: a torch or model change).

Setup "separate" (two runs, then `compilebench compare`): a chained A/A, as in
benchmarks/gate_proof.py. base_0, then each round r runs base_{r+1} and one head per arm
(compiled-only and whole-model at each --levels), two worker processes at a time. Each
comparison is decided by the real CLI, `compilebench compare base.json head.json --json-file F`,
and its exit code is the gate's answer: A/A base_r vs base_{r+1} (1 = false failure), arm
base_r vs head_r (1 = detected). The same pairs are also decided with the probe switched off
(`probe = "off"`), to show what the probe buys. All processes of this setup reuse one warm
Inductor cache (the study is about runtime; a cold compile costs ~10 s of a loaded core).

Cold compile time: the ab setup compiles cold in every process (ab's default); its A/A
sessions' processes give the A/A spread of compile wall seconds and CPU seconds.

Setup "ab": `compilebench ab --rounds R` sessions (interleaved processes, per-process
medians), through the real CLI in a subprocess: an A/A session and one per --ab-levels arm,
repeated --ab-sessions times. Exit code 1 = failed (A/A: false failure; arm: detected).

`--calibrate N` first runs N A/A processes of the same case and policy and decides every
pair with `compare --noise` on the band `compilebench noise --from-runs` makes of them (a
one-process change inside this machine's A/A band is `noisy`). `--ab-warm-cache` lets every
ab process compile on one shared cache (runtime metrics only; about half the wall time).

The script records the load average with every round: other processes on a shared machine
change what the gate sees, and CI runners are shared too.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.measure.environment import SHARED_CACHE_ENV  # noqa: E402
from harness.measure.timing import StopPolicy  # noqa: E402
from harness.model.schema import Run, save_run  # noqa: E402
from harness.run.runner import RunOptions, default_cache_root, make_spec, plan_cases, run_worker  # noqa: E402

WORKLOAD_FILE = str(ROOT / "benchmarks" / "gate_workloads.py")
WORKLOAD = "gate-mlp-deep"
KIND_ENV = {"compiled": "COMPILEBENCH_GATE_EXTRA_WORK", "whole": "COMPILEBENCH_GATE_WHOLE_WORK"}
POLICY = {"min_time_s": 0.5, "min_samples": 50, "warmup": 3, "max_time_s": 5.0}


def load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return math.nan


def arms(levels: list[float], kinds: list[str]) -> dict[str, dict[str, str]]:
    """arm name -> extra environment of its head processes."""
    return {f"{kind} +{level:.0%}": {KIND_ENV[kind]: str(level)} for kind in kinds for level in levels}


# ---------------------------------------------------------------- setup: separate runs + compare

class Separate:
    def __init__(self, out: Path) -> None:
        from harness.measure.environment import capture_environment

        self.out = out
        self.opts = RunOptions(workloads=[WORKLOAD], workload_files=[WORKLOAD_FILE], compilers=["inductor"],
                               devices=["cpu"], scenarios=["forward"], ingest=False)
        (self.case,), _ = plan_cases(self.opts)
        self.policy = {**StopPolicy().to_dict(), **POLICY}
        self.env = capture_environment(["cpu"])
        self.warm_cache = out / "warm-inductor-cache"

    def process(self, label: str, extra: dict[str, str], cold: bool) -> Path:
        spec = make_spec(self.case, self.opts, self.policy, str(default_cache_root() / "isa-probe"))
        env = {"OMP_NUM_THREADS": "1", **extra}
        if not cold:
            env["TORCHINDUCTOR_CACHE_DIR"] = str(self.warm_cache)
        record = run_worker(self.case, spec, 900.0, extra_env=env)
        now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        run = Run(label, now, label, self.env, {"suite": "gate-error-rates", "env": extra}, [record])
        return save_run(run, self.out / f"{label}.json")


# every metric the gate judges except cold compile time, which the separate setup cannot see
# (its processes share a warm cache) and which has its own A/A study (the ab setup)
RUNTIME_METRICS = ("speedup", "latency", "peak_memory", "graph_breaks", "recompiles", "accuracy")


def cli_compare(base: Path, head: Path, thresholds: Path | None = None, command: str = "compare",
                metrics: tuple[str, ...] = RUNTIME_METRICS, noise: Path | None = None) -> dict[str, Any]:
    """`compilebench compare BASE HEAD --json-file F` in this process: exit code and what it saw."""
    from harness.cli.main import main

    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = Path(tmp.name)
    argv = [command, str(base), str(head), "--json-file", str(out)]
    for m in metrics:
        argv += ["--metric", m]
    if thresholds:
        argv += ["--thresholds", str(thresholds)]
    if noise:
        argv += ["--noise", str(noise)]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    data = json.loads(out.read_text()) if out.exists() and out.stat().st_size else {}
    out.unlink(missing_ok=True)
    return {"exit": code, **summarize_comparison(data)}


def summarize_comparison(data: dict[str, Any]) -> dict[str, Any]:
    case = (data.get("cases") or [{}])[0]
    metrics = {m["metric"]: m for m in case.get("metrics", [])}
    lat = metrics.get("latency", {})
    ct = metrics.get("compile_time", {})
    return {"verdict": case.get("verdict"), "latency_verdict": lat.get("verdict"), "latency_change": lat.get("change"),
            "latency_raw_change": lat.get("raw_change"), "eager_change": case.get("eager_change"),
            "probe_change": case.get("probe_change"), "compile_verdict": ct.get("verdict"),
            "compile_change": ct.get("change"), "statuses": [case.get("status_base"), case.get("status_head")]}


def run_separate(rounds: int, arm_env: dict[str, dict[str, str]], out: Path, workers: int,
                 noise: Path | None = None) -> dict[str, Any]:
    s = Separate(out)
    no_probe = out / "no-probe.toml"
    no_probe.write_text('[defaults]\nprobe = "off"\n')
    started = time.monotonic()
    bases = [s.process("base-00", {}, cold=False)]
    rows_file = out / "separate-rows.jsonl"
    rows: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for r in range(rounds):
            load_before = load_average()
            jobs = {"A/A": pool.submit(s.process, f"base-{r + 1:02d}", {}, False)}
            jobs.update({arm: pool.submit(s.process, f"head-{arm.replace(' ', '').replace('%', '')}-{r:02d}", env, False)
                         for arm, env in arm_env.items()})
            files = {arm: job.result() for arm, job in jobs.items()}
            bases.append(files["A/A"])
            line = []
            for arm, head in files.items():
                with_probe = cli_compare(bases[r], head, noise=noise)
                without = cli_compare(bases[r], head, no_probe, noise=noise)
                rows.append({"round": r, "arm": arm, "load": load_before, "probe_on": with_probe, "probe_off": without})
                with rows_file.open("a") as fh:  # partial results survive an interrupted study
                    fh.write(json.dumps(rows[-1]) + "\n")
                mark = "FAIL" if with_probe["exit"] else "pass"
                line.append(f"{arm}: {mark} ({with_probe['verdict']}, lat {_pct(with_probe['latency_change'])}, "
                            f"eager {_pct(with_probe['eager_change'])}, probe {_pct(with_probe['probe_change'])})")
            print(f"round {r + 1}/{rounds} [{time.monotonic() - started:.0f}s, load {load_before:.1f}] " + "; ".join(line),
                  flush=True)
    return {"rows": rows, "wall_s": time.monotonic() - started, "policy": s.policy, "case": s.case.case_id}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def cold_compile_spread(files: list[Path]) -> dict[str, Any]:
    """A/A spread of cold compile wall seconds vs CPU seconds over processes of the same code."""
    import numpy as np

    from harness.model.schema import load_run

    wall, cpu = [], []
    for f in files:
        rec = load_run(f).records[0]
        if rec.status == "ok" and rec.metrics.get("compile_cpu_s"):
            wall.append(rec.metrics["compile_time_s"])
            cpu.append(rec.metrics["compile_cpu_s"])
    out: dict[str, Any] = {"n": len(wall)}
    for name, values in (("wall", wall), ("cpu", cpu)):
        if len(values) < 2:
            continue
        v = np.asarray(values)
        pairs = v[1:] / v[:-1] - 1.0  # consecutive processes as A/A pairs
        out[name] = {"median_s": float(np.median(v)), "cv": float(np.std(v, ddof=1) / np.mean(v)),
                     "max_abs_pair_change": float(np.max(np.abs(pairs))),
                     "pairs_beyond_15pct": int(np.sum(np.abs(pairs) >= 0.15)), "pairs": int(pairs.size)}
    return out


def calibrate(processes: int, out: Path) -> Path:
    """This machine's A/A band for the separate setup: `processes` more base processes (the
    study's own case, policy and environment, one at a time), then `compilebench noise
    --from-runs` over them. Independent of the study's pairs, so the band is not fitted to them."""
    from harness.cli.main import main as cli

    folder = out / "calibration"
    folder.mkdir(parents=True, exist_ok=True)
    s = Separate(folder)
    for i in range(processes):
        s.process(f"aa-{i:02d}", {}, cold=False)
        print(f"calibration process {i + 1}/{processes} [load {load_average():.1f}]", flush=True)
    noise = out / "noise.json"
    with contextlib.redirect_stdout(io.StringIO()):
        cli(["noise", "--from-runs", *map(str, sorted(folder.glob("aa-*.json"))), "-o", str(noise)])
    return noise


# ---------------------------------------------------------------- setup: compilebench ab

def run_ab_study(sessions: int, rounds: int, arm_env: dict[str, dict[str, str]], out: Path,
                 parallel: int = 1, warm_cache: bool = False) -> dict[str, Any]:
    """`sessions` ab sessions per arm (A/A included), `parallel` of them at a time (each
    session is itself sequential: one worker process at a time). `warm_cache`: every process
    compiles on one shared Inductor cache (runtime only; no cold compile spread then)."""
    started = time.monotonic()
    env_extra = {SHARED_CACHE_ENV: str(out / "warm-inductor-cache")} if warm_cache else {}
    common = ["--workload-file", WORKLOAD_FILE, "-w", WORKLOAD, "-c", "inductor", "--device", "cpu",
              "--scenario", "forward", "--rounds", str(rounds), "--min-time", str(POLICY["min_time_s"]),
              "--min-samples", str(POLICY["min_samples"]), "--out", str(out), "--base-python", sys.executable,
              "--head-python", sys.executable, "--base-env", "OMP_NUM_THREADS=1", "--head-env", "OMP_NUM_THREADS=1"]
    if warm_cache:  # warm compiles say nothing about cold compile time: judge the runtime metrics
        common += [arg for m in RUNTIME_METRICS for arg in ("--metric", m)]
    plan = [(i, arm, env) for i in range(sessions) for arm, env in {"A/A": {}, **arm_env}.items()]

    def one(i: int, arm: str, env: dict[str, str]) -> dict[str, Any]:
        load_before = load_average()
        out_json = out / f"ab-{i:02d}-{arm.replace(' ', '').replace('%', '').replace('/', '')}.json"
        # every round measured: gate_sequential.py --replay then decides each session both ways
        argv = [sys.executable, "-m", "harness", "ab", *common, "--no-adaptive", "--json-file", str(out_json)]
        for k, v in env.items():
            argv += ["--head-env", f"{k}={v}"]
        t0 = time.monotonic()
        proc = subprocess.run(argv, cwd=str(ROOT), capture_output=True, text=True, check=False,
                              env={**os.environ, **env_extra})
        data = json.loads(out_json.read_text()) if out_json.exists() else {}
        session_dir = next((line.split("ab session: ", 1)[1].split(" (", 1)[0]
                            for line in proc.stderr.splitlines() if line.startswith("ab session: ")), None)
        row = {"session": i, "arm": arm, "load": load_before, "exit": proc.returncode, "session_dir": session_dir,
               "wall_s": time.monotonic() - t0, **summarize_comparison(data)}
        if proc.returncode not in (0, 1):
            row["stderr"] = proc.stderr[-2000:]
        with (out / "ab-rows.jsonl").open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"ab session {i + 1}/{sessions} {arm}: exit {proc.returncode} ({row['verdict']}, lat "
              f"{_pct(row['latency_change'])}, eager {_pct(row['eager_change'])}, probe {_pct(row['probe_change'])}) "
              f"[{row['wall_s']:.0f}s, load {load_before:.1f}]", flush=True)
        return row

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        rows = list(pool.map(lambda item: one(*item), plan))
    aa_files = sorted(f for f in (out / "ab").rglob("round-*.json") if _is_aa_session(f))
    return {"rows": rows, "wall_s": time.monotonic() - started, "rounds": rounds, "warm_cache": warm_cache,
            "cold_compile": None if warm_cache else cold_compile_spread(aa_files)}


def _is_aa_session(run_file: Path) -> bool:
    """An ab session whose head had no slowdown variable: both sides ran the same code."""
    from harness.model.schema import load_run

    env = load_run(run_file).config.get("ab", {}).get("env", {})
    return not any(k in env for k in KIND_ENV.values())


# ---------------------------------------------------------------- analysis of saved run files

def analyse_separate(folder: Path, noise: Path | None = None) -> list[dict[str, Any]]:
    """Decide every pair of a separate-runs study again from its run files (so a changed
    compare can be re-judged on the same measurements): A/A base_r vs base_{r+1}, arms
    base_r vs head-<arm>-r."""
    no_probe = folder / "no-probe.toml"
    no_probe.write_text('[defaults]\nprobe = "off"\n')
    bases = sorted(folder.glob("base-*.json"))
    rows = []
    for r in range(len(bases) - 1):
        pairs = {"A/A": bases[r + 1]}
        for head in sorted(folder.glob(f"head-*-{r:02d}.json")):
            kind, level = head.name.split("-")[1].split("+")
            pairs[f"{kind} +{level}%"] = head
        for arm, head in pairs.items():
            rows.append({"round": r, "arm": arm, "probe_on": cli_compare(bases[r], head, noise=noise),
                         "probe_off": cli_compare(bases[r], head, no_probe, noise=noise)})
    return rows


def analyse_ab(folder: Path) -> list[dict[str, Any]]:
    """Decide every ab session again from its run files with the gate (`compilebench gate
    base/ head/`, what `ab` itself renders), runtime metrics only and all metrics."""
    rows = []
    for line in (folder / "ab-rows.jsonl").read_text().splitlines():
        row = json.loads(line)
        session = Path(row["session_dir"]) if row.get("session_dir") else None
        if session is None or not session.exists():
            continue
        runtime = cli_compare(session / "base", session / "head", command="gate")
        everything = cli_compare(session / "base", session / "head", command="gate", metrics=())
        rows.append({"session": row["session"], "arm": row["arm"], "load": row.get("load"), "runtime": runtime,
                     "all": everything})
    return rows


# ---------------------------------------------------------------- tables

def table(rows: list[dict[str, Any]], key: str | None) -> list[str]:
    """Markdown: per arm, how often the gate failed (A/A: false failures; arms: detected), over
    the pairs it decided (exit 0 or 1); pairs that errored (exit 2, a crash) are counted apart,
    never as passes."""
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_arm.setdefault(row["arm"], []).append(row[key] if key else row)
    lines = ["| arm | gate failed | rate | errors | verdicts | median latency change | median eager change |",
             "|---|--:|--:|--:|---|--:|--:|"]
    for arm, all_results in by_arm.items():
        results = [x for x in all_results if x.get("exit") in (0, 1)]
        errors = len(all_results) - len(results)
        failed = sum(1 for x in results if x.get("exit") == 1)
        verdicts: dict[str, int] = {}
        for x in results:
            verdicts[str(x.get("verdict"))] = verdicts.get(str(x.get("verdict")), 0) + 1
        lat = sorted(x["latency_change"] for x in results if x.get("latency_change") is not None)
        eag = sorted(x["eager_change"] for x in results if x.get("eager_change") is not None)
        rate = f"{failed / len(results):.0%}" if results else "-"
        lines.append(f"| {arm} | {failed}/{len(results)} | {rate} | {errors} | "
                     + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items(), key=lambda kv: -kv[1]))
                     + f" | {_pct(lat[len(lat) // 2] if lat else None)} | {_pct(eag[len(eag) // 2] if eag else None)} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--setup", choices=("separate", "ab", "both"), default="both")
    parser.add_argument("--rounds", type=int, default=20, help="separate setup: pairs per arm (and A/A pairs)")
    parser.add_argument("--levels", default="0.05,0.10,0.15", help="separate setup: slowdown fractions")
    parser.add_argument("--kinds", default="compiled,whole", help="compiled (compiled code only), whole (eager too)")
    parser.add_argument("--workers", type=int, default=2, help="separate setup: worker processes at a time")
    parser.add_argument("--ab-sessions", type=int, default=3, help="ab setup: sessions per arm")
    parser.add_argument("--ab-rounds", type=int, default=8, help="ab setup: --rounds of each session (ab's default)")
    parser.add_argument("--ab-levels", default="0.15", help="ab setup: slowdown fractions")
    parser.add_argument("--ab-parallel", type=int, default=1, help="ab setup: sessions at a time")
    parser.add_argument("--ab-warm-cache", action="store_true", help="ab setup: all processes compile on one shared "
                        "Inductor cache (about half the wall time; runtime metrics only, no cold compile spread)")
    parser.add_argument("--out", default=str(ROOT / "results" / "gate-error-rates"), help="run files go here")
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--noise", metavar="FILE", help="separate setup: decide with `compare --noise FILE` "
                        "(changes inside this machine's A/A band are noisy)")
    parser.add_argument("--calibrate", type=int, metavar="N", help="separate setup: first run N A/A processes and "
                        "decide with the noise file made from them (`compilebench noise --from-runs`)")
    parser.add_argument("--analyse", metavar="DIR", nargs="+", help="only decide again the saved runs of the "
                        "studies in DIR... (their separate-rows.jsonl / ab-rows.jsonl folders; several folders "
                        "are pooled into one table) and print the tables")
    args = parser.parse_args()
    if args.analyse:
        return analyse([Path(d) for d in args.analyse], Path(args.noise) if args.noise else None)
    kinds = [k for k in args.kinds.split(",") if k]
    out = Path(args.out) / _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {os.cpu_count()} CPUs, load average {load_average():.1f}; run files in {out}", flush=True)
    results: dict[str, Any] = {"policy": POLICY, "workload": WORKLOAD, "cpus": os.cpu_count()}
    if args.setup in ("separate", "both"):
        levels = [float(x) for x in args.levels.split(",") if x]
        noise = Path(args.noise) if args.noise else None
        if args.calibrate:
            noise = calibrate(args.calibrate, out)
            results["noise_file"] = str(noise)
        sep = run_separate(args.rounds, arms(levels, kinds), out, args.workers, noise)
        results["separate"] = sep
        loads = [r["load"] for r in sep["rows"]]
        print(f"\n## separate runs + compilebench compare ({args.rounds} pairs per arm, {sep['wall_s'] / 60:.0f} min, "
              f"load average {min(loads):.1f}-{max(loads):.1f})\n")
        print("\n".join(table(sep["rows"], "probe_on")))
        print("\nsame pairs, probe switched off (probe = \"off\"):\n")
        print("\n".join(table(sep["rows"], "probe_off")))
    if args.setup in ("ab", "both"):
        levels = [float(x) for x in args.ab_levels.split(",") if x]
        ab = run_ab_study(args.ab_sessions, args.ab_rounds, arms(levels, kinds), out, args.ab_parallel,
                          args.ab_warm_cache)
        results["ab"] = ab
        loads = [r["load"] for r in ab["rows"]]
        print(f"\n## compilebench ab --rounds {args.ab_rounds} ({args.ab_sessions} sessions per arm, "
              f"{ab['wall_s'] / 60:.0f} min, load average {min(loads):.1f}-{max(loads):.1f})\n")
        print("\n".join(table(ab["rows"], None)))
        if ab["cold_compile"] is not None:
            print(f"\ncold compile A/A (ab A/A session processes, cold cache each): {json.dumps(ab['cold_compile'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


def analyse(folders: list[Path], noise: Path | None = None) -> int:
    """Decide every saved pair again and print one table per setup, pooled over `folders`."""
    names = ", ".join(map(str, folders))
    sep_folders = [f for f in folders if (f / "separate-rows.jsonl").exists() or list(f.glob("base-*.json"))]
    if sep_folders:
        rows = [row for f in sep_folders for row in analyse_separate(f, noise)]
        loads = [json.loads(x)["load"] for f in sep_folders if (f / "separate-rows.jsonl").exists()
                 for x in (f / "separate-rows.jsonl").read_text().splitlines()]
        print(f"## separate runs + compilebench compare ({names}{'; --noise ' + str(noise) if noise else ''}; load "
              f"average {min(loads, default=math.nan):.1f}-{max(loads, default=math.nan):.1f}), runtime metrics\n")
        print("\n".join(table(rows, "probe_on")))
        print("\nsame pairs, probe switched off (probe = \"off\"):\n")
        print("\n".join(table(rows, "probe_off")))
    ab_folders = [f for f in folders if (f / "ab-rows.jsonl").exists()]
    if ab_folders:
        rows = [row for f in ab_folders for row in analyse_ab(f)]
        print(f"\n## compilebench ab ({names}), gate on runtime metrics\n")
        print("\n".join(table(rows, "runtime")))
        print("\nsame sessions, every metric (cold compile time included):\n")
        print("\n".join(table(rows, "all")))
        saved = [json.loads(x) for f in ab_folders for x in (f / "ab-rows.jsonl").read_text().splitlines()]
        aa = [Path(r["session_dir"]) for r in saved if r["arm"] == "A/A" and r.get("session_dir")]
        files = sorted(f for d in aa for f in d.rglob("round-*.json"))
        print(f"\ncold compile A/A ({len(files)} processes of A/A sessions): {json.dumps(cold_compile_spread(files))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
