"""Synthetic run and history generators, for tests and benchmarks of the tooling.

Not part of a measurement path. May import: harness.model.
"""
