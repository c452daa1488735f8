"""Watching the inboxes with Linux inotify, read by the supervisor's own loop: no thread, no hand-off.

The watchdog observer (``orchestrator.intake.watcher``) reads inotify in one
thread, pairs moves in a second and dispatches in a third, and every event then
crosses into the loop through ``call_soon_threadsafe``: three threads taking
the GIL from the loop at every memo, and a hop from thread to thread before a
memo is even seen. Here the loop itself watches the inotify descriptor, so an
event becomes a ``MemoSeen`` in the callback that reads it.

Two watches per role. The inbox: a memo renamed in or closed after writing is
complete (``IN_MOVED_TO``, ``IN_CLOSE_WRITE``), one created or written to may
still be in the writing (``IN_CREATE``, ``IN_MODIFY``), one renamed away or
deleted is gone. Moves need no pairing: each half is about one folder, and
only the inbox's half matters. The role folder: an ``inbox`` folder made,
removed or renamed there, or the role folder itself going, means a rescan
(``RescanNeeded``) and, for a new inbox, a new watch. A full kernel queue
(``IN_Q_OVERFLOW``) means a rescan too. ``healthy`` tells the loop's tick when
a folder was replaced or a watch ended, as ``InboxWatcher.healthy`` does.

``make_watcher`` picks this one on Linux and watchdog elsewhere, or when
``ORCHESTRATOR_WATCHER=watchdog`` asks for it.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.core.events import Event, MemoGone, MemoSeen, RescanNeeded
from orchestrator.intake.folders import folder_problem
from orchestrator.intake.memo import INBOX, is_memo_name

IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

INBOX_MASK = (
    IN_CLOSE_WRITE
    | IN_MOVED_TO
    | IN_CREATE
    | IN_MODIFY
    | IN_MOVED_FROM
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_EXCL_UNLINK
)
ROLE_MASK = IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)
READ_SIZE = 256 * 1024
ENDED = IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF

_libc: Any = None


def _lib() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return _libc


def available() -> bool:
    """Whether this system has inotify (Linux) reachable through the C library."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        lib = _lib()
        return hasattr(lib, "inotify_init1") and hasattr(lib, "inotify_add_watch")
    except OSError:
        return False


def _check(result: int, what: str, path: str | None = None) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}", path)
    return result


class InotifyWatcher:
    """The inboxes of ``role_dirs`` watched from the running loop; ``deliver`` gets each event, on the loop."""

    patch_problem: str | None = None  # the watchdog watcher's start-up note; nothing to say here

    def __init__(self, role_dirs: dict[str, Path], deliver: Callable[[Event], None]) -> None:
        self.role_dirs = role_dirs
        self.deliver = deliver
        self.fd: int | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._inboxes: dict[int, tuple[str, str]] = {}  # wd -> (role, inbox path)
        self._roles: dict[int, str] = {}  # wd -> role, for the role folders
        self._identities: dict[str, tuple[int, int]] = {}
        self._lost: str | None = None  # why a watch ended, until the next restart

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Watch every role folder and its inbox (made if missing); raises ``OSError`` when inotify cannot."""
        self.loop = asyncio.get_running_loop()
        self.fd = _check(_lib().inotify_init1(IN_NONBLOCK | IN_CLOEXEC), "inotify_init1")
        try:
            for role, folder in self.role_dirs.items():
                (folder / INBOX).mkdir(parents=True, exist_ok=True)
                info = folder.stat()
                self._identities[role] = (info.st_dev, info.st_ino)
                self._roles[self._watch(folder, ROLE_MASK)] = role
                self._watch_inbox(role)
        except BaseException:
            self.stop()
            raise
        self.loop.add_reader(self.fd, self._read)

    def stop(self) -> None:
        """Stop watching; safe to call twice or when ``start`` failed half-way."""
        fd, self.fd = self.fd, None
        if fd is None:
            return
        if self.loop is not None and not self.loop.is_closed():
            self.loop.remove_reader(fd)
        os.close(fd)
        self._inboxes.clear()
        self._roles.clear()

    def restart(self) -> None:
        """New watches over the same folders."""
        self.stop()
        self._lost = None
        self.start()

    def healthy(self) -> str | None:
        """None when all is well, else why the watches must be made again."""
        if self.fd is None:
            return "the inotify watch is closed"
        if self._lost is not None:
            return self._lost
        for role, folder in self.role_dirs.items():
            problem = folder_problem(folder, self._identities.get(role))
            if problem:
                return problem
            if role not in {r for r, _ in self._inboxes.values()}:
                return f"the watch on {folder / INBOX} ended"
        return None

    # ------------------------------------------------------------------ watches
    def _watch(self, path: Path, mask: int) -> int:
        assert self.fd is not None
        raw = os.fsencode(str(path))
        return _check(_lib().inotify_add_watch(self.fd, raw, mask), "inotify_add_watch", str(path))

    def _watch_inbox(self, role: str) -> None:
        inbox = self.role_dirs[role] / INBOX
        wd = self._watch(inbox, INBOX_MASK)
        self._inboxes[wd] = (role, str(inbox))

    def _let_go(self, wd: int, mask: int) -> None:
        """Forget a watch whose folder was removed or moved away (a moved folder's watch would follow it)."""
        self._inboxes.pop(wd, None)
        self._roles.pop(wd, None)
        if not mask & IN_IGNORED and self.fd is not None:
            _lib().inotify_rm_watch(self.fd, wd)  # its IN_IGNORED then finds no watch: nothing to do

    # ------------------------------------------------------------------ events
    def _read(self) -> None:
        """One read per wake-up: what our own handling caused (a claim's move) waits for the next turn of the
        loop, after the tasks that handling started (an agent's spawn), not before them."""
        fd = self.fd
        if fd is None:
            return
        try:
            data = os.read(fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost = f"reading the inotify watch failed: {exc.strerror or exc}"
            self.deliver(RescanNeeded(self._lost))
            return
        if data:
            self._events(data)

    def _events(self, data: bytes) -> None:
        """Turn one buffer of inotify events into supervisor events, in order."""
        offset, size = 0, len(data)
        while offset + HEADER.size <= size:
            wd, mask, _cookie, length = HEADER.unpack_from(data, offset)
            start = offset + HEADER.size
            offset = start + length
            name = os.fsdecode(data[start:offset].split(b"\0", 1)[0]) if length else ""
            try:
                for event in self.classify(wd, mask, name):
                    self.deliver(event)
            except Exception as exc:  # noqa: BLE001 - a surprise means: look again, never stop watching
                self.deliver(RescanNeeded(f"error while handling an inotify event for {name!r}: {exc}"))

    def classify(self, wd: int, mask: int, name: str) -> list[Event]:
        """The supervisor events one inotify event means (and the watch changes it calls for)."""
        if mask & IN_Q_OVERFLOW:
            return [RescanNeeded("inotify queue overflowed")]
        inbox = self._inboxes.get(wd)
        if inbox is not None:
            role, folder = inbox
            if mask & ENDED:
                self._let_go(wd, mask)
                return [RescanNeeded(f"folder {folder} changed")]
            if mask & IN_ISDIR or not is_memo_name(name):
                return []
            path = Path(folder, name)
            if mask & (IN_MOVED_FROM | IN_DELETE):
                return [MemoGone(role, path)]
            return [MemoSeen(role, path, complete=bool(mask & (IN_MOVED_TO | IN_CLOSE_WRITE)))]
        role_name = self._roles.get(wd)
        if role_name is None:
            return []  # a watch already let go: its last events still arrive
        folder_path = self.role_dirs[role_name]
        if mask & ENDED:
            self._let_go(wd, mask)
            self._lost = f"folder {folder_path} was removed or moved"
            return [RescanNeeded(f"folder {folder_path} changed")]
        if not (mask & IN_ISDIR) or name != INBOX:
            return []
        if mask & (IN_CREATE | IN_MOVED_TO):
            try:
                self._watch_inbox(role_name)
            except OSError as exc:
                self._lost = f"cannot watch {folder_path / INBOX}: {exc.strerror or exc}"
        return [RescanNeeded(f"folder {folder_path / INBOX} changed")]


def make_watcher(role_dirs: dict[str, Path], post: Callable[[Event], None]) -> Any:
    """The inotify watcher on Linux (it posts on the loop), else watchdog's (it posts from its thread).

    ``ORCHESTRATOR_WATCHER=watchdog`` asks for watchdog's everywhere.
    """
    if os.environ.get("ORCHESTRATOR_WATCHER", "inotify") != "watchdog" and available():
        return InotifyWatcher(role_dirs, post)
    from orchestrator.intake.watcher import InboxWatcher

    return InboxWatcher(role_dirs, post)
