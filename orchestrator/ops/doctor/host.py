"""What the doctor reads of this machine, behind one seam its tests replace: ``/proc``, the file systems, the clock.

``Host`` is handed to every check; a test gives it a folder laid out like ``/proc`` (a low
``max_user_watches``, another process's inotify watches), a ``statvfs`` of a full disk, or a manual
clock, and the checks run as they do on a real machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import orchestrator
from orchestrator.core.clock import Clock, SystemClock

SCAN_SECONDS = 0.5  # counting this user's inotify watches gives up past this (a machine with very many processes)
INOTIFY_LINK = "anon_inode:inotify"


@dataclass(frozen=True)
class InotifyUse:
    """The inotify instances and watches this user's processes hold (those whose descriptors could be read)."""

    instances: int
    watches: int


@dataclass(frozen=True)
class Host:
    """The machine as the checks see it."""

    proc: Path = Path("/proc")
    statvfs: Callable[[Path], os.statvfs_result] = os.statvfs
    clock: Clock = field(default_factory=SystemClock)
    installed: datetime | None = field(default_factory=lambda: installed_at())  # this copy's files were written
    uid: int = field(default_factory=os.geteuid)

    def read_number(self, *parts: str) -> int | None:
        """An integer file under ``proc`` (``sys/fs/inotify/max_user_watches``), None when it cannot be read."""
        try:
            return int(self.proc.joinpath(*parts).read_text().strip())
        except (OSError, ValueError):
            return None

    def inotify_in_use(self, skip: int | None = None) -> InotifyUse | None:
        """What this user's processes but ``skip`` hold of inotify (the kernel's limits are per user), read from
        each one's ``fd`` and ``fdinfo``; None when ``proc`` cannot be listed or the scan takes too long."""
        deadline = time.monotonic() + SCAN_SECONDS
        try:
            pids = [name for name in os.listdir(self.proc) if name.isdigit()]
        except OSError:
            return None
        instances = watches = 0
        for pid in pids:
            if time.monotonic() > deadline:
                return None
            if pid == str(skip):
                continue
            folder = self.proc / pid
            try:
                if folder.stat().st_uid != self.uid:
                    continue
                fds = os.listdir(folder / "fd")
            except OSError:
                continue  # gone meanwhile, or not ours to read
            for fd in fds:
                try:
                    if os.readlink(folder / "fd" / fd) != INOTIFY_LINK:
                        continue
                    with open(folder / "fdinfo" / fd, encoding="ascii", errors="replace") as info:
                        watches += sum(1 for line in info if line.startswith("inotify wd:"))
                except OSError:
                    continue
                instances += 1
        return InotifyUse(instances, watches)

    def running_orchestrator(self, state_dir: Path) -> int | None:
        """The pid of the orchestrator serving the root of ``state_dir``, when its pid file names a live one."""
        try:
            pid = int((state_dir / "pid").read_text().strip())
            cmdline = (self.proc / str(pid) / "cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if b"orchestrator" in cmdline else None

    def environ_path(self, pid: int) -> str | None:
        """The ``PATH`` of a running process (the orchestrator of this root), None when it cannot be read."""
        try:
            data = (self.proc / str(pid) / "environ").read_bytes()
        except OSError:
            return None
        for entry in data.split(b"\0"):
            if entry.startswith(b"PATH="):
                return os.fsdecode(entry[5:])
        return None


def installed_at() -> datetime | None:
    """When this copy of the orchestrator was written to disk (its package's time), None when it cannot be read."""
    try:
        return datetime.fromtimestamp(os.stat(orchestrator.__file__).st_mtime, UTC)
    except OSError:
        return None
