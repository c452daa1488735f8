"""Test-only faults for a real ``orchestrator up``: Python loads this at start-up when this folder is on PYTHONPATH.

Nothing here is part of the orchestrator; ``tests/test_failures.py`` and ``tests/test_watcher.py`` put
this folder on the PYTHONPATH of the process they start, with one of these variables set:

- ``FAULT_MARKER``: classifying a watcher event (inotify's or watchdog's) whose path contains its value
  raises, which proves an exception while handling one event costs nothing but a rescan;
- ``FAULT_REFUSE_PROMPT_PAIRING``: the watcher is told the prompt move pairing cannot be installed, with
  this value as the reason, which proves the start-up line and the slower pairing;
- ``FAULT_SPAWN_MARKER``: starting the agent of a memo whose name contains its value raises a plain
  ``RuntimeError`` (not a ``SpawnError``), which proves an unexpected error while starting fails the attempt.

The watcher modules (and the spawner) are changed right after they are first imported, and only in a process that imports it
(the orchestrator, not its agents). Its handler and ``InboxWatcher`` look ``classify`` and
``queue_problem`` up when they are built, so the replacements are the ones used.
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
INOTIFY = "orchestrator.intake.inotify"
SPAWNER = "orchestrator.agents.spawner"
MARKER_ENV = "FAULT_MARKER"
REFUSE_ENV = "FAULT_REFUSE_PROMPT_PAIRING"
SPAWN_ENV = "FAULT_SPAWN_MARKER"


def faulty_classify(classify: Callable[..., Any], marker: str) -> Callable[..., Any]:
    """``classify``, except that an event whose source or destination path contains ``marker`` raises."""

    def classify_or_fail(role: str, role_dir: str, event: Any) -> Any:
        paths = (os.fsdecode(event.src_path), os.fsdecode(getattr(event, "dest_path", "") or ""))
        if any(marker in path for path in paths):
            raise RuntimeError(f"injected fault for {paths[0]}")
        return classify(role, role_dir, event)

    return classify_or_fail


def faulty_inotify_classify(classify: Callable[..., Any], marker: str) -> Callable[..., Any]:
    """``InotifyWatcher.classify``, except that an event whose file name contains ``marker`` raises."""

    def classify_or_fail(self: Any, wd: int, mask: int, name: str) -> Any:
        if marker in name:
            raise RuntimeError(f"injected fault for {name}")
        return classify(self, wd, mask, name)

    return classify_or_fail


def faulty_start(start: Callable[..., Any], marker: str) -> Callable[..., Any]:
    """``ProcessSpawner.start``, except that a start for a memo whose name contains ``marker`` raises."""

    async def start_or_fail(self: Any, spec: Any, on_exit: Any) -> Any:
        if any(marker in path.name for path in spec.memo_paths):
            raise RuntimeError(f"injected fault for run {spec.run_id}")
        return await start(self, spec, on_exit)

    return start_or_fail


def inject(module: ModuleType) -> None:
    """Put the faults the environment asks for into the freshly imported watcher (or spawner) module."""
    if module.__name__ == SPAWNER:
        spawner = module.ProcessSpawner  # type: ignore[attr-defined]
        spawner.start = faulty_start(spawner.start, os.environ[SPAWN_ENV])
        return
    marker = os.environ.get(MARKER_ENV)
    if marker and module.__name__ == INOTIFY:
        watcher = module.InotifyWatcher  # type: ignore[attr-defined]
        watcher.classify = faulty_inotify_classify(watcher.classify, marker)
        return
    if marker:
        module.classify = faulty_classify(module.classify, marker)  # type: ignore[attr-defined]
    reason = os.environ.get(REFUSE_ENV)
    if reason:
        module.queue_problem = lambda: reason  # type: ignore[attr-defined]


class _InjectOnImport(importlib.abc.MetaPathFinder):
    """Finds the watcher modules through the other finders and has their loaders call ``inject`` after running them."""

    def __init__(self) -> None:
        self.waiting = {WATCHER, INOTIFY} | ({SPAWNER} if os.environ.get(SPAWN_ENV) else set())

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


if os.environ.get(MARKER_ENV) or os.environ.get(REFUSE_ENV) or os.environ.get(SPAWN_ENV):
    sys.meta_path.insert(0, _InjectOnImport())
