"""Watching the inboxes with watchdog and posting typed events to the supervisor's loop.

One recursive watch per role folder (``memo/<role>/``), not one per inbox, for
two reasons: the claim (``inbox/`` -> ``active/``) is then a move inside the
watch, which watchdog reports at once (an unmatched move out of a watch is held
for 0.5 s and delays every event queued behind it), and an inbox folder deleted
and re-created is picked up by the recursive watch by itself.

The handler never raises: whatever goes wrong while classifying an event
becomes a ``RescanNeeded`` event, because watchdog's thread dies silently on an
exception in a handler.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from .events import Event, MemoGone, MemoSeen, RescanNeeded
from .memo import INBOX, is_memo_name

EVENT_TYPES = [
    FileMovedEvent,
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]


def classify(role: str, role_dir: str, event: FileSystemEvent) -> list[Event]:
    """The supervisor events one file-system event means; pure, so it is tested without threads."""
    inbox = os.path.join(role_dir, INBOX)
    out: list[Event] = []
    if event.is_directory:
        paths = [os.fsdecode(event.src_path), os.fsdecode(getattr(event, "dest_path", "") or "")]
        if any(p == inbox or p == role_dir for p in paths):
            out.append(RescanNeeded(f"folder {inbox} changed"))
        return out

    def in_inbox(path: str) -> bool:
        return os.path.dirname(path) == inbox and is_memo_name(os.path.basename(path))

    src = os.fsdecode(event.src_path)
    if isinstance(event, FileMovedEvent):
        dest = os.fsdecode(event.dest_path)
        if in_inbox(src):
            out.append(MemoGone(role, Path(src)))
        if in_inbox(dest):
            out.append(MemoSeen(role, Path(dest), complete=True))
    elif in_inbox(src):
        if isinstance(event, FileDeletedEvent):
            out.append(MemoGone(role, Path(src)))
        elif isinstance(event, FileClosedEvent):
            out.append(MemoSeen(role, Path(src), complete=True))
        else:  # created or modified: its writer may still be writing
            out.append(MemoSeen(role, Path(src), complete=False))
    return out


class _Handler(FileSystemEventHandler):
    def __init__(self, role: str, role_dir: Path, post: Callable[[Event], None]) -> None:
        self.role = role
        self.role_dir = str(role_dir)
        self.post = post

    def dispatch(self, event: FileSystemEvent) -> None:
        try:
            for item in classify(self.role, self.role_dir, event):
                self.post(item)
        except Exception as exc:  # noqa: BLE001 - the observer thread must survive anything
            try:
                self.post(RescanNeeded(f"error while handling {event!r}: {exc}"))
            except Exception:  # noqa: BLE001
                pass


class _OverflowSpy(logging.Handler):
    """watchdog only logs an inotify queue overflow; turn that log record into a rescan."""

    def __init__(self, post: Callable[[Event], None]) -> None:
        super().__init__(logging.WARNING)
        self.post = post

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            self.post(RescanNeeded("inotify queue overflowed"))


class InboxWatcher:
    """A watchdog observer over every role folder that can be checked and restarted."""

    def __init__(self, role_dirs: dict[str, Path], post: Callable[[Event], None]) -> None:
        self.role_dirs = role_dirs
        self.post = post
        self.observer: Observer | None = None  # type: ignore[valid-type]
        self._lock = threading.Lock()
        self._spy = _OverflowSpy(post)
        self._identities: dict[str, tuple[int, int]] = {}

    def start(self) -> None:
        logging.getLogger("watchdog").addHandler(self._spy)
        observer = Observer()
        for role, folder in self.role_dirs.items():
            (folder / INBOX).mkdir(parents=True, exist_ok=True)
            observer.schedule(_Handler(role, folder, self.post), str(folder), recursive=True, event_filter=EVENT_TYPES)
            info = folder.stat()
            self._identities[role] = (info.st_dev, info.st_ino)
        observer.daemon = True
        observer.start()
        self.observer = observer

    def healthy(self) -> str | None:
        """None when all is well, else why the observer must be restarted."""
        if self.observer is None or not self.observer.is_alive():
            return "the file watcher thread stopped"
        for role, folder in self.role_dirs.items():
            try:
                info = folder.stat()
            except FileNotFoundError:
                return f"folder {folder} was removed"
            if (info.st_dev, info.st_ino) != self._identities.get(role):
                return f"folder {folder} was replaced"
            if not (folder / INBOX).is_dir():
                return f"folder {folder / INBOX} was removed"
        return None

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        logging.getLogger("watchdog").removeHandler(self._spy)
        observer, self.observer = self.observer, None
        if observer is not None:
            try:
                observer.stop()
                observer.join(timeout=2)
            except Exception:  # noqa: BLE001 - a dead observer may fail to stop; it is gone either way
                pass
