"""The command line: one module per group of commands, `main` dispatches.

The top layer: may import every other harness package; nothing imports it.
"""
