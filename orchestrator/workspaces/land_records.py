"""What the landing queue keeps in the database: each landing asked for, and how it ended, so that ``status`` and
the workspaces page can say whether a workspace has landed; and the reads that find what a ``land`` names.

Functions over the store's connection, beside ``records`` (the attempts' table) whose rows they read.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from orchestrator.workspaces import records

SCHEMA = """
CREATE TABLE IF NOT EXISTS workspace_landings (  -- each landing asked for (orchestrator/workspaces/land.py)
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT NOT NULL,      -- the workspace
    branch     TEXT NOT NULL,
    target     TEXT,               -- the branch landed into (null until known: the workspace's base)
    asked_at   TEXT NOT NULL,
    who        TEXT,
    ended_at   TEXT,
    outcome    TEXT,               -- null while it waits or lands; 'landed', 'conflict', 'check failed', 'refused'
    commit_id  TEXT,               -- the target's new commit, once landed
    reason     TEXT,
    folder     TEXT,               -- the workspace's folder, and its branch's commit as the landing began (what a
    start      TEXT                -- landing the orchestrator's end interrupted is put back at; null until then)
);
CREATE INDEX IF NOT EXISTS workspace_landings_name ON workspace_landings(name);
"""


@dataclass(frozen=True)
class Landing:
    """One landing as recorded."""

    seq: int
    name: str
    branch: str
    target: str | None
    asked_at: str
    who: str | None
    ended_at: str | None
    outcome: str | None
    commit_id: str | None
    reason: str | None
    folder: str | None = None
    start: str | None = None


COLUMNS = "seq, name, branch, target, asked_at, who, ended_at, outcome, commit_id, reason, folder, start"
ADDED = ("folder", "start")  # columns a table made by an older orchestrator lacks


def ensure(db: sqlite3.Connection) -> None:
    """Make the table when missing, or add the columns an older one lacks."""
    db.executescript(SCHEMA)
    have = {row[1] for row in db.execute("PRAGMA table_info(workspace_landings)")}
    for column in ADDED:
        if column not in have:
            db.execute(f"ALTER TABLE workspace_landings ADD COLUMN {column} TEXT")


def unfinished(db: sqlite3.Connection) -> list[Landing]:
    """The landings a previous orchestrator left queued or under way (it ended under them), oldest first."""
    rows = db.execute(f"SELECT {COLUMNS} FROM workspace_landings WHERE outcome IS NULL ORDER BY seq").fetchall()
    return [Landing(*row) for row in rows]


def began(db: sqlite3.Connection, seq: int, into: str, folder: str, start: str) -> None:
    """Landing ``seq`` begins: its target, and its workspace's folder and branch commit before it rebases."""
    db.execute(
        "UPDATE workspace_landings SET target = ?, folder = ?, start = ? WHERE seq = ?", (into, folder, start, seq)
    )


def asked(db: sqlite3.Connection, name: str, branch: str, into: str | None, at: str, who: str) -> int:
    """A landing asked for; its number."""
    cursor = db.execute(
        "INSERT INTO workspace_landings (name, branch, target, asked_at, who) VALUES (?, ?, ?, ?, ?)",
        (name, branch, into, at, who),
    )
    return int(cursor.lastrowid or 0)


def ended(
    db: sqlite3.Connection, seq: int, into: str | None, at: str, outcome: str, commit: str | None, reason: str
) -> None:
    """How landing ``seq`` ended (``into`` None: its target never known)."""
    db.execute(
        "UPDATE workspace_landings SET target = ?, ended_at = ?, outcome = ?, commit_id = ?, reason = ? WHERE seq = ?",
        (into, at, outcome, commit, reason, seq),
    )


def last_landed(db: sqlite3.Connection, name: str) -> Landing | None:
    """The latest landing of workspace ``name`` that landed, or None (it has never landed)."""
    row = db.execute(
        f"SELECT {COLUMNS} FROM workspace_landings WHERE name = ? AND outcome = 'landed' ORDER BY seq DESC LIMIT 1",
        (name,),
    ).fetchone()
    return Landing(*row) if row else None


def workspace_of(db: sqlite3.Connection, target: str) -> records.AttemptWork | None:
    """The latest attempt recorded in the workspace ``target`` names: a workspace's name, else a memo (its id or
    file name) whose runs worked in one; None when neither."""
    row = db.execute(
        f"SELECT {records.COLUMNS} FROM workspace_attempts WHERE name = ? ORDER BY run_id DESC, attempt DESC LIMIT 1",
        (target,),
    ).fetchone()
    if row:
        return records.AttemptWork(*row)
    base = target.rsplit("/", 1)[-1]
    row = db.execute(
        f"SELECT {records.COLUMNS} FROM workspace_attempts WHERE run_id IN (SELECT run_id FROM runs WHERE "
        "EXISTS (SELECT 1 FROM json_each(runs.memos) WHERE value IN (?, ?)) "
        "OR EXISTS (SELECT 1 FROM json_each(runs.memo_ids) WHERE value = ?)) ORDER BY run_id DESC, attempt DESC "
        "LIMIT 1",
        (base, base.removesuffix(".md") + ".md", target),
    ).fetchone()
    return records.AttemptWork(*row) if row else None


def workers(db: sqlite3.Connection, name: str) -> list[tuple[str, str | None]]:
    """The roles that worked in workspace ``name``, latest first, each with the id (or file name) of the memo of
    its latest run there."""
    rows = db.execute(
        "SELECT r.role, r.memo_ids, r.memos FROM runs r JOIN (SELECT run_id, MAX(attempt) FROM workspace_attempts "
        "WHERE name = ? GROUP BY run_id) w ON w.run_id = r.run_id ORDER BY r.run_id DESC",
        (name,),
    ).fetchall()
    out: list[tuple[str, str | None]] = []
    for role, memo_ids, memos in rows:
        if any(seen == role for seen, _ in out):
            continue
        memo = _first(memo_ids) or _first(memos)
        out.append((role, memo.removesuffix(".md") if memo else None))
    return out


def _first(text: str | None) -> str | None:
    try:
        items = json.loads(text or "[]")
    except ValueError:
        return None
    return next((str(item) for item in items if item), None)
