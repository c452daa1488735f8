"""The orchestrator's benchmark (`make bench`, `python bench/run.py`): real `orchestrator up` runs beside baselines.

``run`` is the command and the registry of scenarios; ``common`` what scenarios share (sizes, results,
the context); ``harness`` the benchmark's toolbox over the tests' harness (``tests/harness.py``); every
other module is one scenario. Imports point that way only: a scenario never imports ``run``.
"""
