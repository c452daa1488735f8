"""A test-only fault for a real ``orchestrator up``: Python loads this at start-up when this folder is on PYTHONPATH.

Nothing here is part of the orchestrator. One test (``tests/test_watcher.py``, the start-up line when
the prompt move pairing is refused) puts this folder on the PYTHONPATH of the `up` it starts, with
``FAULT_REFUSE_PROMPT_PAIRING`` set: the watcher is told the pairing cannot be installed, with that
value as the reason. It stays a real process because what it proves is `up`'s: the one line at
start-up, then real renames paired at watchdog's own pace. Every other fault is put in
in-process (``tests/faults.py``, ``tests/replay.py``).

The watcher module is changed right after it is first imported, and only in a process that imports it
(the orchestrator, not its agents). ``InboxWatcher`` looks ``queue_problem`` up when it is built, so the
replacement is the one used.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType

WATCHER = "orchestrator.intake.watcher"
REFUSE_ENV = "FAULT_REFUSE_PROMPT_PAIRING"


def inject(module: ModuleType) -> None:
    """Make the freshly imported watcher module refuse the prompt pairing, for the reason the environment gives."""
    reason = os.environ[REFUSE_ENV]
    module.queue_problem = lambda: reason  # type: ignore[attr-defined]


class _InjectOnImport(importlib.abc.MetaPathFinder):
    """Finds the watcher module through the other finders and has its loader call ``inject`` after running it."""

    def __init__(self) -> None:
        self.waiting = {WATCHER}

    def find_spec(
        self,
        name: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in self.waiting:
            return None
        self.waiting.discard(name)  # once is enough, and the lookup below must not find this finder again
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run_module = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            inject(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get(REFUSE_ENV):
    sys.meta_path.insert(0, _InjectOnImport())
