"""Device layer: the backends this CPU box cannot run (ROCm, XPU, MPS) through fake torch
modules, the peak-spec table, `auto`, and the skip-with-reason path of a real run."""

from __future__ import annotations

import types

import pytest
import torch

from harness.measure import devices
from harness.measure.device_specs import match_peak_spec, peak_flops_for, utilisation
from harness.measure.devices import CudaDevice, MpsDevice, XpuDevice, auto_device, parse_device
from harness.measure.timing import EventTimer


class FakeEvent:
    clock = [0.0]

    def __init__(self, enable_timing: bool = False):
        assert enable_timing
        self.t = None

    def record(self) -> None:
        FakeEvent.clock[0] += 2.5  # every record advances the fake device clock by 2.5 ms
        self.t = FakeEvent.clock[0]

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: FakeEvent) -> float:
        return end.t - self.t


def fake_accelerator(name: str, count: int = 2) -> types.SimpleNamespace:
    state = {"syncs": 0, "peak": 0, "allocated": 1000}

    def synchronize(index: int = 0) -> None:
        state["syncs"] += 1

    def reset_peak_memory_stats(index: int = 0) -> None:
        state["peak"] = state["allocated"]

    props = types.SimpleNamespace(name=name, total_memory=64 << 30, major=9, minor=4, multi_processor_count=304,
                                  gcnArchName="gfx942", driver_version="1.3.29")
    return types.SimpleNamespace(
        state=state, is_available=lambda: True, device_count=lambda: count, synchronize=synchronize,
        Event=FakeEvent, reset_peak_memory_stats=reset_peak_memory_stats,
        memory_allocated=lambda i=0: state["allocated"], max_memory_allocated=lambda i=0: state["peak"] + 4096,
        get_device_properties=lambda i=0: props,
    )


def test_absent_backends_skip_with_reason_on_this_box():
    for name in ("cuda", "xpu", "mps"):
        avail = devices.device_availability(name)
        assert not avail.available
        assert name in avail.reason and "torch" in avail.reason
    assert devices.present_devices() == ["cpu"]
    assert auto_device() == "cpu"


def test_xpu_through_fake_module(monkeypatch):
    fake = fake_accelerator("Intel(R) Data Center GPU Max 1550")
    monkeypatch.setattr(torch, "xpu", fake, raising=False)
    monkeypatch.setattr(torch.version, "xpu", "20250101", raising=False)
    dev = parse_device("xpu:1")
    assert isinstance(dev, XpuDevice) and dev.torch_name == "xpu:1" and dev.vendor == "Intel"
    assert dev.availability().available
    assert not parse_device("xpu:2").availability().available  # only 2 visible
    dev.synchronize()
    assert fake.state["syncs"] == 1
    assert dev.reset_peak_memory() == 1000 and dev.peak_memory() == 1000 + 4096
    info = dev.describe()
    assert info["name"].endswith("Max 1550") and info["count"] == 2 and info["xpu_runtime"] == "20250101"
    assert info["peak_specs"]["part"] == "Intel Data Center GPU Max 1550"
    timer = EventTimer(dev.event_pair, dev.synchronize)
    assert timer(lambda: None, 1) == pytest.approx(2.5e-3)


def test_rocm_is_reported_as_amd(monkeypatch):
    fake = fake_accelerator("AMD Instinct MI300X", count=8)
    monkeypatch.setattr(torch, "cuda", fake)
    monkeypatch.setattr(torch.version, "hip", "6.2.41133")
    dev = CudaDevice(0)
    assert dev.availability().available and dev.vendor == "AMD"
    info = dev.describe()
    assert info["vendor"] == "AMD" and info["hip_runtime"] == "6.2.41133" and info["gcn_arch"] == "gfx942"
    specs = dev.peak_specs()
    assert specs["part"] == "AMD Instinct MI300X"
    assert specs["bf16_flops"] == pytest.approx(1307.4e12) and specs["memory_bandwidth_bytes_s"] == pytest.approx(5.3e12)


def test_mps_through_fake_module(monkeypatch):
    allocated = {"now": 100}
    fake_mps = types.SimpleNamespace(
        synchronize=lambda: None, current_allocated_memory=lambda: allocated["now"],
        driver_allocated_memory=lambda: 5000, recommended_max_memory=lambda: 1 << 34,
        event=types.SimpleNamespace(Event=FakeEvent),
    )
    monkeypatch.setattr(torch, "mps", fake_mps)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(devices, "apple_chip_name", lambda: "Apple M2 Pro")
    dev = parse_device("mps")
    assert isinstance(dev, MpsDevice) and dev.availability().available and dev.has_events
    assert not parse_device("mps:1").availability().available
    assert dev.reset_peak_memory() == 100
    allocated["now"] = 900
    dev.synchronize()  # the harness syncs after the calls: the sample sees 900
    allocated["now"] = 300
    assert dev.peak_memory() == 900  # highest seen, a lower bound of the true peak
    assert "lower_bound" in dev.memory_kind
    assert dev.describe()["peak_specs"]["part"] == "Apple M2 Pro"
    assert EventTimer(dev.event_pair, dev.synchronize)(lambda: None, 2) == pytest.approx(1.25e-3)


def test_auto_prefers_cuda_then_xpu_then_mps(monkeypatch):
    monkeypatch.setattr(torch, "xpu", fake_accelerator("Intel(R) Data Center GPU Max 1550"), raising=False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert auto_device() == "xpu"
    monkeypatch.setattr(torch, "cuda", fake_accelerator("NVIDIA H200"))
    assert auto_device() == "cuda"


def test_broken_backend_is_not_present_rather_than_a_crash(monkeypatch):
    def boom() -> bool:
        raise RuntimeError("driver mismatch")

    monkeypatch.setattr(torch.cuda, "is_available", boom)
    avail = devices.device_availability("cuda")
    assert not avail.available and "driver mismatch" in avail.reason


@pytest.mark.parametrize("name, part", [
    ("NVIDIA H200", "NVIDIA H200 SXM"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA A100 40GB"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM"),
    ("NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"),
    ("NVIDIA L4", "NVIDIA L4"),
    ("NVIDIA A10G", "NVIDIA A10G"),
    ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ("AMD Instinct MI250X/MI250", "AMD Instinct MI250X (one GCD)"),
    ("Apple M1", "Apple M1"),
])
def test_peak_spec_matching(name, part):
    assert match_peak_spec(name).part == part


def test_unknown_parts_and_cpu_have_no_peaks():
    assert match_peak_spec("NVIDIA L40S") is None and match_peak_spec(None) is None
    assert parse_device("cpu").peak_specs() is None


def test_utilisation_figures():
    specs = match_peak_spec("NVIDIA H200").to_dict()
    assert peak_flops_for(specs, "bfloat16") == pytest.approx(989.4e12)
    assert peak_flops_for(specs, "float64") is None
    u = utilisation(specs, "bfloat16", flops_per_s=494.7e12, bytes_per_s=2.4e12)
    assert u["achieved_tflops"] == pytest.approx(494.7)
    assert u["flops_utilisation"] == pytest.approx(0.5) and u["bandwidth_utilisation"] == pytest.approx(0.5)
    assert utilisation(None, "bfloat16", 1e12)["flops_utilisation"] is None


def test_absent_device_case_is_skipped_with_reason(results_dir):
    from harness.run.runner import RunOptions, execute

    run = execute(RunOptions(workloads=["mlp-classic"], scenarios=["forward"], compilers=["inductor"], devices=["xpu"],
                             out_dir=str(results_dir), ingest=False))
    (rec,) = run.records
    assert rec.status == "skipped" and "xpu not available" in rec.error["message"]
    assert run.environment["devices"]["xpu"]["available"] is False
