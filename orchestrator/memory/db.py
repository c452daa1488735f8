"""The memory store: one SQLite database (WAL) under ``.orchestrator/``, written by many agents at once.

Entries live in ``entries``; a trigram FTS5 index (``entries_fts``, rowid = entry id)
finds any substring of three characters or more, so unsegmented Japanese is
found too; a contentless bigram index (``entries_bi``, tokens from ``grams``)
finds the words of one or two characters (記憶, 監督, PM). Nothing is ever
deleted: ``forget`` and retention leave a tombstone (``forgotten_at``,
``forgotten_why``), and every ``replace`` is kept in ``growth``.

Search cost is bounded whatever the size of the store: the words' index gives
the matching ids newest first, at most ``RANK_WINDOW`` of them in scope are
ranked (bm25, then importance, then recency) inside SQLite, and only the
``limit`` rows shown are read whole. ``$memory`` reads per group only as many
rows as its line budget can hold, plus counts. A database of an older schema
(``PRAGMA user_version``) is brought up to date, indexes filled, when first opened.
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
from orchestrator.memory import grams
from orchestrator.memory.rules import month_of_week, week_of

DB_NAME = "memory.db"
BUSY_TIMEOUT = 10.0  # the CLI waits this long for another writer (ORCHESTRATOR_MEMORY_WAIT overrides it)
WAIT_ENV = "ORCHESTRATOR_MEMORY_WAIT"
SCHEMA_VERSION = 2  # 1 (0 in the file): no bigram index; 2: entries_bi and the load indexes
RANK_WINDOW = 500  # a search ranks at most this many of its newest matches in scope
MMAP_BYTES = 256 * 1024 * 1024

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

_LIVE = "e.forgotten_at IS NULL"


def db_path(state_dir: Path) -> Path:
    return state_dir / DB_NAME


def _row(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    for key in ("tags", "summarises"):
        if key in out and isinstance(out[key], str):
            out[key] = json.loads(out[key])
    return out


def wait_seconds() -> float:
    """How long a CLI call waits for another writer: ``ORCHESTRATOR_MEMORY_WAIT`` seconds, else ``BUSY_TIMEOUT``."""
    try:
        return max(0.0, float(os.environ.get(WAIT_ENV, BUSY_TIMEOUT)))
    except ValueError:
        return BUSY_TIMEOUT


class MemoryDB:
    """One connection to the memory database; every method is one short transaction.

    ``timeout`` is how long a statement waits for another writer's lock (the
    supervisor passes a fraction of a second, so a locked database never stalls its loop).
    """

    def __init__(self, path: Path, *, create: bool = True, timeout: float | None = None) -> None:
        self.path = path
        self.timeout = wait_seconds() if timeout is None else timeout
        with self._guard("open"):
            if create:
                path.parent.mkdir(parents=True, exist_ok=True)
                os.chmod(path.parent, 0o700)
                if not path.exists():
                    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            elif not path.exists():
                raise MemoryUnavailableError(f"memory: no memory database at {path} yet (nothing was added)")
            self.conn = sqlite3.connect(path, timeout=self.timeout, isolation_level=None)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
            self._prepare()
            for suffix in ("-wal", "-shm"):
                with contextlib.suppress(OSError):
                    os.chmod(str(path) + suffix, 0o600)

    def _prepare(self) -> None:
        # a database of this schema needs nothing but its per-connection setting; a new or older one gets WAL,
        # the schema and its indexes filled. Switching to WAL and creating the schema may meet SQLITE_BUSY
        # without the busy handler when several agents open a new database at once: those steps are retried
        self.conn.execute("PRAGMA synchronous=NORMAL")
        (version,) = self.conn.execute("PRAGMA user_version").fetchone()
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise MemoryUnavailableError(
                f"memory: the database {self.path} has schema {version}, newer than this orchestrator's "
                f"{SCHEMA_VERSION}; upgrade the orchestrator"
            )
        deadline = time.monotonic() + max(self.timeout, 1.0)
        while True:
            try:
                self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.executescript(SCHEMA)
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        with self._write("upgrade") as conn:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version < SCHEMA_VERSION:  # else another process upgraded it meanwhile
                conn.execute("INSERT INTO entries_bi(entries_bi) VALUES ('delete-all')")
                rows = conn.execute("SELECT id, text FROM entries WHERE forgotten_at IS NULL")
                conn.executemany(
                    "INSERT INTO entries_bi (rowid, grams) VALUES (?, ?)", ((i, grams.tokens(t)) for i, t in rows)
                )
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

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
            conn.execute("INSERT INTO entries_bi (rowid, grams) VALUES (?, ?)", (new_id, grams.tokens(entry["text"])))
            conn.executemany("INSERT OR IGNORE INTO summaries VALUES (?, ?)", [(i, new_id) for i in ids])
            return new_id

    def forget(self, entry_id: int, why: str, by: str, at: str, *, clear_text: bool = False) -> None:
        """Make a live entry a tombstone with its reason; it is no longer loaded or found."""
        with self._write("forget") as conn:
            self._live(conn, entry_id, "forget")
            self._tombstone(conn, entry_id, why, by, at, clear_text)

    @staticmethod
    def _tombstone(conn: sqlite3.Connection, entry_id: int, why: str, by: str, at: str, clear: bool) -> None:
        row = conn.execute("SELECT text FROM entries WHERE id = ? AND forgotten_at IS NULL", (entry_id,)).fetchone()
        if row is not None:  # a contentless index forgets a row only when given the tokens it was given
            conn.execute(
                "INSERT INTO entries_bi (entries_bi, rowid, grams) VALUES ('delete', ?, ?)",
                (entry_id, grams.tokens(row[0])),
            )
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
            conn.execute(
                "INSERT INTO entries_bi (entries_bi, rowid, grams) VALUES ('delete', ?, ?)",
                (entry_id, grams.tokens(before)),
            )
            conn.execute("INSERT INTO entries_bi (rowid, grams) VALUES (?, ?)", (entry_id, grams.tokens(text)))
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
        """Live entries holding every word of ``query``: by relevance, then importance, then recency.

        Words of three characters or more are found by the trigram index, shorter ones by the bigram
        index; the index of the longer words leads and the others narrow it. Only the ``RANK_WINDOW``
        newest matches in scope are ranked, so a word found in thousands of entries costs no more
        than one found in hundreds.
        """
        words = [w.strip("\"'") for w in query.split()]
        words = [w for w in words if w]
        if not words:
            raise UsageError("memory search: give a word to search for")
        long = [w for w in words if len(w.lower()) >= 3]
        short = [w for w in words if len(w.lower()) < 3]
        where, params = self._filters(roles, layer, category, since, until, min_importance)
        if long:
            table, match = "entries_fts", " AND ".join('"' + w.replace('"', '""') + '"' for w in long)
            if short:
                where.append("e.id IN (SELECT rowid FROM entries_bi WHERE entries_bi MATCH ?)")
                params.append(" AND ".join(grams.query(w) for w in short))
        else:
            table, match = "entries_bi", " AND ".join(grams.query(w) for w in short)
        found = f"FROM {table} f JOIN entries e ON e.id = f.rowid WHERE {table} MATCH ? AND " + " AND ".join(where)
        with self._guard("search"):
            # the oldest id of the newest RANK_WINDOW matches in scope (none: fewer match, rank them all)
            cutoff = self.conn.execute(
                f"SELECT f.rowid {found} ORDER BY f.rowid DESC LIMIT 1 OFFSET {RANK_WINDOW - 1}", [match, *params]
            ).fetchone()
            window = "" if cutoff is None else f" AND f.rowid >= {int(cutoff[0])}"
            ranked = self.conn.execute(
                f"SELECT e.id, bm25({table}) AS score {found}{window}"
                " ORDER BY score, e.importance DESC, e.created_at DESC, e.id DESC LIMIT ?",
                [match, *params, limit],
            ).fetchall()
            ids = [r[0] for r in ranked]
            if not ids:
                return []
            rows = {
                r["id"]: r
                for r in self.conn.execute(f"SELECT * FROM entries WHERE id IN ({','.join('?' * len(ids))})", ids)
            }
        return [{**_row(rows[i]), "score": score} for i, score in ranked]

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

    def prompt_groups(
        self, roles: Sequence[str], today: date, most: int | None = None
    ) -> list[tuple[str, list[dict[str, Any]], int]]:
        """What ``$memory`` loads, in order: core, daily of the last 7 days, weekly of the last 4 weeks, last monthly.

        Each group comes newest first with how many of its entries were not read. With ``most``
        (the line budget) only what the budget can hold is read: the budget keeps a prefix of the
        order core, daily, weekly, monthly (each by importance, then newest), and every entry takes
        at least a line, so a group reads at most ``most`` minus the entries of the groups before it.
        """
        marks = ",".join("?" * len(roles))
        days = [(today - timedelta(days=n)).isoformat() for n in range(7)]
        weeks = [week_of(today - timedelta(days=7 * n)) for n in range(4)]
        out: list[tuple[str, list[dict[str, Any]], int]] = []
        room = most
        with self._guard("load"):
            (last,) = self.conn.execute(
                f"SELECT max(period) FROM entries e WHERE {_LIVE} AND e.role IN ({marks}) AND e.layer = 'monthly'",
                list(roles),
            ).fetchone()
            plan: list[tuple[str, str, list[str]]] = [
                ("core", "core", []),
                ("daily, last 7 days", "daily", days),
                ("weekly, last 4 weeks", "weekly", weeks),
                (f"monthly, {last}" if last else "monthly", "monthly", [last] if last else []),
            ]
            for title, layer, periods in plan:
                if layer != "core" and not periods:
                    out.append((title, [], 0))
                    continue
                where = f"{_LIVE} AND e.role IN ({marks}) AND e.layer = ?"
                if periods:
                    where += f" AND e.period IN ({','.join('?' * len(periods))})"
                args = [*roles, layer, *periods]
                total = None
                if room is not None:
                    (total,) = self.conn.execute(f"SELECT count(*) FROM entries e WHERE {where}", args).fetchone()
                ids = [
                    i
                    for (i,) in self.conn.execute(
                        f"SELECT e.id FROM entries e WHERE {where} ORDER BY e.importance DESC, e.created_at DESC, e.id"
                        + ("" if room is None else f" LIMIT {max(0, room)}"),
                        args,
                    )
                ]
                rows = self.conn.execute(
                    "SELECT id, period, category, importance, created_at, text FROM entries"
                    f" WHERE id IN ({','.join('?' * len(ids))})",
                    ids,
                ).fetchall()
                entries = [
                    {"id": i, "period": p, "category": c, "importance": n, "created_at": at, "text": t}
                    for i, p, c, n, at, t in rows
                ]
                entries.sort(key=lambda x: (x["created_at"], x["id"]), reverse=True)
                if total is not None and room is not None:
                    room -= total
                out.append((title, entries, 0 if total is None else total - len(entries)))
        return out

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
        With ``apply=False`` nothing changes and only the waiting are counted.
        """
        retired = 0
        waiting: dict[str, int] = {}
        summary = (
            "(SELECT min(s.summary_id) FROM summaries s JOIN entries x ON x.id = s.summary_id"
            " WHERE s.entry_id = e.id AND x.layer = ? AND x.forgotten_at IS NULL)"
        )
        with self._write("retention") if apply else self._read("retention") as conn:
            for layer, summary_layer, cutoff in self._retention_rules(today, daily_days, weekly_days):
                if not apply:
                    for period, count in conn.execute(
                        f"SELECT e.period, count(*) FROM entries e WHERE {_LIVE} AND e.layer = ? AND e.period < ?"
                        f" AND {summary} IS NULL GROUP BY e.period",
                        (layer, cutoff, summary_layer),
                    ):
                        key = self._waiting_key(layer, period)
                        waiting[key] = waiting.get(key, 0) + count
                    continue
                rows = conn.execute(
                    f"SELECT e.id, e.period, {summary} AS summary FROM entries e"
                    f" WHERE {_LIVE} AND e.layer = ? AND e.period < ?",
                    (summary_layer, layer, cutoff),
                ).fetchall()
                for entry_id, period, summary_id in rows:
                    if summary_id is None:
                        key = self._waiting_key(layer, period)
                        waiting[key] = waiting.get(key, 0) + 1
                    else:
                        days = daily_days if layer == "daily" else weekly_days
                        why = f"retention: {layer} entry past {days} days, summarised by #{summary_id}"
                        self._tombstone(conn, entry_id, why, "retention", at, True)
                        retired += 1
        return retired, waiting

    @staticmethod
    def _retention_rules(today: date, daily_days: int, weekly_days: int) -> list[tuple[str, str, str]]:
        return [
            ("daily", "weekly", (today - timedelta(days=daily_days)).isoformat()),
            ("weekly", "monthly", week_of(today - timedelta(days=weekly_days))),
        ]

    @staticmethod
    def _waiting_key(layer: str, period: str) -> str:
        return f"{layer} {week_of(date.fromisoformat(period)) if layer == 'daily' else month_of_week(period)}"

    @contextlib.contextmanager
    def _read(self, doing: str) -> Iterator[sqlite3.Connection]:
        with self._guard(doing):
            yield self.conn

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
