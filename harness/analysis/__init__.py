"""Judging results: compare runs, thresholds, noise tables, expected counts.

May import: harness.model, harness.measure, harness.run.
"""
