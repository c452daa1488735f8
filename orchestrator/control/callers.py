"""Who is asking: a person, or an agent of which run, from the kernel and never from what the caller says.

The control channel knows its peer's pid (``SO_PEERCRED``); a command that acts
on files knows its own. That process belongs to a live run when it, or any
process above it (the ``/proc`` ppid chain), is the run's agent, is in the
agent's process group or session (every agent leads a session of its own), or
is the run's keeper (the agent's parent). Each keeper is a child subreaper, so
an agent's process that double-forks and calls ``setsid`` is handed to its
keeper and is still traced to its run. A process whose chain reaches the
orchestrator itself, or a keeper of this project that is no live run's (one
just starting, or of a run whose pid is not on record yet), is an agent of no
run on record: it was started for an agent, so it is no person. (Keepers of
other projects do not count: an agent of another team that runs this one's
tests is the person who started them.) ``ORCHESTRATOR_*`` variables are never read: a caller can unset or
forge its own. A pid that cannot be read is a refusal (``UnknownCallerError``),
never a person.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.control.authority import PERSON, Caller
from orchestrator.core.errors import RefusedError
from orchestrator.core.states import LIVE

MAX_DEPTH = 256  # ancestors followed; a chain is rarely deeper than ten
MAX_REREADS = 8  # a chain read again after a process in it ended meanwhile
KEEPER_NAME = b"orchestrator-keeper"
ROOT_MARK = b"KEEPER_ORCHESTRATOR_ROOT="


class UnknownCallerError(RefusedError):
    """The caller's process could not be read, so it is not known to be a person."""


@dataclass(frozen=True)
class LiveRun:
    """A run whose agent may be running: its id, its role and its agent's pid (a session leader)."""

    run_id: int
    role: str
    pid: int


# /proc is read here, not through agents.procs: the agent-side commands ask this module before they act, and
# agents.procs brings psutil (agents.keeper asyncio), about 30 ms of each such command's start-up
def _stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, process group, session) of ``pid``; None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    try:
        fields = data.rsplit(b")", 1)[1].split()
        return int(fields[1]), int(fields[2]), int(fields[3])
    except (IndexError, ValueError):
        return None


def _is_keeper(pid: int) -> bool:
    """Whether ``pid`` runs the keeper binary: only then does the agent's parent stand for its run."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            first = handle.read().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(first) == KEEPER_NAME


def _keeper_root(pid: int) -> str | None:
    """The project root a keeper ``pid`` keeps an agent of (its ``KEEPER_ORCHESTRATOR_ROOT``, which the
    orchestrator set when it started it); None when ``pid`` is no keeper."""
    if not _is_keeper(pid):
        return None
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return ""
    for item in environ.split(b"\0"):
        if item.startswith(ROOT_MARK):
            return os.fsdecode(item[len(ROOT_MARK) :])
    return ""


def identify(pid: int, runs: Iterable[LiveRun], root: Path, orchestrator: int | None = None) -> Caller:
    """The caller that process ``pid`` is, against the live ``runs`` of the project ``root``; ``orchestrator``:
    the orchestrator's pid, whose descendants are never people."""
    by_pid = {run.pid: run for run in runs if run.pid > 1}
    if pid <= 0:  # the peer is in another pid namespace: the kernel could not name it
        raise UnknownCallerError("refused: cannot tell who is asking (the caller's pid is not visible here)")
    chain: list[int] = []  # the processes read so far, the caller first
    current, rereads = pid, 0
    for _ in range(MAX_DEPTH):
        stat = _stat(current)
        if stat is None:
            if not chain or rereads >= MAX_REREADS:
                raise UnknownCallerError(
                    f"refused: cannot tell who is asking (process {current} is gone or unreadable)"
                )
            # its parent ended while the chain was read (the middle of a double fork): the child has a new
            # parent now, its subreaper; read it again rather than take the broken chain for a person's
            rereads += 1
            current = chain.pop()
            continue
        ppid, group, session = stat
        found = by_pid.get(current) or by_pid.get(group) or by_pid.get(session)
        if found is None and current > 1 and current != orchestrator and _is_keeper(current):
            found = _kept_by(current, by_pid.values())
        if found is not None:
            return Caller(agent=True, run_id=found.run_id, role=found.role)
        if current != pid and (current == orchestrator or _keeper_root(current) == str(root)):
            return Caller(agent=True)  # started by the orchestrator, or under one of its keepers: of no run on record
        chain.append(current)
        if ppid <= 1 or ppid in chain:
            return PERSON
        current = ppid
    raise UnknownCallerError(f"refused: cannot tell who is asking (process {pid} has more than {MAX_DEPTH} ancestors)")


def _kept_by(keeper: int, runs: Iterable[LiveRun]) -> LiveRun | None:
    """The run whose agent ``keeper`` (a keeper's pid) is the parent of: read only for a keeper met on a caller's
    chain, so a request costs no read for each of many live runs."""
    for run in runs:
        stat = _stat(run.pid)
        if stat is not None and stat[0] == keeper:
            return run
    return None


def live_runs_on_record(root: Path) -> list[LiveRun]:
    """The runs the database of ``root`` has as live with an agent pid: what a command that acts on files checks
    itself against when no orchestrator answers (its agents may outlive it, under their keepers)."""
    path = root / ".orchestrator" / "state.db"
    if not path.exists():
        return []
    states = sorted(state.value for state in LIVE)
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        try:
            rows = db.execute(
                f"SELECT run_id, role, pid FROM runs WHERE pid IS NOT NULL AND state IN ({', '.join('?' * len(states))})",
                states,
            ).fetchall()
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise UnknownCallerError(
            f"refused: cannot tell who is asking: {path} cannot be read ({exc}); "
            "start the orchestrator (`orchestrator up`), which answers it"
        ) from None
    return [LiveRun(int(run_id), str(role), int(pid)) for run_id, role, pid in rows]
