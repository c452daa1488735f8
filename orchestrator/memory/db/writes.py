"""Writing entries: add, forget (a tombstone with its reason), replace (kept in ``growth``) and approve, each
one transaction that keeps both search indexes in step with ``entries``. Nothing is ever deleted."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from orchestrator.core.errors import MemoryRefusedError, UsageError
from orchestrator.memory import grams
from orchestrator.memory.db import schema
from orchestrator.memory.db.connection import Connection


def index_grams(conn: sqlite3.Connection, entry_id: int, text: str) -> None:
    """Add the entry's text to the bigram index."""
    conn.execute("INSERT INTO entries_bi (rowid, grams) VALUES (?, ?)", (entry_id, grams.tokens(text)))


def unindex_grams(conn: sqlite3.Connection, entry_id: int, text: str) -> None:
    """Take the entry out of the bigram index: a contentless index forgets a row only when given the tokens
    it was given, so ``text`` is the text it was indexed with."""
    conn.execute(
        "INSERT INTO entries_bi (entries_bi, rowid, grams) VALUES ('delete', ?, ?)", (entry_id, grams.tokens(text))
    )


def tombstone(conn: sqlite3.Connection, entry_id: int, why: str, by: str, at: str, clear: bool) -> None:
    """Mark the entry forgotten (``clear``: its text emptied too) and take it out of both indexes."""
    row = conn.execute("SELECT text FROM entries WHERE id = ? AND forgotten_at IS NULL", (entry_id,)).fetchone()
    if row is not None:
        unindex_grams(conn, entry_id, row[0])
    conn.execute(
        "UPDATE entries SET forgotten_at = ?, forgotten_why = ?, forgotten_by = ?"
        + (", text = ''" if clear else "")
        + " WHERE id = ?",
        (at, why, by, entry_id),
    )
    conn.execute("DELETE FROM entries_fts WHERE rowid = ?", (entry_id,))


def live(conn: sqlite3.Connection, entry_id: int, verb: str) -> dict[str, Any]:
    """The entry, which must exist and not be a tombstone, else a usage error naming ``verb``."""
    row = conn.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
    if row is None:
        raise UsageError(f"memory {verb}: no entry #{entry_id}")
    if row["forgotten_at"] is not None:
        raise UsageError(f"memory {verb}: entry #{entry_id} was forgotten ({row['forgotten_why']})")
    return schema.decode(row)


class Writes(Connection):
    """The writing methods of ``MemoryDB``."""

    def add(self, entry: dict[str, Any], core_max: int) -> int:
        """Store one checked entry; refuse a full core or unknown ``summarises`` ids, storing nothing."""
        with self._write("add") as conn:
            if entry["layer"] == "core":
                (count,) = conn.execute(
                    "SELECT count(*) FROM entries WHERE role = ? AND layer = 'core' AND forgotten_at IS NULL",
                    (entry["role"],),
                ).fetchone()
                if count >= core_max:
                    raise MemoryRefusedError(
                        f"memory: core of {entry['role']} is full ({count} of memory.core_max {core_max}); "
                        "make room with `orchestrator memory replace ID TEXT --why ...` or "
                        "`orchestrator memory forget ID --why ...` (see `orchestrator memory list --layer core`)"
                    )
            ids = entry.get("summarises") or []
            if ids:
                marks = ",".join("?" * len(ids))
                found = {r[0] for r in conn.execute(f"SELECT id FROM entries WHERE id IN ({marks})", ids)}
                unknown = [i for i in ids if i not in found]
                if unknown:
                    raise UsageError(f"memory add: --summarises names unknown ids: {', '.join(map(str, unknown))}")
            cur = conn.execute(
                "INSERT INTO entries (role, layer, period, text, category, importance, source, tags, summarises,"
                " created_at, run_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    entry["role"],
                    entry["layer"],
                    entry.get("period"),
                    entry["text"],
                    entry["category"],
                    entry["importance"],
                    entry["source"],
                    json.dumps(entry.get("tags") or [], ensure_ascii=False),
                    json.dumps(ids),
                    entry["created_at"],
                    entry.get("run_id"),
                ),
            )
            new_id = int(cur.lastrowid or 0)
            conn.execute("INSERT INTO entries_fts (rowid, text) VALUES (?, ?)", (new_id, entry["text"]))
            index_grams(conn, new_id, entry["text"])
            conn.executemany("INSERT OR IGNORE INTO summaries VALUES (?, ?)", [(i, new_id) for i in ids])
            return new_id

    def forget(self, entry_id: int, why: str, by: str, at: str, *, clear_text: bool = False) -> None:
        """Make a live entry a tombstone with its reason; it is no longer loaded or found."""
        with self._write("forget") as conn:
            live(conn, entry_id, "forget")
            tombstone(conn, entry_id, why, by, at, clear_text)

    def replace(self, entry_id: int, text: str, why: str, by: str, at: str) -> int:
        """New text for a live entry; the growth log keeps before, after and why. Returns the growth id."""
        with self._write("replace") as conn:
            before = live(conn, entry_id, "replace")["text"]
            conn.execute("UPDATE entries SET text = ? WHERE id = ?", (text, entry_id))
            conn.execute("UPDATE entries_fts SET text = ? WHERE rowid = ?", (text, entry_id))
            unindex_grams(conn, entry_id, before)
            index_grams(conn, entry_id, text)
            cur = conn.execute(
                "INSERT INTO growth (entry_id, before, after, why, at, by) VALUES (?,?,?,?,?,?)",
                (entry_id, before, text, why, at, by),
            )
            return int(cur.lastrowid or 0)

    def approve(self, entry_id: int, by: str, at: str) -> int:
        """Mark the latest unapproved change of an entry approved; returns its growth id."""
        with self._write("approve") as conn:
            row = conn.execute(
                "SELECT id FROM growth WHERE entry_id = ? AND approved_at IS NULL ORDER BY id DESC LIMIT 1",
                (entry_id,),
            ).fetchone()
            if row is None:
                raise UsageError(f"memory replace --approve: entry #{entry_id} has no change waiting for approval")
            conn.execute("UPDATE growth SET approved_by = ?, approved_at = ? WHERE id = ?", (by, at, row[0]))
            return int(row[0])
