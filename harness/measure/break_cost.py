"""What each graph break costs at run time: the eager time it forces and how often it runs.

A graph break splits a frame: Dynamo runs the graph before the break, runs the breaking
instruction eagerly, then calls a resume function (`torch_dynamo_resume_in_<fn>_at_<line>`)
that is compiled as a frame of its own. Under `torch.profiler` every compiled frame's
execution is a "Torch-Compiled Region: <compile id>" event, and the compiled graph inside it
is a "CompiledFunction" (AOTAutograd) or "## Call CompiledFxGraph ..." (Inductor) event. The
resume function is called from inside the breaking frame's region, so regions nest:

    region 0/0 [forward]  = graph(0/0) + eager break at line L + region 1/0 [resume_at_L]

The time of a region that is neither a compiled graph nor a nested region is the eager
fallback of the break that ended its graph (plus Dynamo's glue around it); the break's line
is in the name of the resume region directly inside. Counting those regions gives how many
times each break ran. The pass runs a few calls under the profiler after the timed rounds,
only for cases with graph breaks: the profiler's per-op overhead inflates eager time a
little, so the figures rank breaks and size them, they are not latency.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

REGION_PREFIX = "Torch-Compiled Region: "
GRAPH_EVENT_PREFIXES = ("CompiledFunction", "## Call CompiledFxGraph")
_RESUME = re.compile(r"torch_dynamo_resume_in_(.+)_at_(\d+)$")
NO_BREAK = "(no break: frame entry and exit)"


@dataclass(frozen=True)
class Span:
    """One profiler event on one thread, in microseconds."""

    name: str
    start_us: float
    end_us: float
    thread: int = 0

    @property
    def us(self) -> float:
        return max(self.end_us - self.start_us, 0.0)

    def contains(self, other: Span) -> bool:
        return (other is not self and other.thread == self.thread and other.start_us >= self.start_us
                and other.end_us <= self.end_us)


def union_us(spans: Iterable[Span]) -> float:
    """Length of the union of intervals (nested or overlapping spans counted once)."""
    total, end = 0.0, float("-inf")
    for s in sorted(spans, key=lambda s: s.start_us):
        if s.end_us <= end:
            continue
        total += s.end_us - max(s.start_us, end)
        end = s.end_us
    return total


def _outermost(spans: list[Span]) -> list[Span]:
    return [s for s in spans if not any(o.contains(s) for o in spans)]


def break_location(resume_name: str, filename: str) -> str | None:
    """'file:line' of the break a resume function resumes after, from its name."""
    m = _RESUME.match(resume_name)
    return f"{filename}:{m.group(2)}" if m else None


def attribute(spans: Sequence[Span], frames: dict[str, tuple[str, str]], calls: int) -> dict[str, Any]:
    """Eager time and runs per break location, per call.

    `frames` maps compile id ('0/0') -> (co_name, co_filename) from the compilation metrics."""
    regions = [s for s in spans if s.name.startswith(REGION_PREFIX)]
    graphs = _outermost([s for s in spans if s.name.startswith(GRAPH_EVENT_PREFIXES)])
    costs: dict[str, dict[str, Any]] = {}
    for region in regions:
        inner_regions = [r for r in regions if region.contains(r)]
        inner = inner_regions + [g for g in graphs if region.contains(g)]
        eager_us = max(region.us - union_us(inner), 0.0)
        location = NO_BREAK
        for child in sorted(_outermost(inner_regions), key=lambda r: r.start_us):
            co_name, filename = frames.get(child.name[len(REGION_PREFIX):], ("", ""))
            found = break_location(co_name, filename)
            if found:
                location = found
                break
        entry = costs.setdefault(location, {"location": location, "runs": 0, "eager_us": 0.0, "frames": set()})
        entry["runs"] += 1
        entry["eager_us"] += eager_us
        entry["frames"].add(frames.get(region.name[len(REGION_PREFIX):], ("?", ""))[0])
    calls = max(calls, 1)
    ranked = sorted(costs.values(), key=lambda e: -e["eager_us"])
    return {
        "breaks": [{"location": e["location"], "runs_per_call": e["runs"] / calls,
                    "eager_s_per_call": round(e["eager_us"] / calls / 1e6, 9), "frames": sorted(e["frames"])}
                   for e in ranked],
        "graph_s_per_call": round(union_us(graphs) / calls / 1e6, 9),
        "regions_s_per_call": round(union_us(_outermost(regions)) / calls / 1e6, 9),
    }


def profile_spans(fn: Callable[[], Any], calls: int, sync: Callable[[], None]) -> tuple[list[Span], float]:
    """Run `fn` `calls` times under the CPU profiler; returns (spans, wall seconds per call)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=False, with_stack=False) as prof:
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        wall = (time.perf_counter() - start) / calls
    wanted = (REGION_PREFIX, *GRAPH_EVENT_PREFIXES)
    spans = [Span(e.name, float(e.time_range.start), float(e.time_range.end), int(getattr(e, "thread", 0) or 0))
             for e in prof.events() if e.name.startswith(wanted)]
    return spans, wall


def frames_by_compile_id(metrics: Iterable[Any]) -> dict[str, tuple[str, str]]:
    """compile id -> (co_name, co_filename). A lazily compiled backward graph gets an entry of
    its own under the forward's compile id with no frame name: it must not hide the frame's."""
    out: dict[str, tuple[str, str]] = {}
    for m in metrics:
        cid, name = getattr(m, "compile_id", None), getattr(m, "co_name", None)
        if cid is not None and name:
            out[str(cid)] = (str(name), str(getattr(m, "co_filename", "") or ""))
    return out


def measure_break_costs(fn: Callable[[], Any], sync: Callable[[], None], calls: int = 3) -> dict[str, Any]:
    """Profile `calls` calls of a compiled callable and attribute the eager time to breaks."""
    import torch._dynamo.utils as dutils

    spans, wall = profile_spans(fn, calls, sync)
    result = attribute(spans, frames_by_compile_id(dutils.get_compilation_metrics()), calls)
    result["calls"] = calls
    result["wall_s_per_call"] = round(wall, 9)
    # everything that was not a compiled graph: eager fallbacks, Dynamo glue, Python around it
    result["outside_graphs_s_per_call"] = round(max(wall - result["graph_s_per_call"], 0.0), 9)
    result["note"] = "measured under torch.profiler (per-op overhead inflates eager time); ranks and sizes breaks"
    return result


def merge_into_reasons(reasons: list[dict[str, Any]], costs: dict[str, Any]) -> list[dict[str, Any]]:
    """Add runs/eager time to each logged break, costliest first. Joined on the break's
    location; a break inside torch (the optimizer) is logged at torch's line while its resume
    function names the user line that called in, so an unmatched cost then joins the first
    break whose `user_location` is that line (one break only: a cost is never counted twice)."""
    by_location = {b["location"]: b for b in costs.get("breaks", [])}
    out = [{k: v for k, v in item.items() if k not in ("runs_per_call", "eager_s_per_call")} for item in reasons]
    used: set[str] = set()
    for item in out:
        location = str(item.get("location", ""))
        if location in by_location:
            _put_cost(item, by_location[location])
            used.add(location)
    for item in out:
        user = str(item.get("user_location") or "")
        if "eager_s_per_call" not in item and user in by_location and user not in used:
            _put_cost(item, by_location[user])
            used.add(user)
    for item in out:
        item.setdefault("runs_per_call", None)
        item.setdefault("eager_s_per_call", None)
    return sorted(out, key=lambda r: (-(r.get("eager_s_per_call") or 0.0), -int(r.get("count") or 0)))


def _put_cost(item: dict[str, Any], cost: dict[str, Any]) -> None:
    item["runs_per_call"] = cost["runs_per_call"]
    item["eager_s_per_call"] = cost["eager_s_per_call"]
