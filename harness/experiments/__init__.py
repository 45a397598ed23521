"""Experiments built from many worker runs: A/B, the compile lifecycle, shape sweeps.

May import: harness.model, harness.measure, harness.run (not analysis: the two are peers).
"""
