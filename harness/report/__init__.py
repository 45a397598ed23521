"""Presenting results: the HTML report, the dashboard, charts, terminal display, gate output.

May import: every layer below (model, measure, run, analysis, experiments).
"""
