"""``workspace.ports``: a block of N ports per live workspace, the same for every run in it (a dev server keeps its
address), distinct across the project's live workspaces and free on this machine when it is handed out.

A block is kept in the feature's table until its workspace is removed (``gc``) or its folder is found gone; the
agent reads it as ``ORCHESTRATOR_PORT`` (the first) and ``ORCHESTRATOR_PORT_COUNT``.
"""

from __future__ import annotations

import os
import socket
import sqlite3
from collections.abc import Callable

SCHEMA = """
CREATE TABLE IF NOT EXISTS workspace_ports (  -- the port block of each live workspace (orchestrator/workspaces)
    name   TEXT PRIMARY KEY,   -- the workspace
    folder TEXT NOT NULL,
    first  INTEGER NOT NULL,
    count  INTEGER NOT NULL
);
"""
LOWEST = 20000  # blocks are handed out from here up, below the usual ephemeral range
HIGHEST = 32767


class NoPortsError(Exception):
    """No block of the size asked for is free."""


def ensure(db: sqlite3.Connection) -> None:
    """Make the table when missing."""
    db.executescript(SCHEMA)


def free(port: int) -> bool:
    """Whether ``port`` can be bound on this machine now (nobody listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def block(
    db: sqlite3.Connection, name: str, folder: str, count: int, is_free: Callable[[int], bool] = free
) -> tuple[int, int]:
    """The block (first, count) of workspace ``name``: its own when it has one as large, else the lowest one that
    overlaps no other live workspace's and whose ports are free; ``NoPortsError`` when none is."""
    rows = db.execute("SELECT name, folder, first, count FROM workspace_ports").fetchall()
    taken: list[tuple[int, int]] = []
    for other, where, first, size in rows:
        if other == name:
            if size >= count:
                return first, size
            continue
        if not os.path.isdir(where):  # its folder deleted by hand: no longer live
            release(db, other)
            continue
        taken.append((first, first + size))
    candidate = LOWEST
    while candidate + count - 1 <= HIGHEST:
        clash = next((end for start, end in taken if start < candidate + count and candidate < end), None)
        if clash is not None:
            candidate = clash
            continue
        busy = next((port for port in range(candidate, candidate + count) if not is_free(port)), None)
        if busy is not None:
            candidate = busy + 1
            continue
        db.execute(
            "INSERT OR REPLACE INTO workspace_ports (name, folder, first, count) VALUES (?, ?, ?, ?)",
            (name, folder, candidate, count),
        )
        return candidate, count
    raise NoPortsError(f"no block of {count} free ports between {LOWEST} and {HIGHEST}; remove old workspaces (gc)")


def release(db: sqlite3.Connection, name: str) -> None:
    """The block of a workspace that is gone goes back."""
    db.execute("DELETE FROM workspace_ports WHERE name = ?", (name,))


def env(first: int, count: int) -> dict[str, str]:
    """The agent's variables for a block."""
    return {"ORCHESTRATOR_PORT": str(first), "ORCHESTRATOR_PORT_COUNT": str(count)}
