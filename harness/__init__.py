"""compilebench: benchmark and regression-testing harness for torch.compile.

Public API for workload authors: `workload`, `WorkloadContext`, `Built`, `scenario`,
`Prepared`. Importing this package does not import torch.
"""

from harness.model.scenarios import Prepared, scenario
from harness.model.workloads import Built, WorkloadContext, workload

__all__ = ["workload", "WorkloadContext", "Built", "scenario", "Prepared"]
__version__ = "0.1.0"
