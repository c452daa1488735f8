"""Reading /proc for the kill ladder: one pass gives every process's parent, group, state and start, and the run
marks of its environment; a stop looks its tree up in that table instead of reading /proc itself.

Every stop under way shares one reading at a time (``look``), done in a worker thread, so stopping 300 agents
reads /proc a few times, not 300 times a round on the loop. A process's marks are read once it has run a moment
(``SETTLED``) and kept while it lives: its environment is fixed from its ``exec``, and only a process caught
between its fork and its exec (where it still shows its parent's) is read again at the next pass.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import psutil

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROCFS = os.path.isdir("/proc/self")  # Linux: /proc tells; elsewhere psutil does
SETTLED = 1.0  # seconds a process has run before its environment's marks are kept
SAME_START = 0.05  # seconds within which two create times are the same process


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after its command name (state first), or None when it is gone (or not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].split()


def raw_environ(pid: int) -> bytes | None:
    """/proc/<pid>/environ as it is (``NAME=value`` items, each ended by a NUL), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read()
    except OSError:
        return None


def environ(pid: int) -> dict[str, str] | None:
    """/proc/<pid>/environ as a mapping (what the process was started with), or None when it cannot be read."""
    raw = raw_environ(pid)
    if raw is None:
        return None
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {os.fsdecode(k): os.fsdecode(v) for k, v in pairs}


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _created(pid: int) -> float | None:
    """psutil's create time of ``pid``, from /proc/<pid>/stat; None where there is no such file (ask psutil)."""
    rest = stat_fields(pid)
    # the boot time is read again each time, as psutil does: it moves when the clock is set
    return None if rest is None else int(rest[19]) / _TICKS + psutil.boot_time()


@dataclass(frozen=True)
class ProcRef:
    """A process by pid and create time, so a reused pid is never mistaken for it."""

    pid: int
    create_time: float

    @classmethod
    def of(cls, pid: int) -> ProcRef | None:
        created = _created(pid)  # at every agent start: one read of /proc instead of psutil's three
        if created is not None:
            return cls(pid, created)
        try:
            return cls(pid, psutil.Process(pid).create_time())
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            return None

    def process(self) -> psutil.Process | None:
        """The live process, or None when it is gone, a zombie, or another process under the same pid."""
        try:
            proc = psutil.Process(self.pid)
            same = abs(proc.create_time() - self.create_time) <= SAME_START
            return proc if same and proc.status() != psutil.STATUS_ZOMBIE else None
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            return None

    def alive(self) -> bool:
        """Whether it still runs (not gone, not a zombie, its pid not reused): one read of its /proc/<pid>/stat."""
        rest = stat_fields(self.pid)
        if rest is None:  # gone; or not Linux, where psutil knows (asking it for a gone pid costs a cancel dearly)
            return not PROCFS and self.process() is not None
        return rest[0] != b"Z" and abs(int(rest[19]) / _TICKS + psutil.boot_time() - self.create_time) <= SAME_START


@dataclass(frozen=True)
class Target:
    """What to stop: the agent process, its group, and the run id its descendants carry."""

    root: ProcRef | None
    pgid: int | None
    run_id: int | None
    project_root: str
    attempt: int | None = None  # set: only processes of that attempt of the run


KEY_ENV = "ORCHESTRATOR_PROJECT_KEY"  # a Ray agent's: its project among those at the same path (ray/names.py)


def identity(root: str, key: str | None) -> str:
    """What tells a project's processes from another's: its root, and for Ray agents its key (two projects at the
    same path on two machines run agents on the same nodes)."""
    return f"{root}\0{key}" if key else root


@dataclass(frozen=True)
class Marks:
    """The run an environment names: ``ORCHESTRATOR_RUN_ID``, ``ORCHESTRATOR_ROOT`` (with ``KEY_ENV``: ``identity``)
    and ``ORCHESTRATOR_ATTEMPT``."""

    run_id: str
    root: str
    attempt: str | None


def _value(env: bytes, name: bytes) -> str | None:
    start = env.find(b"\0" + name + b"=")
    if start < 0:
        return None
    start += len(name) + 2
    return env[start : env.find(b"\0", start)].decode(errors="replace")


def read_marks(pid: int) -> Marks | None:
    """The run marks of ``pid``'s environment, or None when it carries none (or cannot be read)."""
    env = b"\0" + (raw_environ(pid) or b"") + b"\0"
    run_id = _value(env, b"ORCHESTRATOR_RUN_ID")
    root = _value(env, b"ORCHESTRATOR_ROOT")
    if run_id is None or root is None:
        return None
    return Marks(run_id, identity(root, _value(env, KEY_ENV.encode())), _value(env, b"ORCHESTRATOR_ATTEMPT"))


_MISSING = Marks("", "", None)
_kept_marks: dict[tuple[int, int], Marks | None] = {}  # (pid, start in ticks) -> its marks, once settled


class Entry(NamedTuple):
    """One process as /proc/<pid>/stat says it: parent, group, state (``Z``: a zombie) and start in clock ticks."""

    ppid: int
    pgrp: int
    state: bytes
    start: int


def _entry(pid: int) -> Entry | None:
    """``pid``'s entry, or None when it is gone: at every reading for every process, so with no file object."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    rest = data[data.rfind(b")") + 2 :].split(None, 20)
    return Entry(int(rest[1]), int(rest[2]), rest[0], int(rest[19])) if len(rest) > 19 else None


@dataclass
class ProcTable:
    """Every process at one moment (``taken``, monotonic: when the reading began), indexed for a stop's look."""

    taken: float
    boot: float
    entries: dict[int, Entry] = field(default_factory=dict)
    children: dict[int, list[int]] = field(default_factory=dict)
    groups: dict[int, list[int]] = field(default_factory=dict)
    runs: dict[tuple[str, str], list[tuple[int, str | None]]] = field(default_factory=dict)

    def created(self, pid: int) -> float:
        return self.entries[pid].start / _TICKS + self.boot

    def _ref(self, pid: int) -> ProcRef | None:
        entry = self.entries.get(pid)
        return None if entry is None or entry.state == b"Z" else ProcRef(pid, self.created(pid))

    def tree(self, target: Target) -> dict[int, ProcRef]:
        """Every live (non-zombie) process of ``target``: the walk from its agent, its group, its run's marks."""
        found: dict[int, ProcRef] = {}
        root = target.root
        entry = self.entries.get(root.pid) if root is not None else None
        if root is not None and entry is not None and abs(self.created(root.pid) - root.create_time) <= SAME_START:
            self._walk(root.pid, found)
        if target.pgid is not None:
            self._add(self.groups.get(target.pgid, ()), found)
        if target.run_id is not None:
            wanted = None if target.attempt is None else str(target.attempt)
            marked = self.runs.get((str(target.run_id), target.project_root), ())
            self._add((pid for pid, attempt in marked if wanted is None or attempt == wanted), found)
        return found

    def _walk(self, top: int, found: dict[int, ProcRef]) -> None:
        todo = [top]
        while todo:
            pid = todo.pop()
            ref = self._ref(pid)
            if ref is not None:
                found[pid] = ref
            start = self.entries[pid].start
            # a child started before its parent holds a reused pid of someone else's
            todo += [c for c in self.children.get(pid, ()) if c not in found and self.entries[c].start >= start]

    def _add(self, pids: Iterable[int], found: dict[int, ProcRef]) -> None:
        for pid in pids:
            ref = self._ref(pid)
            if ref is not None:
                found[pid] = ref


def _uptime() -> float:
    try:
        with open("/proc/uptime", "rb") as handle:
            return float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def read_table() -> ProcTable:
    """One pass over /proc (this process left out). Environments are read only for processes not yet settled."""
    me = os.getpid()
    table = ProcTable(time.monotonic(), psutil.boot_time())
    settled_before = (_uptime() - SETTLED) * _TICKS
    for pid in all_pids():
        entry = _entry(pid) if pid != me else None
        if entry is None:
            continue
        table.entries[pid] = entry
        table.children.setdefault(entry.ppid, []).append(pid)
        table.groups.setdefault(entry.pgrp, []).append(pid)
        if entry.state == b"Z":
            continue  # its environment is gone
        key = (pid, entry.start)
        marks = _kept_marks.get(key, _MISSING)
        if marks is _MISSING:
            marks = read_marks(pid)
            if entry.start <= settled_before:
                _kept_marks[key] = marks
        if marks is not None:
            table.runs.setdefault((marks.run_id, marks.root), []).append((pid, marks.attempt))
    for pid, start in list(_kept_marks):
        now = table.entries.get(pid)
        if now is None or now.start != start:
            _kept_marks.pop((pid, start), None)
    return table


def find_tree(target: Target) -> dict[int, ProcRef]:
    """Every live (non-zombie) process that belongs to the run, from a reading of /proc made now (in this thread)."""
    return read_table().tree(target)


class SharedReadings:
    """One reading of /proc at a time, in a worker thread, shared by every look that asks while it runs.

    A look needs a reading begun after it asked (what it wants to know happened before); one that asks while a
    reading runs waits for it and for the next, which every other look asking meanwhile shares."""

    def __init__(self) -> None:
        self._last: ProcTable | None = None
        self._reading: asyncio.Task[ProcTable] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def fresh(self) -> ProcTable:
        asked = time.monotonic()
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (asyncio.run again): the old one's task is not ours to await
            self._loop, self._reading, self._last = loop, None, None
        while True:
            last = self._last
            if last is not None and last.taken >= asked:
                return last
            if self._reading is None or self._reading.done():
                self._reading = loop.create_task(self._read())
            await asyncio.shield(self._reading)

    async def _read(self) -> ProcTable:
        table = await asyncio.to_thread(read_table)
        self._last = table
        return table


_readings = SharedReadings()


async def look(target: Target) -> dict[int, ProcRef]:
    """Every live process of ``target``, from a reading of /proc begun after this call, shared with other looks."""
    return (await _readings.fresh()).tree(target)
