"""Machine-speed probe normalisation: how much slower each process's machine was, and
whether compare divides a case's timings by it.

The probe (harness/measure/probe.py) times fixed kernels in every worker; here its blocks
become one slowness factor per process (`probe_factors`) and a `MachineProbe` per case,
which says whether to normalise: never across torch builds for a probe set that calls torch
(it would divide the torch change under test out), always with per-process tests, and with
one process per side only once the probe moved by the `probe` threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.analysis.metrics import as_mapping, timing_samples
from harness.analysis.significance import MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
from harness.analysis.thresholds import Thresholds
from harness.measure.probe import probe_block, probe_uses_torch, relative_slowness
from harness.model.schema import Record

__all__ = ["MachineProbe", "probe_factors", "machine_probe", "normalised_groups", "torch_bound_note",
           "probe_version_note"]


@dataclass(frozen=True)
class MachineProbe:
    """Per-process machine slowness of one case (1: as fast as base's average machine),
    and whether compare divides the case's timings by it."""

    base: list[float]
    head: list[float]
    change: float  # geometric mean of head factors / that of base - 1 (+: head's machine slower)
    normalise: bool
    version: str = ""
    # the set calls torch and the sides' torch builds differ: it times the change under test
    # too, so it is never divided out (a slower torch would pass as machine drift)
    torch_bound: bool = False

    def factors(self, side: str) -> list[float]:
        return self.base if side == "base" else self.head


def probe_factors(records: Sequence[Record], n_base: int) -> tuple[list[float], str] | None:
    """Per process, how much slower its machine was than the first `n_base` processes'
    average (harness/measure/probe.py's relative_slowness), and the probe set's version;
    None unless every process carries a usable probe of one version."""
    blocks = [probe_block(as_mapping(r.metrics)) for r in records]
    if any(b is None for b in blocks) or len({b.get("version") for b in blocks if b is not None}) != 1:
        return None
    factors = relative_slowness(blocks, n_base)  # type: ignore[arg-type]
    return None if factors is None else (factors, str(blocks[0].get("version")))  # type: ignore[union-attr]


def machine_probe(base: list[Record], head: list[Record], thresholds: Thresholds,
                   torch_differs: bool = False) -> MachineProbe | None:
    """The case's probe, when every process on both sides carries one of the same version.
    One process per side: normalise only when the probe moved by the `probe` threshold (its
    own noise would otherwise leak into a steady comparison). Per-process tests normalise
    always: each process's own drift comes out, and the test still sees what is left.
    A probe set that calls torch (the GPU set) never normalises across differing torch
    builds (`torch_differs`): it would divide the torch change under test out."""
    moved_at = thresholds.get("probe")
    if moved_at is None and not thresholds.enabled("probe"):
        return None
    found = probe_factors([*base, *head], len(base))
    if found is None:
        return None
    factors, version = found
    bs, hs = factors[:len(base)], factors[len(base):]
    change = math.exp(float(np.mean(np.log(hs)) - np.mean(np.log(bs)))) - 1.0
    if torch_differs and probe_uses_torch(version):
        return MachineProbe(bs, hs, change, False, version, torch_bound=True)
    per_process = min(len(base), len(head)) >= MIN_PROCESSES_FOR_PROCESS_LEVEL_TEST
    return MachineProbe(bs, hs, change, per_process or abs(change) >= float(moved_at or 0.0), version)


def normalised_groups(records: list[Record], metric: str, factors: list[float] | None) -> list[np.ndarray]:
    """Per-process timing samples, divided by each process's probe factor when given."""
    out = []
    for i, r in enumerate(records):
        samples = timing_samples(r, metric)
        if samples is not None and samples.size:
            out.append(samples / factors[i] if factors else samples)
    return out


def torch_bound_note(probe: MachineProbe) -> str:
    return (f"not normalised: probe set {probe.version} runs on torch and base and head torch builds differ "
            f"(probe {probe.change:+.1%}: machine or torch)")


def probe_version_note(base: Sequence[Record], head: Sequence[Record]) -> str | None:
    """Why there is no probe factor when every process has a probe but not all of one version
    (None otherwise): a version names the kernels and when they run, so samples of two
    versions read different things and one side's cannot stand for the other's machine
    (gpu-1 between rounds read the H200's GEMM 26-50 us, gpu-2 at the edges 20-27 us)."""
    def versions(records: Sequence[Record]) -> set[str] | None:
        blocks = [probe_block(as_mapping(r.metrics)) for r in records]
        return None if any(b is None for b in blocks) else {str(b.get("version")) for b in blocks}  # type: ignore[union-attr]

    b, h = versions(base), versions(head)
    if not b or not h or len(b | h) == 1:
        return None
    return (f"not normalised: probe versions differ (base {', '.join(sorted(b))}, head {', '.join(sorted(h))}); "
            "their samples read different things, so compare normalises only between equal versions")
