"""Watching the inboxes with watchdog and posting typed events to the supervisor's loop.

One recursive watch per role folder (``memo/<role>/``), not one per inbox, for
two reasons: the claim (``inbox/`` -> ``active/``) is then a move inside the
watch, which watchdog reports at once (an unmatched move out of a watch is held
for 0.5 s and delays every event queued behind it), and an inbox folder deleted
and re-created is picked up by the recursive watch by itself.

Two corrections to watchdog's inotify backend: a paired move is passed on the
moment its second half arrives (``_PromptDelayedQueue``; watchdog itself may
sleep the whole 0.5 s first), and a memo renamed in from outside the watch is
reported as a move, so it counts as complete at once instead of waiting to
settle like a file still being written (``generate_full_events``).

The handler never raises: whatever goes wrong while classifying an event
becomes a ``RescanNeeded`` event, because watchdog's thread dies silently on an
exception in a handler.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
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
from watchdog.utils.delayed_queue import DelayedQueue

from orchestrator.core.events import Event, MemoGone, MemoSeen, RescanNeeded
from orchestrator.intake.memo import INBOX, is_memo_name

# how often watchdog's dispatch thread wakes when no event comes (its default, 1 s, is most of an idle
# orchestrator's CPU time); events themselves are dispatched at once, whatever this is
OBSERVER_WAKE = 10.0

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


Classify = Callable[[str, str, FileSystemEvent], list[Event]]


class _Handler(FileSystemEventHandler):
    def __init__(self, role: str, role_dir: Path, post: Callable[[Event], None],
                 classify_event: Classify | None = None) -> None:  # fmt: skip
        self.role = role
        self.role_dir = str(role_dir)
        self.post = post
        self.classify_event = classify_event if classify_event is not None else classify

    def dispatch(self, event: FileSystemEvent) -> None:
        try:
            for item in self.classify_event(self.role, self.role_dir, event):
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


class _PromptDelayedQueue(DelayedQueue):  # type: ignore[type-arg]
    """watchdog's queue that holds a moved-from event up to 0.5 s for its moved-to half, without the stall.

    watchdog's own ``get`` sleeps the whole delay once a moved-from event is at the head, even when the
    moved-to half arrives a moment later and the pair is queued; so any rename in a watched folder (a memo
    renamed into its inbox, every claim) could hold back every event behind it for up to half a second.
    This ``get`` waits on the queue's condition, which the pair's ``put`` signals: a paired move goes out
    at once and an unpaired one still waits its full delay. ``put`` is ours too, to own the clock.
    """

    def __init__(self, delay: float) -> None:
        super().__init__(delay)
        self._hold = float(delay)

    def put(self, element, delay: bool = False) -> None:  # type: ignore[no-untyped-def,override]
        with self._not_empty:
            self._queue.append((element, time.monotonic(), delay))
            self._not_empty.notify()

    def get(self):  # type: ignore[no-untyped-def]
        with self._not_empty:
            while True:
                while not self._queue and not self._closed:
                    self._not_empty.wait()
                if self._closed:
                    return None
                head, inserted, delayed = self._queue[0]
                left = inserted + self._hold - time.monotonic() if delayed else 0.0
                if left <= 0:
                    self._queue.popleft()
                    return head
                self._not_empty.wait(left)


def _pair_moves_promptly() -> None:
    """Have watchdog's inotify move grouping use ``_PromptDelayedQueue``, if this watchdog is laid out as expected."""
    probe = DelayedQueue(0.5)
    if not all(hasattr(probe, name) for name in ("_not_empty", "_queue", "_closed")):
        return
    for name in ("watchdog.observers.inotify_move_event_grouper", "watchdog.observers.inotify_buffer"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if getattr(module, "DelayedQueue", None) is DelayedQueue:
            module.DelayedQueue = _PromptDelayedQueue  # type: ignore[attr-defined]


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
        _pair_moves_promptly()
        try:
            # an unpaired move into a watched folder is reported as a move (complete), not as a created file
            observer = Observer(timeout=OBSERVER_WAKE, generate_full_events=True)
        except TypeError:  # an observer other than inotify's
            observer = Observer(timeout=OBSERVER_WAKE)
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
        # a folder removed and made again may get the same inode number back, but its watch ended with it
        for emitter in list(self.observer.emitters):
            if not emitter.is_alive() or emitter.stopped_event.is_set():
                return f"the watch on {emitter.watch.path} ended (its folder was removed)"
        return None

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        observer, self.observer = self.observer, None
        if observer is not None:
            try:
                observer.stop()
                observer.join(timeout=2)
            except Exception:  # noqa: BLE001 - a dead observer may fail to stop; it is gone either way
                pass
        # only now: while the threads stop, watchdog logs benign errors that, with no handler left on its
        # logger, logging's last resort would print raw on stderr
        logging.getLogger("watchdog").removeHandler(self._spy)
