"""Test-only faults for a real ``orchestrator up``: Python loads this at start-up when this folder is on PYTHONPATH.

Nothing here is part of the orchestrator. Two faults, each asked for by an environment variable of the `up` a
test starts (``fault_injection`` in ``__init__.py`` beside this):

- ``FAULT_REFUSE_PROMPT_PAIRING`` (``tests/test_watcher.py``, the start-up line when the prompt move pairing is
  refused): the watcher is told the pairing cannot be installed, with that value as the reason. It stays a real
  process because what it proves is `up`'s: the one line at start-up, then real renames paired at watchdog's own
  pace. ``InboxWatcher`` looks ``queue_problem`` up when it is built, so the replacement is the one used.
- ``FAULT_RAISE_IN`` = ``module:Class.method`` (``tests/test_endings.py``, the shutdown's steps): that method
  raises ``RuntimeError("injected fault in Class.method")`` whenever it is called, to prove that every later step
  of `up`'s shutdown still runs.

Every other fault is put in in-process (``tests/faults.py``, ``tests/replay.py``). A module is changed right after
it is first imported, and only in a process that imports it (the orchestrator, not its agents).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

WATCHER = "orchestrator.intake.watcher"
REFUSE_ENV = "FAULT_REFUSE_PROMPT_PAIRING"
RAISE_ENV = "FAULT_RAISE_IN"


def refuse_pairing(module: ModuleType) -> None:
    """Make the freshly imported watcher module refuse the prompt pairing, for the reason the environment gives."""
    reason = os.environ[REFUSE_ENV]
    module.queue_problem = lambda: reason  # type: ignore[attr-defined]


def raise_in(qualname: str) -> Callable[[ModuleType], None]:
    """Make ``Class.method`` of the freshly imported module raise whenever it is called."""
    owner_name, method = qualname.split(".")

    def inject(module: ModuleType) -> None:
        def fail(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError(f"injected fault in {qualname}")

        setattr(getattr(module, owner_name), method, fail)

    return inject


class _InjectOnImport(importlib.abc.MetaPathFinder):
    """Finds each module of ``injections`` through the other finders and has its loader call its injection after
    running it."""

    def __init__(self, injections: dict[str, Callable[[ModuleType], None]]) -> None:
        self.waiting = dict(injections)

    def find_spec(
        self,
        name: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        inject = self.waiting.pop(name, None)  # once is enough, and the lookup below must not find this finder again
        if inject is None:
            return None
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


_injections: dict[str, Callable[[ModuleType], None]] = {}
if os.environ.get(REFUSE_ENV):
    _injections[WATCHER] = refuse_pairing
if os.environ.get(RAISE_ENV):
    _module, _qualname = os.environ[RAISE_ENV].split(":")
    _injections[_module] = raise_in(_qualname)
if _injections:
    sys.meta_path.insert(0, _InjectOnImport(_injections))
