"""A workload whose graph breaks have a known order of cost, for tests/test_diagnostics.py."""

import torch

from harness import workload

HEAVY_MATMULS = 12


@torch.compiler.disable
def eager_heavy(x):
    """Runs eagerly (a graph break at its call): dozens of matmuls, the costly break."""
    for _ in range(HEAVY_MATMULS):
        x = torch.tanh(x @ x)
    return x


class CostlyAndCheapBreak(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(96, 96)

    def forward(self, x):
        x = self.proj(x)
        print("", end="")  # CHEAP_BREAK: one builtin call runs eagerly
        x = torch.relu(x)
        x = eager_heavy(x)  # COSTLY_BREAK: the whole function runs eagerly
        return x.sin()


@workload("costly-breaks", scenarios=("forward",), batch_size=96)
def costly_breaks(ctx):
    return CostlyAndCheapBreak().to(ctx.device), (torch.randn(ctx.batch_size, 96, device=ctx.device),)
