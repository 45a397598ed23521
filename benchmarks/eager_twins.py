"""The evidence behind eager-from-twin (harness/run/twins.py, docs/RESULTS.md "Eager figures").

For each `eager` case of a run, its eager block set against the eager block of every compiled
case of the same workload, scenario, device, dtype, batch size, size and options: absolute
peak memory, the peak's rise over the baseline, the peak over the eager first call (before any
compile; allocator devices, workers from 2026-12-02 on), and the median latency, plus whether
the rule derives that eager case (a stateless scenario on an allocator device: `derive`; a
stateful one that builds its state in every process, decode: `derive: first-call peak`, which
the first-call columns check) and, in a run where it did, which twin it came from.

    python benchmarks/eager_twins.py RUN.json            # run with --no-eager-from-twin: the check
    python benchmarks/eager_twins.py RUN.json --markdown  # the table docs/RESULTS.md quotes
    python benchmarks/eager_twins.py RUN.json --reference OWN.json  # derived peaks vs own-process ones

Read a run made with `--no-eager-from-twin` to check the rule (every eager case measured in
its own process); a derived eager row equals its twin's by construction.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.measure.worker import EAGER_FIRST_CALL_MEMORY_KEY  # noqa: E402
from harness.model.scenarios import compiled_holds_state  # noqa: E402
from harness.model.schema import Record, load_run  # noqa: E402
from harness.run.runner import load_registries  # noqa: E402
from harness.run.twins import DERIVABLE_MEMORY_KINDS, group_key, is_derived, plan_twins  # noqa: E402

MIB = float(1 << 20)


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MIB:.2f}"


def _ms(record: Record) -> str:
    median = record.eager.median if record.eager is not None else None
    return "-" if median is None else f"{median * 1e3:.3f}"


def _first_call_peak(record: Record) -> int | None:
    """The first call's peak plus the output the worker kept from it (what every later read
    holds; a read from before 2026-12-03 has no such count and gives the bare peak)."""
    read = (record.metrics or {}).get(EAGER_FIRST_CALL_MEMORY_KEY)
    if not isinstance(read, dict) or read.get("peak_bytes") is None:
        return None
    return read["peak_bytes"] + read.get("held_output_bytes", 0)


def reference_rows(records: list[Record], reference: list[Record]) -> list[dict[str, str]]:
    """Each derived eager case against the same case run in its own process (a run made with
    `--no-eager-from-twin`): the peaks in bytes and their difference. Latencies of two
    processes are not set side by side: the host's speed moves between processes."""
    own = {r.case_id: r for r in reference if r.eager is not None and not is_derived(r)}
    out = []
    for record in records:
        ref = own.get(record.case_id)
        if not is_derived(record) or ref is None or record.eager is None:
            continue
        derived, measured = record.eager.peak_memory_bytes, ref.eager.peak_memory_bytes
        out.append({"case": record.case_id, "source": record.eager.memory_source or "",
                    "derived_bytes": str(derived), "own_process_bytes": str(measured),
                    "diff_bytes": str(derived - measured) if derived is not None and measured is not None else "-"})
    return out


def _diffs(base: int | None, others: list[int | None]) -> str:
    return " / ".join(_mib(o - base) if base is not None and o is not None else "-" for o in others)


def rows(records: list[Record]) -> list[dict[str, str]]:
    """One row per eager case: its figures and each compiled twin's, with the differences."""
    groups: dict[tuple, list[Record]] = {}
    for record in records:
        groups.setdefault(group_key(record.case), []).append(record)
    # the runner's own rule (harness/run/twins.py), each device's memory kind read from its records
    kinds = {r.case.device: r.eager.memory_kind or "" for r in records if r.eager is not None}
    plan = plan_twins([r.case for r in records], memory_kind=lambda device: kinds.get(device, ""), env={})
    derives = plan.sources
    out = []
    for record in records:
        if record.case.compiler != "eager" or record.eager is None:
            continue
        twins = [r for r in groups[group_key(record.case)] if r.case.compiler != "eager" and r.eager is not None]
        kind = record.eager.memory_kind or ""
        stateful = compiled_holds_state(record.case.scenario)
        base = record.eager.peak_memory_bytes
        out.append({
            "case": f"{record.case.workload}/{record.case.scenario}",
            "rule": ("derive: first-call peak" if record.case_id in plan.first_call_peak else "derive")
                    if record.case_id in derives else
                    ("keep: stateful" if stateful else f"keep: {kind or 'no memory kind'}"
                     if kind not in DERIVABLE_MEMORY_KINDS else "keep: no twin (none, or only regional / in-place / freezing)"),
            "derived_from": (record.metrics.get("eager_source") or {}).get("from_case", "") if is_derived(record) else "",
            "peak_mib": " / ".join([_mib(base)] + [_mib(t.eager.peak_memory_bytes) for t in twins]),
            "peak_diff_mib": _diffs(base, [t.eager.peak_memory_bytes for t in twins]),
            # the eager case's last-warm-up peak against every first-call read, its own first
            "first_call_diff_mib": _diffs(base, [_first_call_peak(record)] + [_first_call_peak(t) for t in twins]),
            "rise_mib": " / ".join([_mib(record.eager.peak_memory_delta_bytes)]
                                   + [_mib(t.eager.peak_memory_delta_bytes) for t in twins]),
            "median_ms": " / ".join([_ms(record)] + [_ms(t) for t in twins]),
            "twins": ", ".join(t.case.compiler for t in twins),
        })
    return out


COLUMNS = ("case", "rule", "twins", "peak_mib", "peak_diff_mib", "first_call_diff_mib", "rise_mib", "median_ms",
           "derived_from")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a run file")
    parser.add_argument("--markdown", action="store_true", help="a markdown table")
    parser.add_argument("--reference", metavar="RUN",
                        help="a run of the same eager cases with --no-eager-from-twin: each derived eager peak "
                             "against its own-process peak, to the byte")
    args = parser.parse_args(argv)
    load_registries([])  # the built-in scenarios' declarations
    if args.reference:
        return _print(reference_rows(load_run(args.run).records, load_run(args.reference).records),
                      ("case", "source", "derived_bytes", "own_process_bytes", "diff_bytes"), args.markdown,
                      "derived eager peaks (RUN) against the same cases in their own processes (--reference)")
    table = rows(load_run(args.run).records)
    if not table:
        print(f"{args.run}: no eager case with an eager block", file=sys.stderr)
        return 1
    return _print(table, COLUMNS, args.markdown,
                  "values: the eager case first, then each compiled twin (order of 'twins'); diff = twin - eager case;"
                  " first_call_diff: each process's eager first-call peak plus its kept output (the eager case's own"
                  " first) - the eager case's peak")


def _print(table: list[dict[str, str]], columns: tuple[str, ...], markdown: bool, legend: str) -> int:
    if not table:
        print("no rows: no derived eager case with a reference, or no eager case", file=sys.stderr)
        return 1
    print(legend)
    if markdown:
        print("| " + " | ".join(columns) + " |")
        print("|" + "---|" * len(columns))
        for row in table:
            print("| " + " | ".join(row[c] for c in columns) + " |")
        return 0
    widths = {c: max(len(c), *(len(r[c]) for r in table)) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in table:
        print("  ".join(row[c].ljust(widths[c]) for c in columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
