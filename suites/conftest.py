# The compilebench pytest plugin's hook (pytest finds hooks by name in a conftest).
from harness.interop.pytest_plugin import pytest_benchmark_update_machine_info  # noqa: F401
