"""What the schedule keeps in the database: wake memos and their outcome, when each task was last done, the
one-off ledger, and per role the last tick and the skips counted by reason.

Functions over the store's connection (``store.db``); times are ISO 8601 with their UTC offset. The ledger
is the one table a CLI command writes while an orchestrator may run: SQLite's WAL and its busy timeout make
that safe, and the running orchestrator is told to look again over the control channel.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import Any

from orchestrator.core.clock import iso

SCHEMA = """
CREATE TABLE IF NOT EXISTS wake_memos (      -- every wake memo written, and how its run ended (orchestrator/schedule)
    memo_id    TEXT PRIMARY KEY,
    role       TEXT NOT NULL,
    name       TEXT NOT NULL,               -- its file name when written
    tasks      TEXT NOT NULL,               -- JSON list of the task names it carries
    tasks_text TEXT NOT NULL DEFAULT '',
    signals_text TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    outcome    TEXT,                        -- null while its run may still happen; else the run's end state
    run_id     INTEGER,
    seq        INTEGER,
    ended_at   TEXT
);
CREATE INDEX IF NOT EXISTS wake_memos_pending ON wake_memos(role, outcome);
CREATE TABLE IF NOT EXISTS task_done (       -- the last time each task was done: by a wake whose run succeeded
    role     TEXT NOT NULL,
    task     TEXT NOT NULL,
    first_seen TEXT NOT NULL,
    done_at  TEXT,
    run_id   INTEGER,
    seq      INTEGER,
    PRIMARY KEY (role, task)
);
CREATE TABLE IF NOT EXISTS ledger (          -- one-off tasks from `orchestrator task add`
    id         TEXT PRIMARY KEY,
    role       TEXT NOT NULL,
    text       TEXT NOT NULL,
    due_at     TEXT NOT NULL,
    priority   INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    done_at    TEXT,
    run_id     INTEGER,
    seq        INTEGER
);
CREATE TABLE IF NOT EXISTS wake_state (      -- per role: the last heartbeat tick and the last wake's outcome or skip
    role        TEXT PRIMARY KEY,
    last_tick   TEXT,
    last_event  TEXT,
    last_reason TEXT,
    last_at     TEXT
);
CREATE TABLE IF NOT EXISTS wake_skips (
    role   TEXT NOT NULL,
    reason TEXT NOT NULL,                   -- idle, quiet hours, budget, held, coalesced, ending
    count  INTEGER NOT NULL,
    PRIMARY KEY (role, reason)
);
"""
EXPIRED_WAKES = "outcome IS NOT NULL AND created_at < ?"  # retention: wakes that ended, written before a cutoff


def ensure_tables(db: sqlite3.Connection) -> None:
    """The schedule's tables, made if missing (a writable connection)."""
    db.executescript(SCHEMA)


def has_tables(db: sqlite3.Connection) -> bool:
    """Whether the schedule's tables exist (a read-only connection to a database no orchestrator made yet)."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'wake_state'").fetchone() is not None


def wake_ids(db: sqlite3.Connection) -> set[str]:
    """The id of every wake memo on record."""
    return {row[0] for row in db.execute("SELECT memo_id FROM wake_memos")}


def when(text: str | None) -> datetime | None:
    """A stored time back as an aware datetime."""
    return datetime.fromisoformat(text) if text else None


# ------------------------------------------------------------------ tasks done
def first_seen(db: sqlite3.Connection, role: str, task: str, now: datetime) -> datetime:
    """When the task was first known (stored on first ask): a task never done counts its periods from here."""
    db.execute("INSERT OR IGNORE INTO task_done (role, task, first_seen) VALUES (?, ?, ?)", (role, task, iso(now)))
    row = db.execute("SELECT first_seen FROM task_done WHERE role = ? AND task = ?", (role, task)).fetchone()
    return datetime.fromisoformat(row[0])


def done(db: sqlite3.Connection, role: str) -> dict[str, dict[str, Any]]:
    """Each task of the role: ``first_seen``, ``done_at``, ``run_id``, ``seq``."""
    rows = db.execute("SELECT task, first_seen, done_at, run_id, seq FROM task_done WHERE role = ?", (role,))
    return {r[0]: {"first_seen": r[1], "done_at": r[2], "run_id": r[3], "seq": r[4]} for r in rows}


def mark_done(db: sqlite3.Connection, role: str, task: str, at: datetime, run_id: int, seq: int | None) -> None:
    """Record the task as done by this run; a ledger task (its id) is done for good."""
    ledger = db.execute(
        "UPDATE ledger SET done_at = ?, run_id = ?, seq = ? WHERE id = ? AND role = ?",
        (iso(at), run_id, seq, task, role),
    )
    if ledger.rowcount:
        return
    db.execute(
        "INSERT INTO task_done (role, task, first_seen, done_at, run_id, seq) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (role, task) DO UPDATE SET done_at = excluded.done_at, run_id = excluded.run_id, "
        "seq = excluded.seq",
        (role, task, iso(at), iso(at), run_id, seq),
    )


# ------------------------------------------------------------------ wake memos
def add_wake(
    db: sqlite3.Connection, memo_id: str, role: str, name: str, tasks: list[str], texts: tuple[str, str], at: datetime
) -> None:
    db.execute(
        "INSERT INTO wake_memos (memo_id, role, name, tasks, tasks_text, signals_text, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (memo_id, role, name, json.dumps(tasks), texts[0], texts[1], iso(at)),
    )


def wake(db: sqlite3.Connection, memo_id: str) -> dict[str, Any] | None:
    row = db.execute(
        "SELECT memo_id, role, name, tasks, tasks_text, signals_text, created_at, outcome FROM wake_memos "
        "WHERE memo_id = ?",
        (memo_id,),
    ).fetchone()
    if row is None:
        return None
    keys = ("memo_id", "role", "name", "tasks", "tasks_text", "signals_text", "created_at", "outcome")
    out = dict(zip(keys, row, strict=True))
    out["tasks"] = json.loads(out["tasks"])
    return out


def pending_wakes(db: sqlite3.Connection, role: str) -> list[dict[str, Any]]:
    """The role's wake memos whose run has not ended yet (queued, running, waiting for a retry, returned)."""
    rows = db.execute(
        "SELECT memo_id, name, tasks FROM wake_memos WHERE role = ? AND outcome IS NULL", (role,)
    ).fetchall()
    return [{"memo_id": r[0], "name": r[1], "tasks": json.loads(r[2])} for r in rows]


def end_wake(
    db: sqlite3.Connection, memo_id: str, outcome: str, at: datetime, run_id: int | None, seq: int | None
) -> None:
    db.execute(
        "UPDATE wake_memos SET outcome = ?, ended_at = ?, run_id = ?, seq = ? WHERE memo_id = ?",
        (outcome, iso(at), run_id, seq, memo_id),
    )


def drop_wake(db: sqlite3.Connection, memo_id: str) -> None:
    db.execute("DELETE FROM wake_memos WHERE memo_id = ?", (memo_id,))


# ------------------------------------------------------------------ ticks and skips
def state(db: sqlite3.Connection, role: str) -> dict[str, Any]:
    row = db.execute(
        "SELECT last_tick, last_event, last_reason, last_at FROM wake_state WHERE role = ?", (role,)
    ).fetchone()
    keys = ("last_tick", "last_event", "last_reason", "last_at")
    return dict(zip(keys, row, strict=True)) if row else dict.fromkeys(keys)


def set_tick(db: sqlite3.Connection, role: str, at: datetime) -> None:
    db.execute(
        "INSERT INTO wake_state (role, last_tick) VALUES (?, ?) ON CONFLICT (role) DO UPDATE SET last_tick = ?",
        (role, iso(at), iso(at)),
    )


def set_event(db: sqlite3.Connection, role: str, event: str, reason: str, at: datetime) -> None:
    """The last thing the schedule did for the role: ``wake`` (a memo written), ``skip`` or an outcome."""
    db.execute(
        "INSERT INTO wake_state (role, last_event, last_reason, last_at) VALUES (?, ?, ?, ?) ON CONFLICT (role) "
        "DO UPDATE SET last_event = excluded.last_event, last_reason = excluded.last_reason, last_at = excluded.last_at",
        (role, event, reason, iso(at)),
    )


def count_skip(db: sqlite3.Connection, role: str, reason: str) -> None:
    db.execute(
        "INSERT INTO wake_skips (role, reason, count) VALUES (?, ?, 1) ON CONFLICT (role, reason) "
        "DO UPDATE SET count = count + 1",
        (role, reason),
    )


def skips(db: sqlite3.Connection, role: str) -> dict[str, int]:
    return {r[0]: r[1] for r in db.execute("SELECT reason, count FROM wake_skips WHERE role = ?", (role,))}


# ------------------------------------------------------------------ the one-off ledger
LEDGER_KEYS = ("id", "role", "text", "due_at", "priority", "created_at", "done_at", "run_id", "seq")


def ledger_add(
    db: sqlite3.Connection, task_id: str, role: str, text: str, due: datetime, priority: int, at: datetime
) -> None:
    db.execute(
        "INSERT INTO ledger (id, role, text, due_at, priority, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        (task_id, role, text, iso(due), priority, iso(at)),
    )


def ledger(db: sqlite3.Connection, role: str | None = None, open_only: bool = False) -> list[dict[str, Any]]:
    query, args = f"SELECT {', '.join(LEDGER_KEYS)} FROM ledger WHERE 1=1", []
    if role:
        query += " AND role = ?"
        args.append(role)
    if open_only:
        query += " AND done_at IS NULL"
    rows = db.execute(query + " ORDER BY due_at, id", args).fetchall()
    return [dict(zip(LEDGER_KEYS, r, strict=True)) for r in rows]


def ledger_drop(db: sqlite3.Connection, task_id: str) -> bool:
    return db.execute("DELETE FROM ledger WHERE id = ?", (task_id,)).rowcount > 0
