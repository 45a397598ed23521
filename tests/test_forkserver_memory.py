"""A forked CPU case's peak RSS means what a spawned one's means (harness/run/forkserver.py:
preload_for, resident_file_pages, map_file_pages): its server imports only what the case
would import itself, and the library pages the server had mapped are mapped in the child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from compiler import get_compiler
from harness.measure.worker import setup_imports
from harness.run import forkserver, runner
from suites import WORKLOAD_MODULES

ROOT = Path(__file__).resolve().parent.parent
POLICY = {"min_time_s": 0.05, "min_samples": 5, "max_samples": 50, "warmup": 1, "max_time_s": 2.0}
# Measured on a 2-core box (torch 2.13.0+cpu, mlp-classic tiny forward, 3 runs each way):
# one way repeats within 0.8 MiB; forked and spawned differ by at most 1.9 MiB (0.5%)
# since the fix, and differed by +30% (eager) and +12% (inductor) before it; the library
# pages alone made a forked case 26% low. 3% is four times the residual and a quarter of
# the smallest defect seen.
PEAK_RSS_TOLERANCE = 0.03

HEAVY = ("transformers", "diffusers", "suites")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module", autouse=True)
def _workloads():
    runner.load_registries([])


def test_a_case_server_imports_what_the_case_imports_and_no_more():
    eager = forkserver.preload_for(setup_imports(get_compiler("eager")))
    inductor = forkserver.preload_for(setup_imports(get_compiler("inductor")))
    assert eager == ("torch", "torch._dynamo", "harness.measure.worker")
    assert inductor == ("torch", "torch._dynamo", "torch._inductor.compile_fx", "harness.measure.worker")
    assert not any(m.startswith(HEAVY) for m in eager + inductor)
    # what a workload's module declares its builds import comes too, before the worker
    hf = forkserver.preload_for(setup_imports(get_compiler("eager")), forkserver.workload_preload("hf-BertForMaskedLM"))
    assert hf == ("torch", "torch._dynamo", "transformers", "transformers.modeling_utils", "harness.measure.worker")
    assert forkserver.workload_preload("mlp-classic") == () and forkserver.workload_preload("no-such-workload") == ()
    # a non-case task (a sweep shape, a coldstart row) gets every module
    assert forkserver.preload_for(None) == forkserver.PRELOAD


class _FakeServer:
    """Records what a pool asked a server to import; starts nothing."""

    def __init__(self, python, env, cwd, isa_cache_dir, modules):
        self.isa, self.modules = isa_cache_dir, tuple(modules)

    def ready(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_gpu_case_and_a_cpu_inductor_case_with_the_same_modules_get_servers_of_their_own(monkeypatch):
    # only the CPU case's server settles the ISA probe (which may start the CUDA driver: such a
    # server refuses CUDA cases), so a shared one would serve one of them the wrong way
    monkeypatch.setattr(forkserver, "ForkServer", _FakeServer)
    pool = forkserver.ServerPool("/nowhere")
    modules = forkserver.preload_for(setup_imports(get_compiler("inductor")))
    gpu = pool.get("python3", {"A": "1"}, None, modules)
    cpu = pool.get("python3", {"A": "1"}, "/tmp/isa", modules)
    assert gpu is not cpu and gpu.isa is None and cpu.isa == "/tmp/isa"
    assert pool.get("python3", {"A": "1"}, None, modules) is gpu  # the next GPU case reuses its server
    assert pool.get("python3", {"A": "1"}, "/tmp/isa", modules) is cpu
    assert len(pool.servers) == 2


OWN_PAGES = r'''
import json, os, resource, sys
from harness.run.forkserver import own_inherited_pages, shared_private_pages
block = bytearray(os.urandom(1 << 20) * 64)  # 64 MiB of the parent's, touched
page = os.sysconf("SC_PAGE_SIZE")
def write_every_page():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for at in range(0, len(block), page):
        block[at] ^= 1
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
def child(own):
    shared = sum(n for _, n in shared_private_pages())
    owned = own_inherited_pages() if own else None
    after = sum(n for _, n in shared_private_pages())
    return {"shared": shared, "owned": owned, "after": after, "faults": write_every_page(), "pages": len(block) // page}
out = {}
for own in (False, True):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r); os.write(w, json.dumps(child(own)).encode()); os._exit(0)
    os.close(w); out[str(own)] = json.loads(os.read(r, 1 << 16)); os.waitpid(pid, 0)
print(json.dumps(out))
'''


def test_a_forked_case_owns_its_servers_pages_before_it_starts(tmp_path):
    """A child still sharing its parent's pages copy-on-write takes a page fault per page it
    writes (its compile's share: ~30k faults more than a spawned worker's); after
    own_inherited_pages it takes none for them, and nothing it shares is left."""
    script = tmp_path / "own.py"
    script.write_text(OWN_PAGES)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = json.loads(subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True,
                                    env=env).stdout)
    plain, owned = out["False"], out["True"]
    assert plain["shared"] >= 64 << 20 and plain["faults"] >= 0.9 * plain["pages"]  # a fault per page of the block
    assert owned["owned"]["bytes"] >= 64 << 20 and owned["owned"]["refused"] == 0
    assert owned["after"] < (1 << 20) and owned["faults"] < 500, owned


FILE_PAGES = r'''
import json, os, sys
import numpy  # maps its libraries' pages, as torch's imports do
from harness.run.forkserver import map_file_pages, resident_file_pages

def rss_file():
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024

runs = resident_file_pages()
parent = rss_file()
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    before = rss_file()
    mapped = map_file_pages(runs, madvise=sys.argv[1] == "madvise")
    os.write(write, json.dumps({"before": before, "after": rss_file(), "mapped": mapped}).encode())
    os._exit(0)
os.waitpid(pid, 0)
print(json.dumps({"parent": parent, "runs": len(runs), **json.loads(os.read(read, 4096))}))
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/pagemap is Linux's")
@pytest.mark.parametrize("way", ["madvise", "touch"])
def test_a_forked_child_maps_the_library_pages_its_parent_had(way):
    done = subprocess.run([sys.executable, "-c", FILE_PAGES, way], capture_output=True, text=True, cwd=ROOT,
                          env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["runs"] > 0 and got["mapped"] >= got["parent"] // 2, got
    # without the mapping the child holds a fraction of its parent's library pages ...
    assert got["before"] < got["parent"] * 0.8, got
    # ... with it, all of them; the child's own work after the fork (reading /proc, the pagemap
    # walk's code) faults in a few more file pages of its own: seen 356 KiB over a 17 MiB parent
    # on a busy 2-core box, so the slack above the parent is wider than below it
    assert got["after"] >= got["parent"] - max(got["parent"] * 0.02, 256 << 10), got
    assert got["after"] <= got["parent"] + max(got["parent"] * 0.05, 1 << 20), got


def test_servers_are_kept_per_module_set_and_say_what_they_hold(tmp_path):
    pool = forkserver.ServerPool(str(ROOT))
    try:
        one = pool.get(sys.executable, _env(), None, ("json",))
        two = pool.get(sys.executable, _env(), None, ("json", "csv"))
        assert pool.get(sys.executable, _env(), None, ("json",)) is one and one is not two
        assert one.info["preloaded"] == ["json"] and two.info["preloaded"] == ["json", "csv"]
        servers = pool.describe()
        assert len(servers) == 2 and all(s["file_pages"]["bytes"] > 0 and s["broken"] is None for s in servers)
    finally:
        pool.close()


def _peaks(run: runner.Run) -> dict[str, dict[str, int]]:
    out = {}
    for record in run.records:
        assert record.status == "ok", (record.case_id, record.error)
        out[record.case_id] = {"eager": record.eager["peak_memory_bytes"],
                               **({"compiled": record.compiled["peak_memory_bytes"],
                                   "compile": record.metrics["compile_peak_rss_bytes"]} if record.compiled else {})}
    return out


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the preloaded worker forks on Linux only")
def test_a_forked_and_a_spawned_cpu_case_report_the_same_peak_rss(tmp_path):
    def run(name: str, preload: bool) -> runner.Run:
        return runner.execute(runner.RunOptions(
            workloads=["mlp-classic"], scenarios=["forward"], compilers=["eager", "inductor"], devices=["cpu"],
            sizes=["tiny"], out_dir=str(tmp_path / name), ingest=False, policy=POLICY, preload=preload))

    forked_run, spawned_run = run("forked", True), run("spawned", False)
    assert {r.worker["start"] for r in forked_run.records} == {"preloaded"}
    assert {r.worker["start"] for r in spawned_run.records} == {"spawn"}
    servers = forked_run.config["worker_start"]["servers"]
    assert len(servers) == 2  # an eager case's, an inductor case's
    assert not any(m.startswith(HEAVY) for s in servers for m in s["preloaded"]), servers
    forked, spawned = _peaks(forked_run), _peaks(spawned_run)
    assert forked.keys() == spawned.keys() and len(forked) == 2
    for case_id, figures in forked.items():
        for kind, value in figures.items():
            other = spawned[case_id][kind]
            assert abs(value - other) <= PEAK_RSS_TOLERANCE * other, (case_id, kind, value >> 20, other >> 20)


BUILD = r'''
import json, sys, torch, torch._dynamo
from harness.model.workloads import WorkloadContext, get_workload, import_workload_module
from harness.run.forkserver import workload_preload
import_workload_module(sys.argv[1])
workload = get_workload(sys.argv[2])
declared = workload_preload(sys.argv[2])
workload.build(WorkloadContext("cpu", torch.float32, workload.batch_size, "tiny"))
print(json.dumps({"declared": declared, "missing": [m for m in declared if m not in sys.modules]}))
'''


def _declaring_modules() -> list[tuple[str, str]]:
    """(module, its first tiny workload) for each workload module that declares PRELOAD_MODULES."""
    import importlib

    from harness.model.workloads import WORKLOADS

    out = []
    for name in WORKLOAD_MODULES:
        if getattr(importlib.import_module(name), forkserver.PRELOAD_ATTR, ()):
            tiny = sorted(w for w, wl in WORKLOADS.items() if wl.source == name and "tiny" in wl.sizes)
            out.append((name, tiny[0]))
    return out


@pytest.mark.slow
def test_what_a_workload_module_declares_its_builds_import_they_do():
    # the declaration must hold, else a forked case's server holds modules its spawned twin never had
    declaring = _declaring_modules()
    assert len(declaring) >= 6, declaring  # hf, transformers zoo, llm, diffusion, diffusers zoo, SDXL pipeline
    # a fresh process per module (what its build imports is the subject), two at a time: the
    # processes are independent, and one at a time left one of CI's two cores idle
    with ThreadPoolExecutor(max_workers=2) as pool:
        builds = list(pool.map(lambda pair: subprocess.run([sys.executable, "-c", BUILD, *pair], capture_output=True,
                                                           text=True, cwd=ROOT, env=_env(), timeout=600), declaring))
    for (module, workload), done in zip(declaring, builds, strict=True):
        assert done.returncode == 0, (module, workload, done.stderr[-2000:])
        got = json.loads(done.stdout.strip().splitlines()[-1])
        assert got["declared"] and got["missing"] == [], (module, workload, got)
