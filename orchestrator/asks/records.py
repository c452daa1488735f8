"""What the asks feature keeps in the database: each question an agent asked (``asked``) until its run ends, and
each question or approval a run waits on, from the moment its end parks its memo in ``waiting/`` (``waiting``) until
the run that took the answer ends (``answered``), or the memo is cancelled or failed.

Functions over the store's connection, so the asking, the waiting and the answer all survive a restart of ``up``.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS asks (  -- a run that asked a person (orchestrator/asks)
    ask_id      INTEGER PRIMARY KEY AUTOINCREMENT,
    role        TEXT NOT NULL,
    memo        TEXT NOT NULL,     -- its first memo's file name in waiting/ (then in the inbox)
    memos       TEXT NOT NULL,     -- JSON: every memo of the run
    memo_id     TEXT,
    subject     TEXT,
    run_id      INTEGER NOT NULL,  -- the run that asked
    kind        TEXT NOT NULL,     -- 'question' or 'approval'
    question    TEXT NOT NULL,     -- the question, or the tool call in one line
    tool        TEXT,              -- JSON of the deferred call (id, name, input), when the agent's hook deferred it
    session_id  TEXT,              -- the session to resume with the answer
    asked_at    TEXT NOT NULL,
    due         REAL NOT NULL,     -- epoch seconds: no answer by then ends it (ask_timeout)
    state       TEXT NOT NULL,     -- 'asked' (its run still going), 'waiting', 'answered', then deleted
    answer      TEXT,              -- JSON: decision, text, note
    answered_by TEXT,
    answered_at TEXT,
    taken_by    INTEGER            -- the run that took the answer (answered): no other run takes it meanwhile
);
"""
COLUMNS = (
    "ask_id, role, memo, memos, memo_id, subject, run_id, kind, question, tool, session_id, asked_at, due, state, "
    "answer, answered_by, answered_at, taken_by"
)


@dataclass(frozen=True)
class Ask:
    """One question or approval, as recorded."""

    ask_id: int
    role: str
    memo: str
    memos: list[str]
    memo_id: str | None
    subject: str | None
    run_id: int
    kind: str
    question: str
    tool: dict[str, Any] | None
    session_id: str | None
    asked_at: str
    due: float
    state: str
    answer: dict[str, Any] | None
    answered_by: str | None
    answered_at: str | None
    taken_by: int | None = None

    def to_json(self) -> dict[str, Any]:
        """What ``status --json`` and the answer's receipt show of it (no answer text: it may be a secret)."""
        return {
            "ask_id": self.ask_id,
            "role": self.role,
            "memo": self.memo,
            "memo_id": self.memo_id,
            "subject": self.subject,
            "run_id": self.run_id,
            "kind": self.kind,
            "question": self.question,
            "asked_at": self.asked_at,
            "state": self.state,
        }


def ensure(db: sqlite3.Connection) -> None:
    """Make the feature's table when missing (and its later column, in a table made before it)."""
    db.executescript(SCHEMA)
    if "taken_by" not in {row[1] for row in db.execute("PRAGMA table_info(asks)")}:
        db.execute("ALTER TABLE asks ADD COLUMN taken_by INTEGER")


def _row(row: tuple[Any, ...]) -> Ask:
    values = list(row)
    values[3] = json.loads(values[3])
    values[9] = json.loads(values[9]) if values[9] else None
    values[14] = json.loads(values[14]) if values[14] else None
    return Ask(*values)


def add(db: sqlite3.Connection, ask: Ask) -> int:
    """Record a new question of ``ask.run_id`` in ``ask.state``, in place of what that run asked before; its id."""
    db.execute("DELETE FROM asks WHERE run_id = ? AND state IN ('asked', 'waiting')", (ask.run_id,))
    return insert(db, ask)


def insert(db: sqlite3.Connection, ask: Ask) -> int:
    """Record ``ask`` as it is; its id."""
    cursor = db.execute(
        f"INSERT INTO asks ({COLUMNS}) VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, NULL, NULL)",
        (
            ask.role,
            ask.memo,
            json.dumps(ask.memos),
            ask.memo_id,
            ask.subject,
            ask.run_id,
            ask.kind,
            ask.question,
            json.dumps(ask.tool) if ask.tool is not None else None,
            ask.session_id,
            ask.asked_at,
            ask.due,
            ask.state,
        ),
    )
    return int(cursor.lastrowid or 0)


def every(db: sqlite3.Connection, state: str | None = None) -> list[Ask]:
    """Every recorded ask (in ``state``), oldest first."""
    where, args = ("WHERE state = ?", (state,)) if state else ("", ())
    return [_row(r) for r in db.execute(f"SELECT {COLUMNS} FROM asks {where} ORDER BY ask_id", args)]


def answered(db: sqlite3.Connection, ask_id: int, memo: str, answer: dict[str, Any], who: str, when: str) -> None:
    """The person's answer; ``memo``: the memo's name in the inbox it went back to."""
    db.execute(
        "UPDATE asks SET state = 'answered', memo = ?, answer = ?, answered_by = ?, answered_at = ? WHERE ask_id = ?",
        (memo, json.dumps(answer), who, when, ask_id),
    )


def named(db: sqlite3.Connection, ask_id: int, memos: list[str]) -> None:
    """The names its memos were given in ``waiting/`` (when a name there was taken already)."""
    db.execute("UPDATE asks SET memo = ?, memos = ? WHERE ask_id = ?", (memos[0], json.dumps(memos), ask_id))


def take(db: sqlite3.Connection, ask_id: int, run_id: int) -> None:
    """Run ``run_id`` carries the answer on."""
    db.execute("UPDATE asks SET taken_by = ? WHERE ask_id = ?", (run_id, ask_id))


def drop_asked(db: sqlite3.Connection, run_id: int) -> None:
    """The run ends without being parked: what its agent asked is over with it."""
    db.execute("DELETE FROM asks WHERE run_id = ? AND state = 'asked'", (run_id,))


def moved_to(db: sqlite3.Connection, ask_id: int, memo: str) -> None:
    """An answered ask's memo is in its inbox (or running) under another name: the name its answer is matched by."""
    db.execute("UPDATE asks SET memo = ? WHERE ask_id = ?", (memo, ask_id))


def forget(db: sqlite3.Connection, ask_id: int) -> None:
    """The ask is over (its run took the answer and ended, or its memo was cancelled or failed)."""
    db.execute("DELETE FROM asks WHERE ask_id = ?", (ask_id,))
