"""Bridges to other tools: the pytest plugin and pytest-benchmark import/export.

May import: every layer below it (model ... report).
"""
