"""Security properties of docs/SECURITY.md, checked: no unsafe deserialisation or eval in
the code, hostile strings escaped in HTML and markdown, workers offline."""

from __future__ import annotations

import re
from pathlib import Path

from harness.model.schema import Record, load_run

ROOT = Path(__file__).resolve().parent.parent
V1 = ROOT / "tests" / "data" / "run_v1_faults.json"
HOSTILE = "<script>alert(1)</script>"
UNSAFE = {
    "pickle load": re.compile(r"\bpickle\.loads?\(|\bcloudpickle\.loads?\("),
    "eval/exec": re.compile(r"(?<![.\w])(eval|exec)\("),
    "yaml.load": re.compile(r"\byaml\.(unsafe_)?load\("),
    "trust_remote_code=True": re.compile(r"trust_remote_code\s*=\s*True"),
    "shell=True": re.compile(r"shell\s*=\s*True"),
}


def test_no_unsafe_deserialisation_eval_or_remote_code_in_the_code():
    found = []
    for folder in ("harness", "compiler", "suites"):
        for path in (ROOT / folder).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if line.lstrip().startswith("#"):
                    continue
                found += [f"{path.relative_to(ROOT)}:{number}: {name}" for name, rx in UNSAFE.items() if rx.search(line)]
    assert found == []


def _hostile_run():
    run = load_run(V1)
    data = run.records[0].to_dict()
    data["case"]["workload"] = HOSTILE
    data["graph_break_reasons"] = [{"reason": f"{HOSTILE} <img src=x onerror=alert(2)>", "location": "evil.py:1",
                                    "count": 1}]
    data["notes"] = [HOSTILE]
    run.records.append(Record.from_dict(data))
    run.label = HOSTILE
    return run


def test_hostile_names_are_escaped_in_the_html_report(tmp_path):
    from harness.report.report import write_report

    html = Path(write_report(_hostile_run(), tmp_path / "r.html")).read_text()
    assert "alert(1)" in html  # the text is there...
    assert HOSTILE not in html and "<img src=x" not in html  # ...but never as markup


def test_hostile_names_are_escaped_in_the_markdown_gate():
    from harness.analysis.compare import compare_runs
    from harness.report.gate_output import markdown

    run = _hostile_run()
    cmp = compare_runs([run], [run], allow_mismatch=True)
    text = markdown(cmp, cmp.cases)
    assert HOSTILE not in text and "<img" not in text


def test_workers_run_offline():
    from harness.run.runner import worker_env

    env = worker_env(Path("/tmp/x"))
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
