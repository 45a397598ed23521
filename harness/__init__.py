"""compilebench: benchmark and regression-testing harness for torch.compile.

Public API for workload authors: `workload`, `WorkloadContext`, `Built`, `scenario`,
`Prepared`. Importing this package does not import torch.

The names resolve on first use (PEP 562): importing a bottom module such as
harness.model.errors, as compiler/ and suites/ do, must not pull in the workload registry
(which imports compiler/ back).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.model.scenarios import Prepared, scenario
    from harness.model.workloads import Built, WorkloadContext, workload

_PUBLIC = {"workload": "harness.model.workloads", "WorkloadContext": "harness.model.workloads",
           "Built": "harness.model.workloads", "scenario": "harness.model.scenarios", "Prepared": "harness.model.scenarios"}

__all__ = ["workload", "WorkloadContext", "Built", "scenario", "Prepared"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
