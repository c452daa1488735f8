"""Finding and stopping an agent's whole process tree: the kill ladder (SIGTERM, the grace period, SIGKILL, reap).

A pid is trusted only with its create time. Descendants are found three ways, as each alone misses some: the tree
walk from the agent, its process group (a grandchild whose parent exited) and the run id in a process's environment
(one that left the group with ``setsid``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psutil

from orchestrator.core.agent import KillReport

POLL = 0.01
KILL_WAIT = 5.0  # after SIGKILL, how long the ladder waits for the tree to be gone


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
            same = abs(proc.create_time() - self.create_time) <= 0.05
            return proc if same and proc.status() != psutil.STATUS_ZOMBIE else None
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            return None


@dataclass(frozen=True)
class Target:
    """What to stop: the agent process, its group, and the run id its descendants carry."""

    root: ProcRef | None
    pgid: int | None
    run_id: int | None
    project_root: str
    attempt: int | None = None  # set: only processes of that attempt of the run


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after its command name (state first), or None when it is gone (or not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].split()


def proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(pgrp, state, ppid) from /proc/<pid>/stat, or None when it is gone."""
    rest = stat_fields(pid)
    return None if rest is None else (int(rest[2]), rest[0].decode(), int(rest[1]))


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _created(pid: int) -> float | None:
    """psutil's create time of ``pid``, from /proc/<pid>/stat; None where there is no such file (ask psutil)."""
    rest = stat_fields(pid)
    # the boot time is read again each time, as psutil does: it moves when the clock is set
    return None if rest is None else int(rest[19]) / _TICKS + psutil.boot_time()


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _environ_marks(target: Target) -> tuple[bytes, ...] | None:
    if target.run_id is None:
        return None
    marks = [f"ORCHESTRATOR_RUN_ID={target.run_id}\0", f"ORCHESTRATOR_ROOT={target.project_root}\0"]
    if target.attempt is not None:
        marks.append(f"ORCHESTRATOR_ATTEMPT={target.attempt}\0")
    return tuple(mark.encode() for mark in marks)


def raw_environ(pid: int) -> bytes | None:
    """/proc/<pid>/environ as it is (``NAME=value`` items, each ended by a NUL), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _carries_run(pid: int, marks: tuple[bytes, ...]) -> bool:
    env = b"\0" + (raw_environ(pid) or b"")  # marks is never empty: an unreadable environ carries none
    return all(b"\0" + mark in env for mark in marks)


def find_tree(target: Target) -> dict[int, psutil.Process]:
    """Every live (non-zombie) process that belongs to the run."""
    found: dict[int, psutil.Process] = {}
    me = os.getpid()
    root = target.root.process() if target.root else None
    if root is not None:
        found[root.pid] = root
        with contextlib.suppress(psutil.Error):
            found.update((child.pid, child) for child in root.children(recursive=True))
    marks = _environ_marks(target)
    for pid in all_pids():
        if pid == me or pid in found:
            continue
        info = proc_stat(pid)
        if info is None or info[1] == "Z":
            continue
        in_group = target.pgid is not None and info[0] == target.pgid
        if in_group or (marks is not None and _carries_run(pid, marks)):
            with contextlib.suppress(psutil.Error):
                found[pid] = psutil.Process(pid)
    return {pid: proc for pid, proc in found.items() if _alive(proc)}


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal_all(target: Target, procs: dict[int, psutil.Process], sig: int) -> None:
    if target.pgid is not None and target.pgid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(target.pgid, sig)
    for proc in procs.values():
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)  # psutil checks the create time before signalling


async def stop_tree(
    target: Target,
    grace: float,
    log: Callable[[str], None] | None = None,
    found: dict[int, psutil.Process] | None = None,
) -> KillReport:
    """The kill ladder. Returns when every process of the run is dead, or SIGKILL could not end it.

    ``found``: the tree as the caller looked it up a moment ago, to spare a look (milliseconds of a cancel on a busy
    host); a later look finds and signals what started since."""
    say = log or (lambda _line: None)
    started = time.monotonic()
    report = KillReport()
    seen: dict[int, psutil.Process] = dict(found) if found is not None else find_tree(target)
    report.pids = sorted(seen)
    say(f"SIGTERM to process group {target.pgid} and {len(seen)} process(es) {report.pids}")
    _signal_all(target, seen, signal.SIGTERM)
    deadline = started + grace  # of the grace period, then (escalated) of SIGKILL's own bound
    pause = POLL / 8  # most agents are gone a moment after SIGTERM: look again soon, then every POLL
    while True:
        await asyncio.sleep(pause)
        pause = min(POLL, pause * 2)
        reap_orphans()
        alive = find_tree(target)
        if not alive:
            break
        if report.escalated:
            if time.monotonic() >= deadline:
                report.survivors = sorted(alive)
                break
            _signal_all(target, alive, signal.SIGKILL)
            continue
        new = {pid: proc for pid, proc in alive.items() if pid not in seen}
        if new:  # started since the last look: its share of SIGTERM
            seen.update(new)
            _signal_all(target, new, signal.SIGTERM)
        if time.monotonic() >= deadline:
            report.escalated = True
            say(f"grace of {grace:g}s over; SIGKILL to {sorted(alive)}")
            _signal_all(target, alive, signal.SIGKILL)
            deadline = time.monotonic() + KILL_WAIT
    reap_orphans()
    report.pids = sorted(seen)
    report.seconds = time.monotonic() - started
    return report


async def wait_gone(processes: dict[int, psutil.Process], timeout: float) -> list[int]:
    """Wait until every one of ``processes`` is dead (gone, a zombie, or its pid reused); the pids still alive
    after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        reap_orphans()
        alive = [pid for pid, proc in processes.items() if _alive(proc)]
        if not alive or time.monotonic() >= deadline:
            return sorted(alive)
        await asyncio.sleep(POLL)


def group_has_members(pgid: int | None) -> bool:
    """Whether any process is left in the group (cheap: one signal 0)."""
    if pgid is None:
        return False
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


_PR_SET_CHILD_SUBREAPER = 36
_spared: set[int] = set()
_spawning = 0  # agents being started, whose pid is not spared yet


def become_subreaper() -> bool:
    """Make orphaned descendants of our agents our children, so we can see and reap them (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def spare(pid: int) -> None:
    """A child whose exit status its owner reads (a keeper or agent's ``PosixChild``, a probe's asyncio process):
    ``reap_orphans`` must leave it."""
    _spared.add(pid)


def unspare(pid: int) -> None:
    _spared.discard(pid)


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    """Around starting a child until its pid is spared: meanwhile ``reap_orphans`` reaps nothing.

    A child may exit before its start returns; reaped as an orphan, its exit status would be lost (asyncio reports
    255 then)."""
    global _spawning
    _spawning += 1
    try:
        yield
    finally:
        _spawning -= 1


def reap_orphans() -> None:
    """Collect the exit status of zombie descendants that were handed to us as subreaper."""
    if _spawning:
        return  # a zombie now may be an agent whose pid is not spared yet; the next call reaps the orphans
    try:  # a peek that reaps nothing: the common case, no zombie child at all, costs one system call
        if os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            return
    except ChildProcessError:
        return
    me = os.getpid()
    try:
        children = psutil.Process(me).children()
    except psutil.Error:
        return
    for child in children:
        if child.pid in _spared:
            continue
        with contextlib.suppress(psutil.Error, OSError):  # ChildProcessError is an OSError
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
