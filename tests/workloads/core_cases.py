"""Workloads with known behaviour, for the core end-to-end tests."""

import os
import signal

import torch

from harness import workload

BUFFER_BYTES = 256 * 1024 * 1024


class TwoBreaks(torch.nn.Module):
    """Exactly two graph breaks: each print() is one (Dynamo cannot trace print)."""

    def forward(self, x):
        x = x.sin()
        print("break one")
        x = x.cos()
        print("break two")
        return x + 1


@workload("known-breaks", scenarios=("forward",), batch_size=4)
def known_breaks(ctx):
    return TwoBreaks(), (torch.randn(ctx.batch_size, 8),)


class BigBuffer(torch.nn.Module):
    """Allocates and touches a 256 MiB temporary per call: it must show in the peak."""

    def forward(self, x):
        buf = torch.ones(BUFFER_BYTES // 4, dtype=torch.float32)
        return x + buf[: x.numel()].view_as(x)


@workload("big-buffer", scenarios=("forward",), batch_size=4)
def big_buffer(ctx):
    return BigBuffer(), (torch.randn(ctx.batch_size, 8),)


class Segfault(torch.nn.Module):
    def forward(self, x):
        os.kill(os.getpid(), signal.SIGSEGV)
        return x


@workload("crashes", scenarios=("forward",), batch_size=2)
def crashes(ctx):
    return Segfault(), (torch.randn(ctx.batch_size, 4),)


@workload("raises", scenarios=("forward",), batch_size=2)
def raises(ctx):
    raise RuntimeError("factory failed on purpose")


@workload("tiny-ok", scenarios=("forward",), batch_size=2)
def tiny_ok(ctx):
    return torch.nn.Linear(4, 4), (torch.randn(ctx.batch_size, 4),)
