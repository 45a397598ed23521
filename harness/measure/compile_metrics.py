"""What the compiler did: stage times, graph breaks, recompiles, cache hits, skips.

Sources (facts from DESIGN.md):
- `torch._dynamo.utils.get_compilation_metrics()`: one entry per compiled frame; the Dynamo
  time contains AOTAutograd's, which contains Inductor's, so stages are differences.
- `torch._dynamo.utils.counters`: graph breaks, unique graphs, frames total/ok, cache hits,
  `cudagraph_skips`.
- The `graph_breaks` and `recompiles` log artifacts: the only place with the user code
  location of a break and the guard failure behind a recompile. A handler captures them
  (no stderr noise, no re-run as `torch._dynamo.explain` would do).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

GRAPH_BREAK_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"
RECOMPILE_LOGGER = "torch._dynamo.guards.__recompiles"

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


class CompileObserver:
    """Start before the first compiled call; `snapshot()` any time after."""

    def __init__(self) -> None:
        self.handler = _Capture()

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
            "compiled_frames": len(metrics),
        }


def stage_breakdown(metrics: list[Any]) -> dict[str, float]:
    """Seconds per stage summed over frames: dynamo (tracing only), aot_autograd (without
    inductor), inductor (without codegen), codegen, and their total."""
    def us(m: Any, name: str) -> float:
        return float(getattr(m, name, None) or 0) / 1e6

    total = sum(us(m, "dynamo_cumulative_compile_time_us") for m in metrics)
    aot = sum(us(m, "aot_autograd_cumulative_compile_time_us") for m in metrics)
    ind = sum(us(m, "inductor_cumulative_compile_time_us") for m in metrics)
    codegen = sum(us(m, "inductor_code_gen_cumulative_compile_time_us") for m in metrics)
    # backward graphs compile lazily, outside the Dynamo frame time: report the total as
    # the sum of the stages so the parts always add up
    dynamo = max(total - aot, 0.0)
    aot_only = max(aot - ind, 0.0)
    ind_only = max(ind - codegen, 0.0)
    return {
        "total": round(dynamo + aot_only + ind_only + codegen, 6),
        "dynamo": round(dynamo, 6),
        "aot_autograd": round(aot_only, 6),
        "inductor": round(ind_only, 6),
        "inductor_codegen": round(codegen, 6),
    }


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
