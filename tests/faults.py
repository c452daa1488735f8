"""Faults put into the real watchers in-process (by ``monkeypatch``): classification that raises for one memo.

They prove that an exception while handling one event costs nothing but a rescan, with either
watcher: the tests build the watcher after patching, as ``InboxWatcher`` and its handler look
``classify`` up when they are built.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def faulty_classify(classify: Callable[..., Any], marker: str) -> Callable[..., Any]:
    """watchdog's ``classify``, except that an event whose source or destination path contains ``marker`` raises."""

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
