"""Measuring inside one worker process: build, compile, time, record.

Owns: the worker (child side of a case), the --compile-overlap lock, timers and stop policies, compile metrics
(Dynamo/AOTAutograd/Inductor breakdown, graph breaks, recompiles), device handling and
the environment capture.
May import: harness.model.
"""
