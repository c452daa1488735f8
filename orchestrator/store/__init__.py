"""Durable state: a SQLite database (WAL) under ``.orchestrator/``.

Only the supervisor writes, and ``orchestrator release``, which records a release
(one row) before the memo goes back to its inbox, and ``orchestrator gc`` (retention), which
removes the records of old finished runs in small transactions; CLI commands open it read-only
for ``status``, ``history`` and ``trace`` when no orchestrator is running. Rows are plain dicts to the rest
of the code. Text is stored in a safe form (``safe_text``): a memo's file name
need not be UTF-8, and SQLite refuses what is not.

It is the connection and its transaction policy (``batch``, ``checkpoint``, the WAL checkpointed off the loop),
made with the runs repository (``store.runs``); a feature keeps its own tables and queries in its own module over the same
connection (``schedule.records``, ``supervisor.breaker``) and makes them itself.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from orchestrator.core.turn import at_turn_end
from orchestrator.store.runs import RUN_END, RUN_TIME, RUNS_SCHEMA, RunRecords, migrate, now_iso, safe_text
from orchestrator.store_wal import COMMITS, WalCheckpointer

__all__ = ["RUN_END", "RUN_TIME", "Store", "now_iso", "safe_text"]

META_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (        -- small facts about the records themselves (the memo index is complete, ...)
    key   TEXT PRIMARY KEY,
    value TEXT
);
"""


class Store(RunRecords):
    """The database of one project root."""

    def __init__(self, path: Path, readonly: bool = False) -> None:
        self.path = path
        self.closed = False
        if readonly:
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5, check_same_thread=False)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(path, timeout=5, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(META_SCHEMA + RUNS_SCHEMA)
            migrate(self.db)
        self.db.row_factory = sqlite3.Row
        self._wal: WalCheckpointer | None = None
        self._commits = 0
        self._lazy = False  # the open transaction is a lazy batch's (``batch``)
        self._attempt_keys: set[tuple[str, str]] | None = None  # (role, name) in memo_attempts, or not known

    def for_the_loop(self) -> None:
        """The running orchestrator's own store: its WAL is checkpointed by a thread (``store_wal``), and the
        memos with a kept attempt count are known in memory (only the loop writes them), so the many memos
        without one cost no query at their claim and end."""
        self.db.execute("PRAGMA wal_autocheckpoint=0")
        self._wal = WalCheckpointer(self.path)
        self._attempt_keys = {(row[0], row[1]) for row in self.db.execute("SELECT role, name FROM memo_attempts")}

    def _commit(self) -> None:
        self.db.execute("COMMIT")
        self._commits += 1
        if self._wal is not None and self._commits % COMMITS == 0:
            if self._wal.alive:
                self._wal.poke()
            else:  # it could not open the database: SQLite checkpoints at our commits again
                self.db.execute("PRAGMA wal_autocheckpoint=1000")
                self._wal = None

    def close(self) -> None:
        self.commit_pending()
        self.closed = True
        if self._wal is not None:
            self._wal.stop()
            self._wal = None
        self.db.close()

    @contextlib.contextmanager
    def batch(self, lazy: bool = False) -> Iterator[None]:
        """Every write inside is one transaction, committed at the end whatever happened inside.

        The supervisor handles each event in one: a run's start or end is several statements, and a
        commit each was a tenth of the loop's time in a drain of 2,000 memos. Nothing outside the
        loop's thread writes, and an event's handler never awaits, so no other write joins it.
        A nested ``batch`` is part of the outer one.

        ``lazy``: what nothing outside waits for (an agent's pid, which recovery also finds by its
        marks) is committed with the next batch of the same turn of the loop, or at the turn's end
        (``commit_pending``), instead of in a commit of its own.
        """
        if self.closed:  # the loop's last events write nothing
            yield
            return
        if self.db.in_transaction and not self._lazy:  # inside another batch
            yield
            return
        if self.db.in_transaction:
            self._lazy = False  # a lazy batch's transaction: this one ends it
        else:
            self.db.execute("BEGIN")
        try:
            yield
        finally:
            if self.db.in_transaction:
                if lazy:
                    self._lazy = True
                    at_turn_end(self.commit_pending)
                else:
                    self._commit()

    def commit_pending(self) -> None:
        """Commit what a lazy batch left open (nothing when there is none): before a spawn, and at a turn's end."""
        if self._lazy and not self.closed and self.db.in_transaction:
            self._commit()
        self._lazy = False

    def checkpoint(self) -> None:
        """Inside a ``batch``: commit what is written so far and go on in a new transaction.

        For what others can see on disk: a run's records land before its memo appears in
        ``archive/`` (or ``failed/``), and its end is on record once ``finish`` returns.
        """
        if not self.closed and self.db.in_transaction:
            self._commit()
            self.db.execute("BEGIN")

    def meta(self, key: str) -> str | None:
        """A value of the ``meta`` table, or None (also in a database from before the table)."""
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.OperationalError:  # no such table: an older database opened read-only
            return None
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str | None) -> None:
        if value is None:
            self.db.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
