"""The memory database's tables and indexes (``SCHEMA``), their version (``PRAGMA user_version``) and how a
database of an older version is brought up to date: created, then its bigram index filled from the entries."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from orchestrator.core.errors import MemoryUnavailableError
from orchestrator.memory import grams

DB_NAME = "memory.db"
SCHEMA_VERSION = 2  # 1 (0 in the file): no bigram index; 2: entries_bi and the load indexes

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    role          TEXT NOT NULL,          -- a role, or 'team' for shared entries
    layer         TEXT NOT NULL,          -- daily | weekly | monthly | core
    period        TEXT,                   -- 2026-12-01 | 2026-W49 | 2026-12; NULL for core
    text          TEXT NOT NULL,
    category      TEXT NOT NULL,
    importance    INTEGER NOT NULL,
    source        TEXT NOT NULL,          -- agent | supervisor | owner
    tags          TEXT NOT NULL DEFAULT '[]',
    summarises    TEXT NOT NULL DEFAULT '[]',
    created_at    TEXT NOT NULL,
    run_id        TEXT,
    forgotten_at  TEXT,                   -- a tombstone: kept, never loaded or found
    forgotten_why TEXT,
    forgotten_by  TEXT
);
CREATE INDEX IF NOT EXISTS entries_scope ON entries(role, layer, period);
CREATE INDEX IF NOT EXISTS entries_live ON entries(layer, period) WHERE forgotten_at IS NULL;
CREATE INDEX IF NOT EXISTS entries_load ON entries(role, layer, period, importance, created_at)
    WHERE forgotten_at IS NULL;
CREATE TABLE IF NOT EXISTS summaries (
    entry_id   INTEGER NOT NULL,          -- an entry ...
    summary_id INTEGER NOT NULL,          -- ... and an entry that summarises it
    PRIMARY KEY (entry_id, summary_id)
);
CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5(text, tokenize='trigram');
CREATE VIRTUAL TABLE IF NOT EXISTS entries_bi USING fts5(grams, content='', detail=none, tokenize='ascii');
CREATE TABLE IF NOT EXISTS growth (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    entry_id    INTEGER NOT NULL,
    before      TEXT NOT NULL,
    after       TEXT NOT NULL,
    why         TEXT NOT NULL,            -- the trigger of the change
    at          TEXT NOT NULL,
    by          TEXT,
    approved_by TEXT,
    approved_at TEXT
);
CREATE TABLE IF NOT EXISTS compactions (
    kind       TEXT NOT NULL,             -- weekly | monthly
    period     TEXT NOT NULL,
    written_at TEXT NOT NULL,
    memo       TEXT,
    PRIMARY KEY (kind, period)
);
"""

LIVE = "e.forgotten_at IS NULL"  # the condition on ``entries e`` of an entry that is not a tombstone


def db_path(state_dir: Path) -> Path:
    """Where the memory database of a project with this state folder (``.orchestrator/``) lies."""
    return state_dir / DB_NAME


def decode(row: sqlite3.Row) -> dict[str, Any]:
    """A row of ``entries`` as a dict, its JSON columns (``tags``, ``summarises``) as lists."""
    out = dict(row)
    for key in ("tags", "summarises"):
        if key in out and isinstance(out[key], str):
            out[key] = json.loads(out[key])
    return out


def refuse_newer(version: int, path: Path) -> None:
    """A database of a later schema than this code knows is not touched."""
    if version > SCHEMA_VERSION:
        raise MemoryUnavailableError(
            f"memory: the database {path} has schema {version}, newer than this orchestrator's "
            f"{SCHEMA_VERSION}; upgrade the orchestrator"
        )


def create(conn: sqlite3.Connection, timeout: float) -> None:
    """WAL and every table and index that is missing.

    Switching to WAL and creating the schema may meet SQLITE_BUSY without the busy handler when several
    agents open a new database at once: those steps are retried for ``timeout`` (at least a second).
    """
    deadline = time.monotonic() + max(timeout, 1.0)
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(SCHEMA)
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def migrate(conn: sqlite3.Connection) -> None:
    """Inside a write transaction: fill the indexes an older schema lacks and mark the database current."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version < SCHEMA_VERSION:  # else another process upgraded it meanwhile
        conn.execute("INSERT INTO entries_bi(entries_bi) VALUES ('delete-all')")
        rows = conn.execute("SELECT id, text FROM entries WHERE forgotten_at IS NULL")
        conn.executemany("INSERT INTO entries_bi (rowid, grams) VALUES (?, ?)", ((i, grams.tokens(t)) for i, t in rows))
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
