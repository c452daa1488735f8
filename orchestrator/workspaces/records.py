"""What the workspaces feature keeps in the database: per attempt, the workspace it worked in, where its branch
stood when it began, and how its work ended (committed on the branch, or set aside under a ref).

Functions over the store's connection; ``orchestrator diff`` reads them from a command.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

SCHEMA = """
CREATE TABLE IF NOT EXISTS workspace_attempts (  -- each attempt run in a workspace (orchestrator/workspaces)
    run_id    INTEGER NOT NULL,
    attempt   INTEGER NOT NULL,
    name      TEXT NOT NULL,      -- the workspace's name (its key, made safe)
    folder    TEXT NOT NULL,
    branch    TEXT NOT NULL,
    base      TEXT NOT NULL,
    start     TEXT NOT NULL,      -- the branch's commit when the attempt began
    outcome   TEXT,               -- null while it works; 'committed', 'unchanged', 'set aside', 'waiting' (for a
                                  -- person, its work left in the workspace) or 'carried on' (by its answered memo)
    commit_id TEXT,               -- the commit on the branch, or the set-aside commit
    ref       TEXT,               -- where a set-aside attempt is kept
    PRIMARY KEY (run_id, attempt)
);
"""


@dataclass(frozen=True)
class AttemptWork:
    """One attempt's work in its workspace, as recorded."""

    run_id: int
    attempt: int
    name: str
    folder: str
    branch: str
    base: str
    start: str
    outcome: str | None
    commit_id: str | None
    ref: str | None


COLUMNS = "run_id, attempt, name, folder, branch, base, start, outcome, commit_id, ref"


def ensure(db: sqlite3.Connection) -> None:
    """Make the feature's table when missing."""
    db.executescript(SCHEMA)


def began(db: sqlite3.Connection, work: AttemptWork) -> None:
    """An attempt begins in its workspace (a restart that prepares it again replaces the row)."""
    db.execute(
        f"INSERT OR REPLACE INTO workspace_attempts ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL)",
        (work.run_id, work.attempt, work.name, work.folder, work.branch, work.base, work.start),
    )


def ended(db: sqlite3.Connection, run_id: int, attempt: int, outcome: str, commit: str | None, ref: str | None) -> None:
    """How the attempt's work ended."""
    db.execute(
        "UPDATE workspace_attempts SET outcome = ?, commit_id = ?, ref = ? WHERE run_id = ? AND attempt = ?",
        (outcome, commit, ref, run_id, attempt),
    )


def open_attempt(db: sqlite3.Connection, run_id: int) -> AttemptWork | None:
    """The run's attempt whose work is not settled yet, if any (its latest)."""
    row = db.execute(
        f"SELECT {COLUMNS} FROM workspace_attempts WHERE run_id = ? AND outcome IS NULL ORDER BY attempt DESC LIMIT 1",
        (run_id,),
    ).fetchone()
    return AttemptWork(*row) if row else None


def unsettled_in(db: sqlite3.Connection, name: str, run_id: int) -> list[AttemptWork]:
    """The attempts in workspace ``name`` of runs other than ``run_id`` whose work was never settled (their end's git
    work failed, or the orchestrator ended under them), newest first."""
    rows = db.execute(
        f"SELECT {COLUMNS} FROM workspace_attempts WHERE name = ? AND run_id != ? AND outcome IS NULL "
        "ORDER BY run_id DESC, attempt DESC",
        (name, run_id),
    ).fetchall()
    return [AttemptWork(*row) for row in rows]


def all_waiting(db: sqlite3.Connection) -> list[AttemptWork]:
    """Every attempt whose run waits for a person (or was answered and not started again) with its work kept."""
    rows = db.execute(f"SELECT {COLUMNS} FROM workspace_attempts WHERE outcome = 'waiting' ORDER BY run_id").fetchall()
    return [AttemptWork(*row) for row in rows]


def waiting_in(db: sqlite3.Connection, name: str) -> AttemptWork | None:
    """The attempt whose run waits for a person with its work in workspace ``name`` (its start kept), if any."""
    row = db.execute(
        f"SELECT {COLUMNS} FROM workspace_attempts WHERE name = ? AND outcome = 'waiting' "
        "ORDER BY run_id DESC, attempt DESC LIMIT 1",
        (name,),
    ).fetchone()
    return AttemptWork(*row) if row else None


def of_runs(db: sqlite3.Connection, run_ids: list[int]) -> list[AttemptWork]:
    """Every recorded attempt of ``run_ids``, oldest first."""
    if not run_ids:
        return []
    marks = ", ".join("?" * len(run_ids))
    rows = db.execute(
        f"SELECT {COLUMNS} FROM workspace_attempts WHERE run_id IN ({marks}) ORDER BY run_id, attempt", run_ids
    ).fetchall()
    return [AttemptWork(*row) for row in rows]
