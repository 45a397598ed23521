"""`compilebench versions`: the same suite under N environments, one run file per env.

`compilebench versions --suite smoke --env torch==2.11.0 --env torch==2.12.1 --env
torch==2.13.0` resolves every env first (building cached venvs, harness.experiments.envs),
then runs the suite once per env, in the order given (oldest first: the report compares
each env with the one before it). Each env's run is an ordinary run file, ingested into
the history store like any nightly; its `environment` is captured inside that env (torch,
triton, transformers, diffusers versions) and names the env under `environment.env`.

A sweep manifest (<out>/versions/<sweep_id>.json) lists the runs in env order, so
`compilebench versions --from-manifest FILE` re-renders the report without measuring.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.experiments.ab import probe_environment
from harness.experiments.envs import Env
from harness.model.jsonfile import read_json
from harness.model.schema import Run, RunFileError, load_run, write_json_atomic
from harness.run.runner import ProgressFn, RunOptions, execute, new_run_id, plan_cases

MANIFEST_KIND = "compilebench-versions"


@dataclass
class Sweep:
    sweep_id: str
    envs: list[dict[str, Any]]
    runs: list[Run]
    manifest: Path | None = None


def env_environment(env: Env, devices: Sequence[str]) -> dict[str, Any]:
    """The run's environment as captured inside the env, plus which env it was."""
    environment = probe_environment(env.python, devices)
    environment["env"] = env.to_dict()
    return environment


def run_versions(opts: RunOptions, envs: Sequence[Env], progress: ProgressFn | None = None,
                 on_env: Any = None) -> Sweep:
    """Run the selection once per env (in order); save the manifest after each env, so an
    interrupted sweep still names the runs it finished."""
    if len(envs) < 2:
        raise RunFileError(f"versions needs at least two --env to compare (got {len(envs)})")
    cases, _ = plan_cases(opts)  # validate the selection before the first (slow) env runs
    devices = sorted({c.device for c in cases})
    sweep_id = new_run_id(opts.label or "versions")
    sweep = Sweep(sweep_id, [e.to_dict() for e in envs], [])
    sweep.manifest = Path(opts.out_dir) / "versions" / f"{sweep_id}.json"
    for env in envs:
        if on_env:
            on_env(env)
        env_opts = replace(opts, python=env.python, label=f"{opts.label + ' ' if opts.label else ''}{env.name}")
        run = execute(env_opts, progress, environment=env_environment(env, devices))
        sweep.runs.append(run)
        save_manifest(sweep)
    return sweep


def save_manifest(sweep: Sweep) -> Path:
    assert sweep.manifest is not None
    data = {"kind": MANIFEST_KIND, "sweep_id": sweep.sweep_id,
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "envs": sweep.envs, "runs": [{"env": env["name"], "run_id": run.run_id, "path": run.config.get("path")}
                                         for env, run in zip(sweep.envs, sweep.runs, strict=False)]}
    return write_json_atomic(sweep.manifest, data)


def load_manifest(path: str | Path) -> Sweep:
    """A sweep from its manifest: the runs it lists, in env order."""
    data = read_json(path, RunFileError, "versions manifest", "pass the file `compilebench versions` printed")
    if not isinstance(data, dict) or data.get("kind") != MANIFEST_KIND:
        raise RunFileError(f"{path}: not a versions manifest (expected kind {MANIFEST_KIND!r}); pass the file "
                           f"`compilebench versions` printed (OUT/versions/<id>.json)")
    runs = []
    for entry in data.get("runs", []):
        run_path = Path(str(entry.get("path") or ""))
        if not run_path.is_file():
            raise RunFileError(f"{path}: run file {run_path} of env {entry.get('env')!r} is missing")
        runs.append(load_run(run_path))
    return Sweep(str(data.get("sweep_id")), list(data.get("envs", [])), runs, Path(path))
