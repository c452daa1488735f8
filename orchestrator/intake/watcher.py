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

The first correction reaches into watchdog, so it is fenced: it goes only into
the queues of this watcher's own observer, never into watchdog's classes, and
only once ``queue_problem`` has checked on a probe queue the behaviour it
relies on. When it cannot go in, ``InboxWatcher.patch_problem`` says why in one
line for the start-up log, and watchdog's own queue pairs the moves: correct,
but a rename may then be reported up to 0.5 s late.

The handler never raises: whatever goes wrong while classifying an event
becomes a ``RescanNeeded`` event, because watchdog's thread dies silently on an
exception in a handler.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

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
from watchdog.observers.api import EventEmitter
from watchdog.utils.delayed_queue import DelayedQueue

from orchestrator.core.events import Event, MemoGone, MemoSeen, RescanNeeded
from orchestrator.intake.folders import folder_problem
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
    def __init__(
        self, role: str, role_dir: Path, post: Callable[[Event], None], classify_event: Classify | None = None
    ) -> None:
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


@dataclass(frozen=True)
class _QueueLayout:
    """What ``_PromptDelayedQueue.get`` relies on in watchdog's ``DelayedQueue``, as found on a probe."""

    clock: Callable[[], float]  # the clock ``put`` stamps each element with
    delay_attr: str  # the attribute that keeps the delay given to the constructor


def _probe_layout(queue_class: type) -> _QueueLayout | str:
    """Check on a throw-away ``queue_class(0.25)`` that it behaves as ``_PromptDelayedQueue.get`` assumes."""
    try:
        probe = queue_class(0.25)
    except Exception as exc:  # noqa: BLE001 - any surprise means: leave watchdog alone
        return f"DelayedQueue(0.25) failed: {exc}"
    state = vars(probe)
    delay_attr = next((name for name in ("delay", "delay_sec") if state.get(name) == 0.25), None)
    if delay_attr is None:
        return "DelayedQueue keeps its delay under an unknown name"
    lock, not_empty, queue = state.get("_lock"), state.get("_not_empty"), state.get("_queue")
    if not (isinstance(not_empty, threading.Condition) and isinstance(queue, deque) and state.get("_closed") is False):
        return "DelayedQueue no longer keeps a condition, a deque and a closed flag"
    if lock is None or not hasattr(lock, "acquire"):
        return "DelayedQueue no longer keeps a lock"
    # get() waits on the condition while remove() and find() take the lock: they must be one lock
    with lock:
        shared = not not_empty.acquire(blocking=False)
        if not shared:
            not_empty.release()
    if not shared:
        return "DelayedQueue's condition does not guard its lock"
    if "delay" not in inspect.signature(probe.put).parameters:
        return "DelayedQueue.put takes no delay argument"
    marker = object()
    before = (time.monotonic(), time.time())
    try:
        probe.put(marker, delay=True)
    except Exception as exc:  # noqa: BLE001
        return f"DelayedQueue.put(element, delay=True) failed: {exc}"
    after = (time.monotonic(), time.time())
    entries = list(queue)
    if len(entries) != 1 or not isinstance(entries[0], tuple) or len(entries[0]) != 3:
        return "DelayedQueue.put no longer queues (element, time, delay)"
    element, stamp, delayed = entries[0]
    if element is not marker or delayed is not True or not isinstance(stamp, float):
        return "DelayedQueue.put no longer queues (element, time, delay)"
    if before[0] <= stamp <= after[0]:
        clock = time.monotonic
    elif before[1] <= stamp <= after[1]:
        clock = time.time
    else:
        return "DelayedQueue.put stamps elements with an unknown clock"
    probe.close()
    if state.get("_closed") is not True:
        return "DelayedQueue.close no longer sets its closed flag"
    return _QueueLayout(clock=clock, delay_attr=delay_attr)


@functools.cache
def _layout() -> _QueueLayout | str:
    try:
        return _probe_layout(DelayedQueue)
    except Exception as exc:  # noqa: BLE001 - a probe that breaks is a refusal, never a failed start
        return f"probing DelayedQueue failed: {exc}"


def queue_problem() -> str | None:
    """Why ``_PromptDelayedQueue`` cannot take over this watchdog's move queues, or None when it can."""
    layout = _layout()
    return layout if isinstance(layout, str) else None


class _PromptDelayedQueue(DelayedQueue):
    """watchdog's queue that holds a moved-from event up to 0.5 s for its moved-to half, without the stall.

    watchdog's own ``get`` sleeps the whole delay once a moved-from event is at the head, even when the
    moved-to half arrives a moment later and the pair is queued; so any rename in a watched folder (a memo
    renamed into its inbox, every claim) could hold back every event behind it for up to half a second.
    This ``get`` waits on the queue's condition, which the pair's ``put`` signals: a paired move goes out
    at once and an unpaired one still waits its full delay. Only ``get`` is ours: watchdog's threads
    keep calling its own ``put``, ``remove`` and ``find``, which is why one of these is never built but
    made from a watchdog queue in place, by ``adopt``.
    """

    _clock: Callable[[], float]
    _hold: float

    @classmethod
    def adopt(cls, queue: object) -> str | None:
        """Make ``queue``, a watchdog ``DelayedQueue`` nobody reads yet, one of these; None if done, else why not.

        Other threads may be putting into it meanwhile: the methods they call are not replaced.
        """
        layout = _layout()
        if isinstance(layout, str):
            return layout
        if type(queue) is not DelayedQueue:
            return f"found {type(queue).__name__} where watchdog's DelayedQueue was expected"
        queue._clock = layout.clock  # type: ignore[attr-defined]
        queue._hold = float(vars(queue)[layout.delay_attr])  # type: ignore[attr-defined]
        queue.__class__ = cls
        return None

    def get(self):  # type: ignore[no-untyped-def]
        """The head element once its delay, if it has one, is over; None once the queue is closed."""
        with self._not_empty:
            while True:
                while not self._queue and not self._closed:
                    self._not_empty.wait()
                if self._closed:
                    return None
                head, inserted, delayed = self._queue[0]
                left = inserted + self._hold - self._clock() if delayed else 0.0
                if left <= 0:
                    self._queue.popleft()
                    return head
                self._not_empty.wait(left)


def _move_queue(emitter: EventEmitter) -> object | None:
    """The queue an inotify emitter pairs its moves in: its grouper's (watchdog 7) or its buffer's (5 and 6)."""
    inotify = getattr(emitter, "_inotify", None)
    for holder in (getattr(inotify, "_move_event_grouper", None), inotify):
        queue = getattr(holder, "_queue", None)
        if isinstance(queue, DelayedQueue):
            return queue
    return None


def _pair_promptly_when_started(emitter: EventEmitter, report: Callable[[str], None]) -> None:
    """Give ``emitter`` a ``_PromptDelayedQueue`` when it starts, or ``report`` why not.

    watchdog makes an emitter's queue in ``on_thread_start``, which ``start`` calls in the starting
    thread before the emitter's own thread (the queue's only reader) runs: the one moment to swap it.
    """
    started = emitter.on_thread_start

    def on_thread_start() -> None:
        started()
        try:
            queue = _move_queue(emitter)
            problem = (
                _PromptDelayedQueue.adopt(queue)
                if queue is not None
                else f"{type(emitter).__name__} keeps no DelayedQueue where expected"
            )
        except Exception as exc:  # noqa: BLE001 - the watcher works without it
            problem = f"could not install the prompt queue: {exc}"
        if problem is not None:
            report(problem)

    emitter.on_thread_start = on_thread_start  # type: ignore[method-assign] # this emitter only


def _watchdog_version() -> str:
    try:
        return metadata.version("watchdog")
    except metadata.PackageNotFoundError:
        return "(version unknown)"


class InboxWatcher:
    """A watchdog observer over every role folder that can be checked and restarted.

    ``queue_check`` says whether the prompt move pairing can be installed (``queue_problem`` unless
    given); after ``start``, ``patch_problem`` is None when it was, else one line saying it was not.
    """

    def __init__(
        self,
        role_dirs: dict[str, Path],
        post: Callable[[Event], None],
        queue_check: Callable[[], str | None] | None = None,
    ) -> None:
        self.role_dirs = role_dirs
        self.post = post
        self.queue_check = queue_check if queue_check is not None else queue_problem
        self.patch_problem: str | None = None
        self.observer: Observer | None = None  # type: ignore[valid-type]
        self._lock = threading.Lock()
        self._spy = _OverflowSpy(post)
        self._identities: dict[str, tuple[int, int]] = {}

    def start(self) -> None:
        """Watch every role folder (making its inbox if needed) from a new observer thread."""
        logging.getLogger("watchdog").addHandler(self._spy)
        problems: list[str] = []
        problem = self.queue_check()
        if problem is not None:
            problems.append(problem)
        try:
            # an unpaired move into a watched folder is reported as a move (complete), not as a created file
            observer = Observer(timeout=OBSERVER_WAKE, generate_full_events=True)  # type: ignore[call-arg]
        except TypeError:  # an observer other than inotify's
            observer = Observer(timeout=OBSERVER_WAKE)
        for role, folder in self.role_dirs.items():
            (folder / INBOX).mkdir(parents=True, exist_ok=True)
            observer.schedule(_Handler(role, folder, self.post), str(folder), recursive=True, event_filter=EVENT_TYPES)
            info = folder.stat()
            self._identities[role] = (info.st_dev, info.st_ino)
        if not problems:
            for emitter in observer.emitters:
                _pair_promptly_when_started(emitter, problems.append)
        observer.daemon = True
        observer.start()
        self.observer = observer
        self.patch_problem = (
            None
            if not problems
            else (
                f"watcher: renames are paired at watchdog's own pace, up to 0.5 s late "
                f"(watchdog {_watchdog_version()}: {' '.join(problems[0].split())})"
            )
        )

    def healthy(self) -> str | None:
        """None when all is well, else why the observer must be restarted."""
        if self.observer is None or not self.observer.is_alive():
            return "the file watcher thread stopped"
        for role, folder in self.role_dirs.items():
            problem = folder_problem(folder, self._identities.get(role))
            if problem:
                return problem
        # a folder removed and made again may get the same inode number back, but its watch ended with it
        for emitter in list(self.observer.emitters):
            if not emitter.is_alive() or emitter.stopped_event.is_set():
                return f"the watch on {emitter.watch.path} ended (its folder was removed)"
        return None

    def restart(self) -> None:
        """A new observer over the same folders."""
        self.stop()
        self.start()

    def stop(self) -> None:
        """Stop the observer; safe to call when it never started or already died."""
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
