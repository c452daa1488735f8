"""The memory store: one SQLite database (WAL) under ``.orchestrator/``, written by many agents at once.

Entries live in ``entries``; a trigram FTS5 index (``entries_fts``, rowid = entry id)
finds any substring of three characters or more, so unsegmented Japanese is
found too; shorter queries (記憶, 監督) are matched with ``instr`` over the rows
in scope. Nothing is ever deleted: ``forget`` and retention leave a tombstone
(``forgotten_at``, ``forgotten_why``), and every ``replace`` is kept in ``growth``.
Every SQLite failure (corrupt, locked, unreadable) becomes ``MemoryUnavailableError``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from orchestrator.core.errors import MemoryRefusedError, MemoryUnavailableError, UsageError
from orchestrator.memory.rules import month_of_week, week_of

DB_NAME = "memory.db"
BUSY_TIMEOUT = 10.0

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
CREATE TABLE IF NOT EXISTS summaries (
    entry_id   INTEGER NOT NULL,          -- an entry ...
    summary_id INTEGER NOT NULL,          -- ... and an entry that summarises it
    PRIMARY KEY (entry_id, summary_id)
);
CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5(text, tokenize='trigram');
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

_LIVE = "e.forgotten_at IS NULL"


def db_path(state_dir: Path) -> Path:
    return state_dir / DB_NAME


def _row(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    for key in ("tags", "summarises"):
        if key in out and isinstance(out[key], str):
            out[key] = json.loads(out[key])
    return out


class MemoryDB:
    """One connection to the memory database; every method is one short transaction."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = path
        with self._guard("open"):
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
                os.chmod(path.parent, 0o700)
                if not path.exists():
                    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            elif not path.exists():
                raise MemoryUnavailableError(f"memory: no memory database at {path} yet (nothing was added)")
            self.conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None)
            self.conn.row_factory = sqlite3.Row
            self._prepare(create)
            for suffix in ("-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.chmod(str(path) + suffix, 0o600)

    def _prepare(self, create: bool) -> None:
        # switching to WAL and creating the schema may meet SQLITE_BUSY without the busy handler
        # when several agents open a new database at once: those two steps are retried
        deadline = time.monotonic() + BUSY_TIMEOUT
        while True:
            try:
                self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.execute("PRAGMA synchronous=NORMAL")
                if create:
                    self.conn.executescript(SCHEMA)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error, AttributeError):
            self.conn.close()

    @contextlib.contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as exc:
            what = "is locked by another writer" if "locked" in str(exc) or "busy" in str(exc) else f"failed: {exc}"
            raise MemoryUnavailableError(f"memory: {doing}: the database {self.path} {what}; try again") from None
        except sqlite3.DatabaseError as exc:
            raise MemoryUnavailableError(
                f"memory: {doing}: the database {self.path} is unreadable ({exc}); move it aside to start afresh"
            ) from None
        except OSError as exc:
            raise MemoryUnavailableError(f"memory: {doing}: cannot open {self.path}: {exc.strerror or exc}") from None

    @contextlib.contextmanager
    def _write(self, doing: str) -> Iterator[sqlite3.Connection]:
        with self._guard(doing):
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    # ------------------------------------------------------------ writing
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
            conn.executemany("INSERT OR IGNORE INTO summaries VALUES (?, ?)", [(i, new_id) for i in ids])
            return new_id

    def forget(self, entry_id: int, why: str, by: str, at: str, *, clear_text: bool = False) -> None:
        """Make a live entry a tombstone with its reason; it is no longer loaded or found."""
        with self._write("forget") as conn:
            self._live(conn, entry_id, "forget")
            self._tombstone(conn, entry_id, why, by, at, clear_text)

    @staticmethod
    def _tombstone(conn: sqlite3.Connection, entry_id: int, why: str, by: str, at: str, clear: bool) -> None:
        conn.execute(
            "UPDATE entries SET forgotten_at = ?, forgotten_why = ?, forgotten_by = ?"
            + (", text = ''" if clear else "")
            + " WHERE id = ?",
            (at, why, by, entry_id),
        )
        conn.execute("DELETE FROM entries_fts WHERE rowid = ?", (entry_id,))

    def _live(self, conn: sqlite3.Connection, entry_id: int, verb: str) -> dict[str, Any]:
        row = conn.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise UsageError(f"memory {verb}: no entry #{entry_id}")
        if row["forgotten_at"] is not None:
            raise UsageError(f"memory {verb}: entry #{entry_id} was forgotten ({row['forgotten_why']})")
        return _row(row)

    def replace(self, entry_id: int, text: str, why: str, by: str, at: str) -> int:
        """New text for a live entry; the growth log keeps before, after and why. Returns the growth id."""
        with self._write("replace") as conn:
            before = self._live(conn, entry_id, "replace")["text"]
            conn.execute("UPDATE entries SET text = ? WHERE id = ?", (text, entry_id))
            conn.execute("UPDATE entries_fts SET text = ? WHERE rowid = ?", (text, entry_id))
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

    # ------------------------------------------------------------ reading
    def get(self, entry_id: int) -> dict[str, Any] | None:
        """One entry, live or tombstone, with its growth log and the ids that summarise it."""
        with self._guard("show"):
            row = self.conn.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
            if row is None:
                return None
            out = _row(row)
            out["growth"] = [dict(r) for r in self.conn.execute("SELECT * FROM growth WHERE entry_id = ?", (entry_id,))]
            out["summarised_by"] = [
                r[0] for r in self.conn.execute("SELECT summary_id FROM summaries WHERE entry_id = ?", (entry_id,))
            ]
            return out

    def search(
        self,
        query: str,
        roles: Sequence[str] | None,
        *,
        layer: str | None = None,
        category: str | None = None,
        since: str | None = None,
        until: str | None = None,
        min_importance: int | None = None,
        limit: int = 20,
    ) -> list[dict[str, Any]]:
        """Live entries holding every word of ``query``: by relevance, then importance, then recency."""
        words = [w.strip("\"'") for w in query.split()]
        words = [w for w in words if w]
        if not words:
            raise UsageError("memory search: give a word to search for")
        long = [w for w in words if len(w) >= 3]
        short = [w for w in words if len(w) < 3]
        where, params = self._filters(roles, layer, category, since, until, min_importance)
        for word in short:
            where.append("instr(lower(e.text), lower(?)) > 0")
            params.append(word)
        with self._guard("search"):
            if long:
                match = " AND ".join('"' + w.replace('"', '""') + '"' for w in long)
                sql = (
                    "SELECT e.*, bm25(entries_fts) AS score FROM entries_fts JOIN entries e ON e.id = entries_fts.rowid"
                    " WHERE entries_fts MATCH ? AND " + " AND ".join(where) + " ORDER BY score, e.importance DESC,"
                    " e.created_at DESC, e.id DESC LIMIT ?"
                )
                rows = self.conn.execute(sql, [match, *params, limit])
            else:
                word = short[0]
                hits = "(length(e.text) - length(replace(lower(e.text), lower(?), ''))) / length(?)"
                sql = (
                    f"SELECT e.*, -{hits} AS score FROM entries e WHERE "
                    + " AND ".join(where)
                    + " ORDER BY score, e.importance DESC, e.created_at DESC, e.id DESC LIMIT ?"
                )
                rows = self.conn.execute(sql, [word, word, *params, limit])
            return [_row(r) for r in rows]

    @staticmethod
    def _filters(
        roles: Sequence[str] | None,
        layer: str | None,
        category: str | None,
        since: str | None,
        until: str | None,
        min_importance: int | None,
    ) -> tuple[list[str], list[Any]]:
        where: list[str] = [_LIVE]
        params: list[Any] = []
        if roles is not None:
            where.append(f"e.role IN ({','.join('?' * len(roles))})")
            params += list(roles)
        for column, value in (("layer", layer), ("category", category)):
            if value is not None:
                where.append(f"e.{column} = ?")
                params.append(value)
        if since is not None:
            where.append("substr(e.created_at, 1, 10) >= ?")
            params.append(since)
        if until is not None:
            where.append("substr(e.created_at, 1, 10) <= ?")
            params.append(until)
        if min_importance is not None:
            where.append("e.importance >= ?")
            params.append(min_importance)
        return where, params

    def entries(
        self,
        roles: Sequence[str] | None,
        *,
        layer: str | None = None,
        category: str | None = None,
        forgotten: bool = False,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Entries newest first; ``forgotten`` lists the tombstones instead."""
        where, params = self._filters(roles, layer, category, None, None, None)
        if forgotten:
            where[0] = "e.forgotten_at IS NOT NULL"
        with self._guard("list"):
            sql = f"SELECT e.* FROM entries e WHERE {' AND '.join(where)} ORDER BY e.created_at DESC, e.id DESC LIMIT ?"
            return [_row(r) for r in self.conn.execute(sql, [*params, limit])]

    def prompt_groups(self, roles: Sequence[str], today: date) -> list[tuple[str, list[dict[str, Any]]]]:
        """What ``$memory`` loads, in order: core, daily of the last 7 days, weekly of the last 4 weeks, last monthly."""
        marks = ",".join("?" * len(roles))
        base = f"SELECT * FROM entries e WHERE {_LIVE} AND e.role IN ({marks}) AND e.layer = ?"
        newest = " ORDER BY e.created_at DESC, e.id DESC"
        days = [(today - timedelta(days=n)).isoformat() for n in range(7)]
        weeks = [week_of(today - timedelta(days=7 * n)) for n in range(4)]
        with self._guard("load"):
            core = self.conn.execute(base + newest, [*roles, "core"]).fetchall()
            daily = self.conn.execute(
                base + f" AND e.period IN ({','.join('?' * 7)})" + newest, [*roles, "daily", *days]
            ).fetchall()
            weekly = self.conn.execute(
                base + f" AND e.period IN ({','.join('?' * 4)})" + newest, [*roles, "weekly", *weeks]
            ).fetchall()
            last = self.conn.execute(
                f"SELECT max(period) FROM entries e WHERE {_LIVE} AND e.role IN ({marks}) AND e.layer = 'monthly'",
                list(roles),
            ).fetchone()[0]
            monthly = self.conn.execute(base + " AND e.period = ?" + newest, [*roles, "monthly", last]).fetchall()
        return [
            ("core", [_row(r) for r in core]),
            ("daily, last 7 days", [_row(r) for r in daily]),
            ("weekly, last 4 weeks", [_row(r) for r in weekly]),
            (f"monthly, {last}" if last else "monthly", [_row(r) for r in monthly]),
        ]

    # ------------------------------------------------------------ retention and compaction
    def unsummarised(self, layer: str, summary_layer: str, periods: Sequence[str]) -> list[dict[str, Any]]:
        """Live entries of ``layer`` in ``periods`` that no live ``summary_layer`` entry summarises yet."""
        marks = ",".join("?" * len(periods))
        sql = (
            f"SELECT * FROM entries e WHERE {_LIVE} AND e.layer = ? AND e.period IN ({marks}) AND NOT EXISTS ("
            " SELECT 1 FROM summaries s JOIN entries x ON x.id = s.summary_id"
            " WHERE s.entry_id = e.id AND x.layer = ? AND x.forgotten_at IS NULL)"
            " ORDER BY e.role, e.period, e.id"
        )
        with self._guard("compaction"):
            return [_row(r) for r in self.conn.execute(sql, [layer, *periods, summary_layer])]

    def weekly_periods_of(self, month: str) -> list[str]:
        """The ISO weeks with weekly entries that belong to ``month`` (by their Thursday)."""
        with self._guard("compaction"):
            rows = self.conn.execute(
                "SELECT DISTINCT period FROM entries WHERE layer = 'weekly' AND period IS NOT NULL"
            )
            return [p for (p,) in rows if month_of_week(p) == month]

    def retention(
        self, today: date, daily_days: int, weekly_days: int, at: str, *, apply: bool = True
    ) -> tuple[int, dict[str, int]]:
        """Tombstone summarised entries past retention; count those that wait for their summary.

        Returns how many were retired and, per period still waiting, how many entries wait
        (``daily 2026-W40`` -> 5 means five daily entries of that week wait for a weekly summary).
        """
        retired = 0
        waiting: dict[str, int] = {}
        rules = (
            ("daily", "weekly", (today - timedelta(days=daily_days)).isoformat()),
            ("weekly", "monthly", week_of(today - timedelta(days=weekly_days))),
        )
        with self._write("retention") as conn:
            for layer, summary_layer, cutoff in rules:
                rows = conn.execute(
                    f"SELECT e.id, e.period, (SELECT min(s.summary_id) FROM summaries s JOIN entries x"
                    f" ON x.id = s.summary_id WHERE s.entry_id = e.id AND x.layer = ? AND x.forgotten_at IS NULL)"
                    f" AS summary FROM entries e WHERE {_LIVE} AND e.layer = ? AND e.period < ?",
                    (summary_layer, layer, cutoff),
                ).fetchall()
                for entry_id, period, summary in rows:
                    if summary is None:
                        key = f"{layer} {week_of(date.fromisoformat(period)) if layer == 'daily' else month_of_week(period)}"
                        waiting[key] = waiting.get(key, 0) + 1
                    elif apply:
                        why = f"retention: {layer} entry past {daily_days if layer == 'daily' else weekly_days} days, summarised by #{summary}"
                        self._tombstone(conn, entry_id, why, "retention", at, True)
                        retired += 1
        return retired, waiting

    def stats(self, roles: Sequence[str] | None) -> dict[str, Any]:
        """Counts per role and layer, tombstones and changes, for ``memory stats``."""
        where, params = self._filters(roles, None, None, None, None, None)
        with self._guard("stats"):
            per: dict[str, dict[str, int]] = {}
            for role, layer, count in self.conn.execute(
                f"SELECT role, layer, count(*) FROM entries e WHERE {' AND '.join(where)} GROUP BY role, layer", params
            ):
                per.setdefault(role, {})[layer] = count
            where[0] = "e.forgotten_at IS NOT NULL"
            (forgotten,) = self.conn.execute(
                f"SELECT count(*) FROM entries e WHERE {' AND '.join(where)}", params
            ).fetchone()
            (changes, unapproved) = self.conn.execute(
                "SELECT count(*), count(*) - count(approved_at) FROM growth"
            ).fetchone()
        return {"roles": per, "forgotten": forgotten, "changes": changes, "unapproved_changes": unapproved}

    def compaction_written(self, kind: str, period: str) -> bool:
        with self._guard("compaction"):
            row = self.conn.execute(
                "SELECT 1 FROM compactions WHERE kind = ? AND period = ?", (kind, period)
            ).fetchone()
            return row is not None

    def record_compaction(self, kind: str, period: str, at: str, memo: str | None) -> None:
        with self._write("compaction") as conn:
            conn.execute("INSERT OR IGNORE INTO compactions VALUES (?, ?, ?, ?)", (kind, period, at, memo))
