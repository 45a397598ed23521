"""MLP workloads: the classic one-layer model and a deep MLP, forward and train step."""

from __future__ import annotations

from harness import workload

DEEP_SIZES = {
    # size: (features, hidden, layers)
    "tiny": (64, 128, 4),
    "full": (1024, 4096, 8),
}


# train_module_only: the module compiled, the optimizer left eager (harness/model/training.py)
SCENARIOS = ("forward", "train", "train_module_only")


@workload("mlp-classic", unit="samples", batch_size=16, scenarios=SCENARIOS, description="nn.Linear(10, 5): the classic first torch.compile example")
def classic(ctx):
    import torch

    model = torch.nn.Linear(10, 5).to(ctx.device, ctx.dtype)
    x = torch.randn(ctx.batch_size, 10, device=ctx.device, dtype=ctx.dtype)
    return model, (x,)


@workload("mlp-deep", unit="samples", batch_size=64, scenarios=SCENARIOS, description="deep MLP: Linear/LayerNorm/GELU blocks")
def deep(ctx):
    import torch
    from torch import nn

    features, hidden, layers = DEEP_SIZES[ctx.size]
    blocks: list[nn.Module] = [nn.Linear(features, hidden)]
    for _ in range(layers - 1):
        blocks += [nn.LayerNorm(hidden), nn.GELU(), nn.Linear(hidden, hidden)]
    blocks += [nn.LayerNorm(hidden), nn.GELU(), nn.Linear(hidden, features)]
    model = nn.Sequential(*blocks).to(ctx.device, ctx.dtype)
    x = torch.randn(ctx.batch_size, features, device=ctx.device, dtype=ctx.dtype)
    return model, (x,)
