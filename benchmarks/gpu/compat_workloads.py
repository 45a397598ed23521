"""A tiny model for the compiler matrix on a GPU (benchmarks/gpu/compat.sh): residual MLP
blocks of a user-defined class repeated in a ModuleList, so that every named config applies
(regional compilation needs repeated blocks; the suite's MLPs are plain nn.Sequential)."""

from __future__ import annotations

from harness import workload


@workload("mlp-blocks", unit="samples", batch_size=32, scenarios=("forward", "train"),
          description="4 residual Linear/LayerNorm/GELU blocks of one class (regional compilation applies)")
def mlp_blocks(ctx):
    import torch
    from torch import nn

    width = 256 if ctx.size == "full" else 64

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.fc1, self.fc2 = nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))

    class Blocks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(4))

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    model = Blocks().to(ctx.device, ctx.dtype)
    return model, (torch.randn(ctx.batch_size, width, device=ctx.device, dtype=ctx.dtype),)
