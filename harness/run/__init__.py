"""Running cases from the parent side: plan, isolate, journal, store.

Owns: the runner (one fresh worker per case, timeouts, signals), process isolation,
the resume journal, sharding, multi-GPU scheduling, compiles side by side on one device
(--compile-overlap), the torchrun launcher (distributed),
merging shards and the SQLite history.
May import: harness.model, harness.measure, suites/ (the workloads and named suites).
"""
