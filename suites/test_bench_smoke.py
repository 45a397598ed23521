"""The smoke suite as pytest-benchmark tests:

    pytest suites/test_bench_smoke.py --benchmark-json=bench.json --benchmark-save-data
    compilebench import-pytest-benchmark bench.json

Not collected by the project's own `pytest` run (testpaths = tests)."""

import pytest

from harness.interop.pytest_plugin import run_benchmark, suite_cases


@pytest.mark.parametrize("case", suite_cases("smoke"), ids=lambda c: c.case_id)
def test_bench(benchmark, case):
    info = run_benchmark(benchmark, case)
    assert info["status"] == "ok", info
