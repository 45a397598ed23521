"""The result model and the workload model: what a case is and what a record holds.

Owns: the run-file schema (Case, Record, Run, load/save, upgraders) and the typed record
payloads (Timing, Memory, ErrorInfo, metrics groups), the UserError base, workloads and
scenarios (the registries user code extends), accuracy checks, statistics and JSON file io.
May import: nothing else in harness (the bottom layer; torch only lazily); compiler/ for
CompilerConfig. harness.model.errors imports nothing, so compiler/ and suites/ use it.
"""
