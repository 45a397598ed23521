"""The command line: one module per group of commands, `main` dispatches.

`common` holds what the command modules share (exit codes, CliError, option helpers);
they import it, never `main`. The top layer: may import every other harness package;
nothing imports it.
"""
