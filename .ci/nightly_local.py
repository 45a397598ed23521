"""Rehearse .github/workflows/nightly.yml on this machine: its jobs and `run:` steps in order.

`act` cannot run the workflow offline (it pulls runner images and needs the cache and
artifact services), so this runner reads the workflow with a YAML parser and executes it:

- jobs in `needs` order, a job's `if:` and each step's `if:` evaluated (GitHub's implicit
  `success() &&` included), `strategy.matrix` expanded, `${{ }}` expressions substituted in
  env, names and run text (the subset the workflow uses: contexts github, inputs, vars, env,
  matrix, strategy, needs, steps; `||`, `&&`, `!`, `==`, `!=`, fromJSON, always(),
  success(), failure());
- every `run:` step through `bash -e` (GitHub's default shell) in a fresh workspace per job,
  with GITHUB_STEP_SUMMARY, GITHUB_OUTPUT, GITHUB_WORKSPACE set; steps named "Install ..."
  are skipped (this checkout is used through PYTHONPATH, and `compilebench`/`python` on PATH
  point at this interpreter);
- the actions it uses are emulated on local folders: checkout (links .ci, tox.ini,
  pyproject.toml), setup-python (nothing), cache/restore and cache/save (a cache folder kept
  across nights, restore-keys by prefix, newest first, a saved key never overwritten),
  upload-/download-artifact (per night, name or pattern + merge-multiple), upload-pages-artifact
  and deploy-pages (copied / noted). Any other action is an error.

    python .ci/nightly_local.py --state DIR --night 1 [--var K=V] [--input K=V] [--env K=V] [--skip-step NAME]

Each night writes DIR/nights/N/result.json: every job and step with its outcome, exit code,
log and summary. Exit 0 when every job that ran succeeded, 1 otherwise. `--env` sets
variables for every step (e.g. NIGHTLY_SELECT for tiny cases, NIGHTLY_GPU_RUN for a CPU
stand-in of the GPU suite); tests/test_nightly_workflow.py runs two nights with them.
"""

from __future__ import annotations

import argparse
import fnmatch
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / ".github" / "workflows" / "nightly.yml"
STATUS_FUNCTIONS = ("always", "success", "failure", "cancelled")

_TOKEN = re.compile(r"\s*(?:('(?:[^']|'')*')|(\|\||&&|==|!=|!|\(|\)|,)|([A-Za-z_][\w-]*(?:\.[\w*-]+)*)|(\d+(?:\.\d+)?))")


class WorkflowError(Exception):
    """Something in the workflow this rehearsal cannot run (an unknown action or expression)."""


# ---------------------------------------------------------------- expressions

def to_python(expr: str) -> str:
    """A GitHub expression as Python source over _get/_call (the subset named in the docstring)."""
    out, pos = [], 0
    while pos < len(expr.rstrip()):
        m = _TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            raise WorkflowError(f"cannot read the expression {expr!r} at {expr[pos:]!r}")
        pos = m.end()
        string, op, name, number = m.groups()
        if string is not None:
            out.append(repr(string[1:-1].replace("''", "'")))
        elif op is not None:
            out.append({"||": " or ", "&&": " and ", "!": " not "}.get(op, f" {op} "))
        elif number is not None:
            out.append(number)
        elif expr[pos:].lstrip().startswith("("):
            out.append(f"_call({name!r}, ")
            pos = expr.index("(", pos) + 1
            if expr[pos:].lstrip().startswith(")"):
                out[-1] = f"_call({name!r}"
        elif name in ("true", "false", "null"):
            out.append({"true": "True", "false": "False", "null": "None"}[name])
        else:
            out.append(f"_get({name!r})")
    return "".join(out)


@dataclass
class Context:
    data: dict[str, Any]
    job_ok: bool = True  # success(): every step (or every needed job) so far succeeded

    def get(self, path: str) -> Any:
        value: Any = self.data
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return "" if value is None else value

    def call(self, name: str, *args: Any) -> Any:
        if name == "fromJSON":
            return json.loads(args[0])
        if name == "always":
            return True
        if name == "success":
            return self.job_ok
        if name == "failure":
            return not self.job_ok
        if name == "cancelled":
            return False
        raise WorkflowError(f"function {name}() is not supported by the rehearsal")

    def evaluate(self, expr: str) -> Any:
        source = to_python(expr)
        return eval(source, {"__builtins__": {}}, {"_get": self.get, "_call": self.call})  # noqa: S307 (own subset)

    def condition(self, expr: Any) -> bool:
        """A job's or step's `if:`; without a status function GitHub prefixes `success() &&`."""
        if expr is None:
            return self.job_ok
        text = str(expr).strip()
        if text.startswith("${{") and text.endswith("}}"):
            text = text[3:-2]
        if not any(re.search(rf"\b{f}\s*\(", text) for f in STATUS_FUNCTIONS):
            return self.job_ok and bool(self.evaluate(text))
        return bool(self.evaluate(text))

    def substitute(self, value: Any) -> Any:
        """`${{ }}` inside a string; a value that is one whole expression keeps its type."""
        if not isinstance(value, str) or "${{" not in value:
            return value
        whole = re.fullmatch(r"\s*\$\{\{(.*?)\}\}\s*", value, re.S)
        if whole:
            return self.evaluate(whole.group(1))
        return re.sub(r"\$\{\{(.*?)\}\}", lambda m: text_of(self.evaluate(m.group(1))), value, flags=re.S)


def text_of(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


# ---------------------------------------------------------------- actions

@dataclass
class Night:
    state: Path
    number: int
    env: dict[str, str]
    variables: dict[str, str]
    inputs: dict[str, str]
    skip: tuple[str, ...] = ()  # step names not to run (e.g. the expected counts of a real suite)
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.state / "nights" / str(self.number)

    @property
    def cache(self) -> Path:
        return self.state / "cache"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"


def _files(workspace: Path, patterns: str, hidden: bool) -> tuple[Path | None, list[Path]]:
    """Files an upload-artifact `path:` names and the folder their names are relative to."""
    found: list[Path] = []
    for pattern in filter(None, (p.strip() for p in patterns.splitlines())):
        for match in sorted(glob.glob(str(workspace / pattern), recursive=True)):
            p = Path(match)
            found.extend(sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p] if p.is_file() else [])
    if not hidden:
        found = [f for f in found if not any(part.startswith(".") for part in f.relative_to(workspace).parts)]
    if not found:
        return None, []
    base = Path(os.path.commonpath([f.parent for f in found]))
    return base, found


def _copy_tree(src: Path, dst: Path) -> None:
    for f in (x for x in src.rglob("*") if x.is_file()):
        target = dst / f.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)


def run_action(uses: str, inputs: dict[str, Any], workspace: Path, night: Night) -> tuple[bool, str]:
    """Emulate one `uses:` step; (ok, log line)."""
    name = uses.split("@")[0]
    if name == "actions/checkout":
        for entry in (".ci", "tox.ini", "pyproject.toml"):
            link = workspace / entry
            if not link.exists():
                link.symlink_to(REPO / entry)
        return True, "checkout: linked .ci, tox.ini, pyproject.toml"
    if name == "actions/setup-python":
        return True, f"setup-python: using {sys.executable}"
    if name == "actions/cache/restore":
        path = str(inputs["path"])
        keys = [str(inputs["key"])]
        saved = sorted((p for p in night.cache.glob("*") if p.is_dir()), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        chosen = next((p for p in saved if p.name == keys[0]), None)
        for prefix in filter(None, str(inputs.get("restore-keys", "")).splitlines()):
            chosen = chosen or next((p for p in saved if p.name.startswith(prefix.strip())), None)
        if chosen is None:
            return True, f"cache/restore: no cache for {keys[0]} (first night)"
        src = chosen / path
        (workspace / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, workspace / path)
        return True, f"cache/restore: {path} from {chosen.name}"
    if name == "actions/cache/save":
        key, path = str(inputs["key"]), str(inputs["path"])
        target = night.cache / key
        if target.exists():
            return True, f"cache/save: {key} exists, not overwritten (as GitHub does)"
        if not (workspace / path).is_file():
            return True, f"cache/save: {path} does not exist, nothing saved"
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(workspace / path, target / path)
        return True, f"cache/save: {path} as {key}"
    if name in ("actions/upload-artifact", "actions/upload-pages-artifact"):
        artifact = "github-pages" if name.endswith("pages-artifact") else str(inputs["name"])
        base, files = _files(workspace, str(inputs["path"]), bool(inputs.get("include-hidden-files")))
        if base is None:
            return True, f"upload-artifact {artifact}: no files found at {inputs['path']!r} (warning)"
        for f in files:
            target = night.artifacts / artifact / f.relative_to(base)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
        return True, f"upload-artifact {artifact}: {len(files)} file(s)"
    if name == "actions/download-artifact":
        dest = workspace / str(inputs.get("path") or ".")
        if inputs.get("name"):
            names = [str(inputs["name"])]
        else:
            pattern = str(inputs.get("pattern") or "*")
            names = sorted(p.name for p in night.artifacts.glob("*") if fnmatch.fnmatch(p.name, pattern))
        missing = [n for n in names if not (night.artifacts / n).is_dir()]
        if missing or not names:
            return False, f"download-artifact: no artifact {missing or inputs.get('pattern')}"
        for n in names:
            _copy_tree(night.artifacts / n, dest if inputs.get("merge-multiple") or inputs.get("name") else dest / n)
        return True, f"download-artifact: {', '.join(names)} -> {dest.relative_to(workspace)}"
    if name == "actions/deploy-pages":
        return True, "deploy-pages: the site is in the night's github-pages artifact"
    raise WorkflowError(f"the rehearsal does not emulate {uses}")


# ---------------------------------------------------------------- jobs

def shims(state: Path) -> Path:
    """`compilebench` and `python` on PATH: this interpreter and this checkout."""
    bin_dir = state / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, body in (("compilebench", f'exec "{sys.executable}" -m harness "$@"'),
                       ("python", f'exec "{sys.executable}" "$@"')):
        path = bin_dir / name
        path.write_text(f"#!/usr/bin/env bash\n{body}\n")
        path.chmod(0o755)
    return bin_dir


def base_env(night: Night) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "COMPILEBENCH_SHARD_"))}
    env["PATH"] = f"{shims(night.state)}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["CI"] = "true"
    return env


def run_step(step: dict[str, Any], ctx: Context, env: dict[str, str], workspace: Path, night: Night,
             record: dict[str, Any]) -> bool:
    if "uses" in step:
        inputs = {k: ctx.substitute(v) for k, v in (step.get("with") or {}).items()}
        ok, log = run_action(str(step["uses"]), inputs, workspace, night)
        record.update(exit_code=0 if ok else 1, log=log)
        return ok
    step_env = dict(env)
    step_env.update({k: text_of(ctx.substitute(v)) for k, v in (step.get("env") or {}).items()})
    summary = workspace / f".summary-{len(os.listdir(workspace))}"
    summary.write_text("")
    step_env.update(GITHUB_STEP_SUMMARY=str(summary), GITHUB_OUTPUT=str(workspace / ".output"),
                    GITHUB_WORKSPACE=str(workspace), RUNNER_TEMP=str(workspace / ".tmp"))
    (workspace / ".tmp").mkdir(exist_ok=True)
    script = ctx.substitute(str(step["run"]))
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=workspace / str(step.get("working-directory", ".")),
                          env=step_env, capture_output=True, text=True)
    record.update(exit_code=proc.returncode, log=proc.stdout + proc.stderr, summary=summary.read_text())
    return proc.returncode == 0


def run_job(job_id: str, job: dict[str, Any], ctx: Context, night: Night, instance: str) -> str:
    """One job (one matrix instance): 'success' or 'failure'."""
    workspace = Path(tempfile.mkdtemp(prefix=f"{job_id}-{instance}-", dir=night.root))
    env = base_env(night)
    env.update(night.env)
    for scope in (night.result["workflow_env"], job.get("env") or {}):
        env.update({k: text_of(ctx.substitute(v)) for k, v in scope.items()})
    ctx.data["env"] = dict(env)
    ctx.data["steps"] = {}
    ctx.job_ok = True
    steps_out: list[dict[str, Any]] = []
    night.result["jobs"].setdefault(job_id, []).append({"instance": instance, "workspace": str(workspace),
                                                        "steps": steps_out})
    for step in job.get("steps") or []:
        name = str(ctx.substitute(step.get("name") or step.get("uses") or step.get("run", "").splitlines()[0]))
        record: dict[str, Any] = {"name": name, "id": step.get("id")}
        steps_out.append(record)
        if not ctx.condition(step.get("if")):
            record["outcome"] = "skipped"
        elif name.startswith("Install") or name in night.skip:
            record["outcome"] = "skipped"
            record["log"] = "rehearsal: this checkout through PYTHONPATH" if name.startswith("Install") else "--skip-step"
        else:
            ok = run_step(step, ctx, env, workspace, night, record)
            record["outcome"] = "success" if ok else "failure"
            if not ok and not step.get("continue-on-error"):
                ctx.job_ok = False
        if step.get("id"):
            ctx.data["steps"][step["id"]] = {"outcome": record["outcome"],
                                             "conclusion": "success" if step.get("continue-on-error") else record["outcome"]}
    return "success" if ctx.job_ok else "failure"


def find_step(job_id: str, name: str, workflow: Path = WORKFLOW) -> dict[str, Any]:
    """One step of the workflow by job and name (tests run a single step with it)."""
    spec = yaml.safe_load(workflow.read_text())
    for step in spec["jobs"][job_id].get("steps") or []:
        if step.get("name") == name:
            return step
    raise WorkflowError(f"no step {name!r} in job {job_id}")


def job_order(jobs: dict[str, Any]) -> list[str]:
    order: list[str] = []

    def visit(j: str, seen: tuple[str, ...] = ()) -> None:
        if j in order:
            return
        if j in seen:
            raise WorkflowError(f"jobs need each other in a circle: {' -> '.join((*seen, j))}")
        for n in needs_of(jobs[j]):
            visit(n, (*seen, j))
        order.append(j)

    for j in jobs:
        visit(j)
    return order


def needs_of(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def rehearse(night: Night, workflow: Path = WORKFLOW) -> dict[str, Any]:
    spec = yaml.safe_load(workflow.read_text())
    night.root.mkdir(parents=True, exist_ok=True)
    night.result = {"night": night.number, "workflow_env": spec.get("env") or {}, "jobs": {}, "results": {}}
    github = {"run_id": f"{night.number:06d}", "run_attempt": "1", "event_name": "schedule"}
    for job_id in job_order(spec["jobs"]):
        job = spec["jobs"][job_id]
        needs = {n: {"result": night.result["results"][n]} for n in needs_of(job)}
        ctx = Context({"github": github, "inputs": night.inputs, "vars": night.variables, "needs": needs})
        ctx.job_ok = all(v["result"] == "success" for v in needs.values())
        if not ctx.condition(job.get("if")):
            night.result["results"][job_id] = "skipped"
            continue
        matrix = (job.get("strategy") or {}).get("matrix")
        combos: list[dict[str, Any]] = [{}]
        if matrix:
            axes = {k: ctx.substitute(v) for k, v in matrix.items()}
            combos = [{}]
            for axis, values in axes.items():
                combos = [{**c, axis: v} for c in combos for v in values]
        results = []
        for index, combo in enumerate(combos):
            ctx.data["matrix"] = combo
            ctx.data["strategy"] = {"job-index": index, "job-total": len(combos)}
            runs_on = ctx.substitute(job.get("runs-on"))
            night.result.setdefault("runs_on", {})[job_id] = runs_on
            results.append(run_job(job_id, job, ctx, night, "-".join(map(str, combo.values())) or "0"))
        night.result["results"][job_id] = "failure" if "failure" in results else "success"
    (night.root / "result.json").write_text(json.dumps(night.result, indent=1, default=str))
    return night.result


def pairs(values: list[str], flag: str) -> dict[str, str]:
    out = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep:
            raise SystemExit(f"nightly_local: {flag} {v!r} is not KEY=VALUE")
        out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state", required=True, help="folder kept across nights (cache, nights/N/)")
    p.add_argument("--night", type=int, required=True, help="night number (1, 2, ...)")
    p.add_argument("--workflow", default=str(WORKFLOW))
    p.add_argument("--var", action="append", default=[], metavar="K=V", help="repository variable (vars.K)")
    p.add_argument("--input", action="append", default=[], metavar="K=V", help="workflow_dispatch input")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="environment for every step")
    p.add_argument("--skip-step", action="append", default=[], metavar="NAME", help="do not run this step")
    args = p.parse_args(argv)
    night = Night(Path(args.state).resolve(), args.night, pairs(args.env, "--env"), pairs(args.var, "--var"),
                  pairs(args.input, "--input"), tuple(args.skip_step))
    result = rehearse(night, Path(args.workflow))
    for job_id, outcome in result["results"].items():
        print(f"{job_id}: {outcome}")
        for instance in result["jobs"].get(job_id, []):
            for step in instance["steps"]:
                print(f"  [{instance['instance']}] {step['outcome']:8s} {step['name']}")
    print(f"night {night.number}: {night.root / 'result.json'}")
    return 0 if all(r in ("success", "skipped") for r in result["results"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
