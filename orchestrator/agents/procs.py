"""Stopping an agent's whole process tree: the kill ladder (SIGTERM, the grace period, SIGKILL, reap).

A pid is trusted only with its create time. Descendants are found three ways, as each alone misses some: the tree
walk from the agent, its process group (a grandchild whose parent exited) and the run id in a process's environment
(one that left the group with ``setsid``); ``proc_table`` reads /proc for them, one reading shared by every stop.
Between those readings a ladder only looks at the processes it knows, so a long grace costs little.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterator

import psutil

from orchestrator.agents.proc_table import (
    ProcRef as ProcRef,
)
from orchestrator.agents.proc_table import (
    Target as Target,
)
from orchestrator.agents.proc_table import (
    all_pids as all_pids,
)
from orchestrator.agents.proc_table import (
    environ as environ,
)
from orchestrator.agents.proc_table import (
    find_tree as find_tree,
)
from orchestrator.agents.proc_table import (
    look as look,
)
from orchestrator.agents.proc_table import (
    raw_environ as raw_environ,
)
from orchestrator.agents.proc_table import (
    stat_fields as stat_fields,
)
from orchestrator.core.agent import KillReport

POLL = 0.01  # the first looks at the known processes after a signal: a moment after SIGTERM most are gone
SLOW_POLL = 0.05  # then they slow down to this: a long grace is watched at a modest rate
RESCAN = 0.25  # between readings of /proc for what started since (a setsid escapee) while the tree lives
KILL_WAIT = 5.0  # after SIGKILL, how long the ladder waits for the tree to be gone


def proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(pgrp, state, ppid) from /proc/<pid>/stat, or None when it is gone."""
    rest = stat_fields(pid)
    return None if rest is None else (int(rest[2]), rest[0].decode(), int(rest[1]))


def _signal_all(target: Target, procs: dict[int, ProcRef], sig: int) -> None:
    if target.pgid is not None and target.pgid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(target.pgid, sig)
    for ref in procs.values():
        if ref.alive():  # its create time checked first: a reused pid is never signalled
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(ref.pid, sig)


async def stop_tree(
    target: Target,
    grace: float,
    log: Callable[[str], None] | None = None,
    found: dict[int, ProcRef] | None = None,
) -> KillReport:
    """The kill ladder. Returns when every process of the run is dead, or SIGKILL could not end it.

    ``found``: the tree as the caller looked it up a moment ago, to spare a look (milliseconds of a cancel on a busy
    host). Between the signals it watches the processes it knows; /proc is read again (one reading shared with
    every other stop) every ``RESCAN`` for what started since, and once they are gone, to be sure nothing is left."""
    say = log or (lambda _line: None)
    started = time.monotonic()
    report = KillReport()
    seen: dict[int, ProcRef] = dict(found) if found is not None else await look(target)
    report.pids = sorted(seen)
    say(f"SIGTERM to process group {target.pgid} and {len(seen)} process(es) {report.pids}")
    _signal_all(target, seen, signal.SIGTERM)
    deadline = started + grace  # of the grace period, then (escalated) of SIGKILL's own bound
    pause = POLL / 8  # most agents are gone a moment after SIGTERM: look again soon, then less and less often
    scanned = started
    while True:
        await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(SLOW_POLL, pause * 2)
        reap_orphans(REAP_SCAN)
        alive = {pid: ref for pid, ref in seen.items() if ref.alive()}
        now = time.monotonic()
        if (not alive and not group_has_members(target.pgid)) or now - scanned >= RESCAN:
            scanned = now
            alive.update(await look(target))  # begun after the known ones were seen gone: nothing escapes it
            if not alive:
                break
        if report.escalated:
            if time.monotonic() >= deadline:
                report.survivors = sorted(alive)
                break
            _signal_all(target, alive, signal.SIGKILL)
            continue
        new = {pid: ref for pid, ref in alive.items() if pid not in seen}
        if new:  # started since the last look: its share of SIGTERM
            seen.update(new)
            _signal_all(target, new, signal.SIGTERM)
        if time.monotonic() >= deadline:
            report.escalated = True
            say(f"grace of {grace:g}s over; SIGKILL to {sorted(alive)}")
            _signal_all(target, alive, signal.SIGKILL)
            deadline = time.monotonic() + KILL_WAIT
    reap_orphans(REAP_SCAN)
    report.pids = sorted(seen)
    report.seconds = time.monotonic() - started
    return report


async def wait_gone(processes: dict[int, ProcRef], timeout: float) -> list[int]:
    """Wait until every one of ``processes`` is dead (gone, a zombie, or its pid reused); the pids still alive
    after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        reap_orphans(REAP_SCAN)
        alive = [pid for pid, ref in processes.items() if ref.alive()]
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


REAP_SCAN = 0.1  # a ladder's seconds between looks through our children when a spared zombie hides the others
_reap_scanned = 0.0


def reap_orphans(scan_every: float = 0.0) -> None:
    """Collect the exit status of zombie descendants that were handed to us as subreaper.

    ``scan_every``: when a spared zombie (whose owner collects it) hides the others from the peek, look through our
    children (every process's /proc entry) only if this many seconds have passed since the last such look."""
    global _reap_scanned
    if _spawning:
        return  # a zombie now may be an agent whose pid is not spared yet; the next call reaps the orphans
    for _ in range(64):  # a peek that reaps nothing: the common case, no zombie child at all, costs one system call
        try:
            zombie = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if zombie is None:
            return
        if zombie.si_pid in _spared:
            break  # its owner collects it; other zombies may wait behind it, found by a look through our children
        with contextlib.suppress(ChildProcessError):
            os.waitpid(zombie.si_pid, os.WNOHANG)
    now = time.monotonic()
    if now - _reap_scanned < scan_every:
        return
    _reap_scanned = now
    try:
        children = psutil.Process(os.getpid()).children()
    except psutil.Error:
        return
    for child in children:
        if child.pid in _spared:
            continue
        with contextlib.suppress(psutil.Error, OSError):  # ChildProcessError is an OSError
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
