"""What the compiler did: stage times, graph breaks, recompiles, cache hits, skips.

Sources (facts from DESIGN.md):
- `torch._dynamo.utils.get_compilation_metrics()`: one entry per compiled frame, and one per
  lazily compiled backward graph; inside an entry the Dynamo time (a backward: its backward
  time) contains AOTAutograd's, which contains Inductor's, so stages are differences taken
  inside each entry (`stage_breakdown`).
- `torch._dynamo.utils.counters`: graph breaks, unique graphs, frames total/ok, cache hits,
  `cudagraph_skips`.
- The `graph_breaks` and `recompiles` log artifacts: the only place with the user code
  location of a break and the guard failure behind a recompile. A handler captures them
  (no stderr noise, no re-run as `torch._dynamo.explain` would do).
- Cache layers (`cache_layers`): hits, misses and bypasses from torch's counters
  (`counters["inductor"]["fxgraph_cache_*"]`, `counters["aot_autograd"]["autograd_cache_*"]`,
  `torch._inductor.remote_cache.cache_stats` for the autotune cache); the bypass reason is the
  exception torch logs at INFO when it bypasses ("Bypassing FX Graph Cache because ..."),
  taken from the log record's arguments; seconds saved by FX-graph hits are torch's own figure
  (the original compile time of each hit graph, which torch adds to the frame's
  `distributed_ephemeral_timeout_us`).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

GRAPH_BREAK_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"
RECOMPILE_LOGGER = "torch._dynamo.guards.__recompiles"
# torch logs a cache bypass (with the exception that caused it) at INFO on these loggers
BYPASS_LOGGERS = {"torch._inductor.codecache": "fx_graph", "torch._functorch._aot_autograd.autograd_cache": "aot_autograd"}
CACHE_LAYERS = ("fx_graph", "aot_autograd", "autotune", "mega_cache")

_BREAK_AT = re.compile(r"Graph break (?:\(user stack suppressed due to duplicate graph break\) )?in user code at (\S+):(\d+)")
_RECOMPILE_AT = re.compile(r"Recompiling function (\S+) in (\S+):(\d+)")


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: dict[str, list[str]] = {"breaks": [], "recompiles": []}

    def emit(self, record: logging.LogRecord) -> None:
        key = "breaks" if record.name.endswith("__graph_breaks") else "recompiles"
        try:
            self.messages[key].append(record.getMessage())
        except Exception:  # a malformed log record must not fail the case
            pass


class _BypassCapture(logging.Handler):
    """Keeps the reason of every cache bypass; forwards warnings and errors to torch's own
    handlers (these loggers stop propagating while we listen at INFO)."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.reasons: dict[str, Counter[str]] = {layer: Counter() for layer in BYPASS_LOGGERS.values()}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if isinstance(record.msg, str) and record.msg.startswith("Bypassing") and record.args:
                args = record.args if isinstance(record.args, tuple) else (record.args,)
                self.reasons[BYPASS_LOGGERS[record.name]][str(args[0])[:300]] += 1
            elif record.levelno >= logging.WARNING:
                logging.getLogger("torch").handle(record)
        except Exception:  # a malformed log record must not fail the case
            pass


def _autotune_stats() -> dict[str, int]:
    """Autotune-cache gets counted by torch's cache stats (local and remote backends); the
    counters are process-wide, so callers take differences."""
    try:
        from torch._inductor.remote_cache import cache_stats
    except ImportError:  # older torch
        return {}
    stats = getattr(cache_stats, "_stats", {}) or {}
    out = {"hit": 0, "miss": 0}
    for name, stat in list(stats.items()):
        if "Autotune" in name:
            out["hit"] += int(getattr(stat, "hit", 0) or 0)
            out["miss"] += int(getattr(stat, "miss", 0) or 0)
    return out


class CompileObserver:
    """Start before the first compiled call; `snapshot()` any time after."""

    def __init__(self) -> None:
        self.handler = _Capture()
        self.bypasses = _BypassCapture()
        self.autotune_before: dict[str, int] = {}

    def start(self) -> CompileObserver:
        import torch._dynamo.utils as dutils
        import torch._logging

        dutils.counters.clear()
        try:
            dutils.clear_compilation_metrics()
        except AttributeError:  # older torch
            pass
        torch._logging.set_logs(graph_breaks=True, recompiles=True)
        for name in (GRAPH_BREAK_LOGGER, RECOMPILE_LOGGER):
            logger = logging.getLogger(name)
            logger.addHandler(self.handler)
            logger.propagate = False  # keep them out of the worker's stderr
        for name in BYPASS_LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(self.bypasses)
            logger.setLevel(logging.INFO)
            logger.propagate = False  # INFO lines stay out of stderr; warnings are forwarded
        self.autotune_before = _autotune_stats()
        return self

    def snapshot(self) -> dict[str, Any]:
        import torch._dynamo.utils as dutils

        counters = {k: dict(v) for k, v in dutils.counters.items()}
        metrics = list(dutils.get_compilation_metrics())
        breaks = parse_graph_breaks(self.handler.messages["breaks"])
        recompiles = parse_recompiles(self.handler.messages["recompiles"])
        gb_counter = counters.get("graph_break", {})
        return {
            "graph_breaks": int(sum(gb_counter.values())),
            "unique_graph_breaks": len(gb_counter),
            "graph_break_reasons": breaks,
            "recompiles": len(recompiles),
            "recompile_reasons": recompiles,
            "graphs": int(counters.get("stats", {}).get("unique_graphs", 0)),
            "calls_captured": int(counters.get("stats", {}).get("calls_captured", 0)),
            "frames_total": int(counters.get("frames", {}).get("total", 0)),
            "frames_ok": int(counters.get("frames", {}).get("ok", 0)),
            "cudagraph_skips": int(counters.get("inductor", {}).get("cudagraph_skips", 0)),
            "compile_breakdown_s": stage_breakdown(metrics),
            "cache": cache_counts(metrics, counters),
            "cache_layers": cache_layers(metrics, counters, self.bypasses.reasons,
                                         _stat_delta(_autotune_stats(), self.autotune_before)),
            "ops_per_graph": ops_per_graph(metrics),
            "structured_logging_overhead_s": round(sum(float(getattr(m, "structured_logging_overhead_us", None) or 0)
                                                       for m in metrics) / 1e6, 6),
            "compiled_frames": len(metrics),
        }


def _stat_delta(now: dict[str, int], before: dict[str, int]) -> dict[str, int] | None:
    return {k: now[k] - before.get(k, 0) for k in now} if now else None


def _cache_enabled() -> dict[str, bool | None]:
    """Whether each layer is switched on in this process (explains a layer with no events)."""
    out: dict[str, bool | None] = {"fx_graph": None, "aot_autograd": None, "autotune": None}
    try:
        import torch._inductor.config as ic

        out["fx_graph"] = bool(getattr(ic, "fx_graph_cache", False)) and not getattr(ic, "force_disable_caches", False)
        out["autotune"] = bool(getattr(ic, "autotune_local_cache", False)) and not getattr(ic, "force_disable_caches", False)
    except ImportError:
        pass
    try:
        import torch._functorch.config as fc

        out["aot_autograd"] = bool(getattr(fc, "enable_autograd_cache", False)) and bool(out["fx_graph"])
    except ImportError:
        pass
    return out


def cache_layers(metrics: list[Any], counters: dict[str, dict[str, int]], bypass_reasons: dict[str, Counter[str]],
                 autotune: dict[str, int] | None) -> dict[str, dict[str, Any]]:
    """Hits, misses, bypasses (with reasons) and seconds saved per cache layer.

    `saved_s` is torch's own figure where torch has one (FX graph: the compile time the hit
    graphs took when they were built); None where torch does not expose it in-process
    (AOTAutograd writes it only to the structured trace). Mega-Cache is not a lookup layer:
    its artifacts pre-fill the others, so its hits show there; whoever loads it sets `used`."""
    inductor, aot = counters.get("inductor", {}), counters.get("aot_autograd", {})
    enabled = _cache_enabled()

    def reasons(layer: str) -> list[dict[str, Any]]:
        return [{"reason": r, "count": n} for r, n in bypass_reasons.get(layer, Counter()).most_common()]

    fx_saved_us = sum(float(getattr(m, "distributed_ephemeral_timeout_us", None) or 0) for m in metrics)
    return {
        "fx_graph": {"enabled": enabled["fx_graph"], "hits": int(inductor.get("fxgraph_cache_hit", 0)),
                     "misses": int(inductor.get("fxgraph_cache_miss", 0)),
                     "bypasses": int(inductor.get("fxgraph_cache_bypass", 0)), "bypass_reasons": reasons("fx_graph"),
                     "saved_s": round(fx_saved_us / 1e6, 6) if inductor.get("fxgraph_cache_hit") else 0.0},
        "aot_autograd": {"enabled": enabled["aot_autograd"], "hits": int(aot.get("autograd_cache_hit", 0)),
                         "misses": int(aot.get("autograd_cache_miss", 0)),
                         "bypasses": int(aot.get("autograd_cache_bypass", 0)), "bypass_reasons": reasons("aot_autograd"),
                         "saved_s": None if aot.get("autograd_cache_hit") else 0.0},
        "autotune": {"enabled": enabled["autotune"], "hits": autotune.get("hit") if autotune else None,
                     "misses": autotune.get("miss") if autotune else None, "bypasses": None, "bypass_reasons": [],
                     "saved_s": None},
        "mega_cache": {"used": False},
    }


def layers_hit(layers: dict[str, dict[str, Any]] | None) -> list[str]:
    """Names of the layers that served at least one hit, in lookup order."""
    layers = layers or {}
    hit = [name for name in CACHE_LAYERS[:3] if (layers.get(name) or {}).get("hits")]
    if (layers.get("mega_cache") or {}).get("used"):
        hit.insert(0, "mega_cache")
    return hit


def ops_per_graph(metrics: list[Any]) -> list[dict[str, Any]]:
    """Ops captured in each compiled graph (Dynamo's `graph_op_count` per frame compile)."""
    out = []
    for m in metrics:
        ops = getattr(m, "graph_op_count", None)
        if ops is None:
            continue
        out.append({"compile_id": str(getattr(m, "compile_id", "") or ""), "frame": str(getattr(m, "co_name", "") or ""),
                    "location": f"{getattr(m, 'co_filename', '')}:{getattr(m, 'co_firstlineno', '')}", "ops": int(ops)})
    return out


# The nested timers of one compilation-metrics entry, outermost first. A frame compile has
# Dynamo's time, which holds AOTAutograd's, which holds Inductor's, which holds its codegen.
# A lazily compiled backward (torch 2.13: its own entry, no `is_forward`, no Dynamo time)
# has `backward_cumulative_compile_time_us` where the frame has AOTAutograd's: AOTAutograd
# runs the backward compile and calls Inductor inside it.
_STAGE_TIMERS = (
    ("dynamo", ("dynamo_cumulative_compile_time_us",)),
    ("aot_autograd", ("aot_autograd_cumulative_compile_time_us", "backward_cumulative_compile_time_us")),
    ("inductor", ("inductor_cumulative_compile_time_us",)),
    ("inductor_codegen", ("inductor_code_gen_cumulative_compile_time_us",)),
)
STAGES = tuple(name for name, _ in _STAGE_TIMERS)


def is_backward_entry(m: Any) -> bool:
    """A lazily compiled backward graph's entry: it has a backward timer and no Dynamo time
    (the backward is compiled on the first `.backward()`, outside every Dynamo frame)."""
    return bool(getattr(m, "backward_cumulative_compile_time_us", None)) and not getattr(
        m, "dynamo_cumulative_compile_time_us", None)


def entry_stages(m: Any) -> dict[str, float]:
    """Seconds of each stage in one entry: each timer minus the next inner one present.

    A stage an entry has no timer for is 0 (a frame without a graph has Dynamo only; an
    `aot_eager` backward has AOTAutograd only). Where torch's rounding makes an inner timer
    exceed its outer one, the outer one is raised to it, so the stages still sum to the
    entry's outermost timer and none is negative."""
    levels: list[tuple[str, float]] = []
    for name, fields in _STAGE_TIMERS:
        value = next((float(v) for f in fields if (v := getattr(m, f, None))), None)
        if value is not None:
            levels.append((name, value / 1e6))
    out = dict.fromkeys(STAGES, 0.0)
    inner = 0.0
    for name, value in reversed(levels):  # innermost first: each level at least its inner one
        value = max(value, inner)
        out[name] = value - inner
        inner = value
    return out


def stage_breakdown(metrics: list[Any]) -> dict[str, float]:
    """Seconds per stage summed over every entry, forward frames and lazily compiled
    backward graphs alike: dynamo (tracing only), aot_autograd (without inductor; for a
    backward, AOTAutograd's backward compile without Inductor), inductor (without codegen),
    codegen; `total` is their sum, and `backward` says how much of it the backward
    compiles took. Differences are taken inside each entry, never across entries: the
    backward's Inductor time sits outside every frame's AOTAutograd time, so subtracting
    sums (as before 2026-12-01) took it from the forward's AOTAutograd and clamped it at 0."""
    sums = dict.fromkeys(STAGES, 0.0)
    backward = 0.0
    for m in metrics:
        stages = entry_stages(m)
        for name, value in stages.items():
            sums[name] += value
        if is_backward_entry(m):
            backward += sum(stages.values())
    return {"total": round(sum(sums.values()), 6), **{k: round(v, 6) for k, v in sums.items()},
            "backward": round(backward, 6)}


def cache_counts(metrics: list[Any], counters: dict[str, dict[str, int]]) -> dict[str, int]:
    def total(name: str) -> int:
        return int(sum(getattr(m, name, None) or 0 for m in metrics))

    return {
        "fx_graph_hit": total("inductor_fx_local_cache_hit_count"),
        "fx_graph_miss": total("inductor_fx_local_cache_miss_count"),
        "aot_autograd_hit": total("aotautograd_local_cache_hit_count"),
        "aot_autograd_miss": total("aotautograd_local_cache_miss_count"),
    }


def parse_graph_breaks(messages: list[str]) -> list[dict[str, Any]]:
    """Group logged breaks by (reason, location): [{'reason', 'location', 'count', 'user_stack'}]."""
    grouped: Counter[tuple[str, str]] = Counter()
    stacks: dict[tuple[str, str], str] = {}
    for msg in messages:
        m = _BREAK_AT.search(msg)
        location = f"{m.group(1)}:{m.group(2)}" if m else "unknown"
        reason = _reason_text(msg)
        key = (reason, location)
        grouped[key] += 1
        if "User code traceback:" in msg and key not in stacks:
            stacks[key] = msg.split("User code traceback:", 1)[1].strip()
    return [
        {"reason": r, "location": loc, "count": n, "user_stack": stacks.get((r, loc), ""),
         "user_location": user_location(stacks.get((r, loc), "")) or loc}
        for (r, loc), n in grouped.most_common()
    ]


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def user_location(stack: str) -> str | None:
    """Innermost frame of the user stack outside torch itself: a break inside
    `torch/optim/optimizer.py` is reported where the user's code called into it."""
    import torch

    torch_dir = str(Path(torch.__file__).resolve().parent)
    frames = [(f, ln) for f, ln in _FRAME.findall(stack) if not str(Path(f).resolve()).startswith(torch_dir)]
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else None


def _reason_text(msg: str) -> str:
    body = msg.split("Graph Break Reason:", 1)[1] if "Graph Break Reason:" in msg else msg
    body = body.split("User code traceback:", 1)[0]
    lines = [ln.strip() for ln in body.strip().splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith(("Hint:", "Developer debug context", "For more details"))]
    return " | ".join(keep)[:500]


def parse_recompiles(messages: list[str]) -> list[dict[str, Any]]:
    out = []
    for msg in messages:
        m = _RECOMPILE_AT.search(msg)
        guards = [ln.strip()[2:] for ln in msg.splitlines() if ln.strip().startswith("- ")]
        out.append(
            {
                "function": m.group(1) if m else "unknown",
                "location": f"{m.group(2)}:{m.group(3)}" if m else "unknown",
                "reason": "; ".join(guards)[:500] or msg[:500],
            }
        )
    return out


class CompileMemoryProbe:
    """Host peak RSS (and the device allocator's peak) over the compile phase.

    Linux: the RSS high-water mark (VmHWM) is reset through /proc/self/clear_refs ("5") when
    the phase starts and read when it ends. Only this process counts: Inductor's compile
    worker pool and the C++ compiler it spawns are separate processes. Where the reset is
    impossible the peak is the process's lifetime peak; `host_peak_reset_ok` says which."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.host_before: int | None = None
        self.reset_ok = False

    def start(self) -> CompileMemoryProbe:
        from harness.measure.devices import cpu_peak_rss, cpu_reset_peak_rss

        self.host_before = cpu_reset_peak_rss()
        peak = cpu_peak_rss()
        self.reset_ok = peak is not None and self.host_before is not None and peak <= self.host_before * 1.05 + (8 << 20)
        if self.device.type != "cpu":
            self.device.reset_peak_memory()
        return self

    def stop(self) -> dict[str, Any]:
        from harness.measure.devices import cpu_peak_rss

        host_peak = cpu_peak_rss()
        device_peak = self.device.peak_memory() if self.device.type != "cpu" else None
        return {
            "compile_peak_rss_bytes": host_peak,
            "compile_rss_before_bytes": self.host_before,
            "compile_rss_delta_bytes": (host_peak - self.host_before) if host_peak and self.host_before else None,
            "compile_peak_rss_reset_ok": self.reset_ok,
            # a CPU build has no device allocator: None, never 0 (DESIGN: never report 0 as a peak)
            "compile_device_peak_bytes": device_peak or None,
        }
