"""The runs repository: the runs, their attempts, their memos, the cancellations and the memos' kept attempt
counts, as tables of the one database and the queries over them (rows are plain dicts to the rest of the code).

``Store`` is made of it and of the transaction policy (``orchestrator.store``); every write here runs inside the
caller's ``batch``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from orchestrator.core.states import FINISHED
from orchestrator.core.text import printable

RUNS_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    role          TEXT NOT NULL,
    backend       TEXT NOT NULL DEFAULT 'command',
    memos         TEXT NOT NULL,          -- JSON list of file names
    memo_ids      TEXT NOT NULL,          -- JSON list of front-matter ids (or null)
    subject       TEXT,
    state         TEXT NOT NULL,
    attempt       INTEGER NOT NULL DEFAULT 1,
    pid           INTEGER,
    create_time   REAL,
    created_at    TEXT NOT NULL,
    started_at    TEXT,
    ended_at      TEXT,
    next_attempt_at TEXT,
    exit_code     INTEGER,
    reason        TEXT,
    log_path      TEXT,
    cost_usd      REAL,
    input_tokens  INTEGER,
    output_tokens INTEGER,
    num_turns     INTEGER,
    session_id    TEXT,
    is_error      INTEGER,
    seq           INTEGER                 -- the role's run number (1, 2, 3, ...), for runs that started an agent
);
CREATE INDEX IF NOT EXISTS runs_state ON runs(state);

CREATE TABLE IF NOT EXISTS attempts (
    run_id      INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    pid         INTEGER,
    started_at  TEXT,
    ended_at    TEXT,
    exit_code   INTEGER,
    outcome     TEXT,
    reason      TEXT,
    log_path    TEXT,
    PRIMARY KEY (run_id, attempt)
);
CREATE TABLE IF NOT EXISTS cancellations (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id         INTEGER,
    role           TEXT NOT NULL,
    memo           TEXT NOT NULL,
    memo_id        TEXT,
    subject        TEXT,
    cancelled_at   TEXT NOT NULL,
    who            TEXT,
    reason         TEXT,
    previous_state TEXT,
    pids           TEXT,
    seconds        REAL,
    ran_seconds    REAL,
    log_path       TEXT,
    notice_path    TEXT
);
CREATE INDEX IF NOT EXISTS cancellations_memo_id ON cancellations(memo_id);
CREATE TABLE IF NOT EXISTS memo_attempts (
    role     TEXT NOT NULL,
    name     TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    PRIMARY KEY (role, name)
);
CREATE TABLE IF NOT EXISTS run_memos (   -- which runs held a memo (its role and file name): trace reads no other run
    role   TEXT NOT NULL,
    name   TEXT NOT NULL,
    run_id INTEGER NOT NULL,
    PRIMARY KEY (role, name, run_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS run_memos_run ON run_memos(run_id);
CREATE TABLE IF NOT EXISTS memo_index (  -- where each memo lies: kept at every claim and move (orchestrator/intake/memo_index)
    role     TEXT NOT NULL,              -- its path is memo/<role>/<folder>/<name>
    folder   TEXT NOT NULL,
    name     TEXT NOT NULL,
    memo_id  TEXT,
    reply_to TEXT,
    moved_at REAL NOT NULL,              -- when it came into this folder (seconds since the epoch)
    PRIMARY KEY (role, folder, name)
);
CREATE INDEX IF NOT EXISTS memo_index_id ON memo_index(memo_id);
CREATE INDEX IF NOT EXISTS memo_index_reply ON memo_index(reply_to);
CREATE INDEX IF NOT EXISTS memo_index_name ON memo_index(name);
"""

#: when a run happened, as ``history``, budgets and their indexes read it (the same text everywhere, or no index)
RUN_TIME = "COALESCE(started_at, created_at)"
#: when a run ended, as retention reads it
RUN_END = "COALESCE(ended_at, created_at)"

_RUN_COLUMNS = {
    "seq",
    "node",
    "adopted_at",
    "workspace",
    "branch",
    "backend",
    "memos",
    "memo_ids",
    "subject",
    "state",
    "attempt",
    "pid",
    "create_time",
    "started_at",
    "ended_at",
    "next_attempt_at",
    "exit_code",
    "reason",
    "log_path",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    *(FIGURES := ("cached_input_tokens", "cache_write_input_tokens", "reasoning_output_tokens", "cost_estimated")),
    "num_turns",
    "session_id",
    "session_figures",
    "is_error",
    "log_pruned_at",
    "transcript_pruned_at",
}


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


safe_text = printable  # the name the store's callers know it by


def _safe(value: Any) -> Any:
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, (list, tuple)):
        return [_safe(item) for item in value]
    return value


def _encode(key: str, value: Any) -> Any:
    if key in ("memos", "memo_ids", "pids", "session_figures") and not isinstance(value, str):
        return json.dumps(_safe(value), ensure_ascii=False)
    return _safe(value)


def run_row(row: sqlite3.Row) -> dict[str, Any]:
    """A row as the rest of the code takes it: a dict, its JSON (memos, memo ids, pids, session figures) read."""
    out = dict(row)
    for key in ("memos", "memo_ids", "pids", "session_figures"):
        if isinstance(out.get(key), str):
            out[key] = json.loads(out[key])
    return out


class RunRecords:
    """The runs' queries, over the connection of the ``Store`` they are part of."""

    db: sqlite3.Connection
    _attempt_keys: set[tuple[str, str]] | None  # (role, name) in memo_attempts, or not known

    def insert_run_numbered(self, numbered: bool, **fields: Any) -> tuple[int, int | None]:
        """Insert a run; a ``numbered`` one takes its role's next run number (1, 2, 3, ...) in the same statement,
        so a number is never given twice (retention never removes a role's newest numbered run)."""
        if not numbered:
            return self.insert_run(**fields), None
        fields.setdefault("created_at", now_iso())
        keys = list(fields)
        row = self.db.execute(
            f"INSERT INTO runs ({', '.join(keys)}, seq) VALUES ({', '.join('?' * len(keys))}, "
            "(SELECT COALESCE(MAX(seq), 0) + 1 FROM runs WHERE role = ?)) RETURNING run_id, seq",
            [*(_encode(k, fields[k]) for k in keys), safe_text(fields["role"])],
        ).fetchone()
        self._note_memos(int(row[0]))
        return int(row[0]), int(row[1])

    def insert_run(self, **fields: Any) -> int:
        fields.setdefault("created_at", now_iso())
        keys = list(fields)
        cur = self.db.execute(
            f"INSERT INTO runs ({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))})",
            [_encode(k, fields[k]) for k in keys],
        )
        self._note_memos(int(cur.lastrowid or 0))
        return int(cur.lastrowid or 0)

    def _note_memos(self, run_id: int, again: bool = False) -> None:
        """The run's memos as its record names them, in ``run_memos`` (``again``: after they may have been renamed;
        names that did not change cost no write)."""
        if again:
            self.db.execute(
                "DELETE FROM run_memos WHERE run_id = ? AND name NOT IN "
                "(SELECT memo.value FROM runs, json_each(runs.memos) AS memo WHERE runs.run_id = ?)",
                (run_id, run_id),
            )
        self.db.execute(
            "INSERT OR IGNORE INTO run_memos (role, name, run_id) "
            "SELECT runs.role, memo.value, runs.run_id FROM runs, json_each(runs.memos) AS memo WHERE runs.run_id = ?",
            (run_id,),
        )

    def update_run(self, run_id: int, **fields: Any) -> None:
        unknown = set(fields) - _RUN_COLUMNS
        if unknown:
            raise KeyError(f"unknown run columns {unknown}")
        self.db.execute(
            f"UPDATE runs SET {', '.join(f'{k} = ?' for k in fields)} WHERE run_id = ?",
            [*(_encode(k, v) for k, v in fields.items()), run_id],
        )
        if "memos" in fields:
            self._note_memos(run_id, again=True)

    def run(self, run_id: int) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return run_row(row) if row else None

    def session_spent(self, session_id: str, before_run: int) -> dict[str, Any]:
        """What the runs before ``before_run`` spent in ``session_id`` (a session resumed by a later run, as an
        answer to a question resumes it), summed: the part of its running totals that is theirs. Each run's own
        part of its last session (``session_figures``), not its whole spend: an attempt before the one that
        asked may have spent in another session; a run recorded before that column counts whole."""
        rows = self.db.execute(
            f"SELECT session_figures, {', '.join(SESSION_FIGURES)} FROM runs WHERE session_id = ? AND run_id < ?",
            (session_id, before_run),
        )
        spent: dict[str, Any] = {}
        for own, *whole in rows:
            figures = json.loads(own) if own else dict(zip(SESSION_FIGURES, whole, strict=True))
            for name in SESSION_FIGURES:
                if figures.get(name):
                    spent[name] = spent.get(name, 0) + figures[name]
        return spent

    def runs_in_states(self, states: Iterable[str]) -> list[dict[str, Any]]:
        states = list(states)
        rows = self.db.execute(
            f"SELECT * FROM runs WHERE state IN ({', '.join('?' * len(states))}) ORDER BY run_id", states
        ).fetchall()
        return [run_row(r) for r in rows]

    def recent_runs(self, limit: int = 20) -> list[dict[str, Any]]:
        """The last ``limit`` runs that ended, newest first."""
        states = [state.value for state in FINISHED]
        # ``+state``: walk the runs newest first by their key and stop at ``limit``; through the state index
        # SQLite would read and sort every finished run there is (100,000 rows for 20)
        rows = self.db.execute(
            f"SELECT * FROM runs WHERE +state IN ({', '.join('?' * len(states))}) ORDER BY run_id DESC LIMIT ?",
            [*states, limit],
        ).fetchall()
        return [run_row(r) for r in rows]

    def history(
        self,
        role: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        """Runs oldest first: of ``role``, that happened (``RUN_TIME``) from ``since`` and before ``until``, the newest
        ``limit`` of them. Each filter is served by an index (``runs_time``, ``runs_role_time``)."""
        query, args = "SELECT * FROM runs WHERE 1=1", []
        if role:
            query += " AND role = ?"
            args.append(role)
        if since:
            query += f" AND {RUN_TIME} >= ?"
            args.append(since)
        if until:
            query += f" AND {RUN_TIME} < ?"
            args.append(until)
        if limit is None and not (since or until):
            return [run_row(r) for r in self.db.execute(query + " ORDER BY run_id", args).fetchall()]
        # ordered by the indexed time, so the index serves the order too (by ``run_id`` SQLite may scan every run)
        order = f" ORDER BY {RUN_TIME} DESC, run_id DESC LIMIT ?" if limit is not None else f" ORDER BY {RUN_TIME}"
        rows = self.db.execute(query + order, [*args, limit] if limit is not None else args).fetchall()
        return sorted((run_row(r) for r in rows), key=lambda row: row["run_id"])

    def runs_of_memo(self, role: str, name: str) -> list[dict[str, Any]]:
        """The runs that held the memo ``name`` of ``role`` (as their records name it now), oldest first."""
        rows = self.db.execute(
            "SELECT runs.* FROM run_memos JOIN runs USING (run_id) WHERE run_memos.role = ? AND run_memos.name = ? "
            "ORDER BY run_id",
            (safe_text(role), safe_text(name)),
        ).fetchall()
        return [run_row(r) for r in rows]

    def last_run_of_memo(self, query: str) -> dict[str, Any] | None:
        """The newest run that held a memo named ``query`` (file name, with or without ``.md``, or front-matter id)."""
        base = query.rsplit("/", 1)[-1]
        row = self.db.execute(
            "SELECT runs.* FROM runs WHERE EXISTS (SELECT 1 FROM json_each(runs.memos) WHERE value IN (?, ?)) "
            "OR EXISTS (SELECT 1 FROM json_each(runs.memo_ids) WHERE value = ?) ORDER BY run_id DESC LIMIT 1",
            (base, base + ".md", query),
        ).fetchone()
        return run_row(row) if row else None

    def spent_since(self, since_iso: str, role: str | None = None) -> float:
        """Dollars spent by the runs since ``since_iso`` (of ``role``), estimated costs among them."""
        return float(self._since("COALESCE(SUM(cost_usd), 0)", since_iso, role))

    def estimated_since(self, since_iso: str, role: str | None = None) -> bool:
        """Whether some of what was spent since ``since_iso`` (by ``role``) is an estimate from `prices`."""
        return bool(self._since("COALESCE(MAX(cost_estimated), 0)", since_iso, role))

    def _since(self, what: str, since_iso: str, role: str | None) -> Any:
        """``what`` over the runs from the instant ``since_iso`` on, whatever offset each run's time was written
        with (a day when the clocks change holds two): the text range (a time's text is within a day of its
        instant's in any offset) keeps the scan to a few days, ``julianday`` compares the instants."""
        wide = (datetime.fromisoformat(since_iso) - timedelta(days=2)).isoformat(timespec="milliseconds")
        query = f"SELECT {what} FROM runs WHERE {RUN_TIME} >= ? AND julianday({RUN_TIME}) >= julianday(?)"
        args: list[Any] = [wide, since_iso]
        if role:
            query += " AND role = ?"
            args.append(role)
        return self.db.execute(query, args).fetchone()[0]

    # attempts ---------------------------------------------------------
    def record_attempt(self, run_id: int, attempt: int, **fields: Any) -> None:
        """Insert or update an attempt's row; columns not given keep what an earlier call recorded (its pid)."""
        keys = ["run_id", "attempt", *fields]
        update = f"UPDATE SET {', '.join(f'{k} = excluded.{k}' for k in fields)}" if fields else "NOTHING"
        self.db.execute(
            f"INSERT INTO attempts ({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))}) "
            f"ON CONFLICT (run_id, attempt) DO {update}",
            [run_id, attempt, *(_safe(v) for v in fields.values())],
        )

    def attempts(self, run_id: int) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt", (run_id,)).fetchall()
        return [run_row(r) for r in rows]

    # memo attempt counts that survive a return to the inbox -------------
    def memo_attempts(self, role: str, name: str) -> int:
        name = safe_text(name)
        if self._attempt_keys is not None and (role, name) not in self._attempt_keys:
            return 0
        row = self.db.execute("SELECT attempts FROM memo_attempts WHERE role = ? AND name = ?", (role, name)).fetchone()
        return int(row[0]) if row else 0

    def set_memo_attempts(self, role: str, name: str, attempts: int) -> None:
        name = safe_text(name)
        self.db.execute("INSERT OR REPLACE INTO memo_attempts VALUES (?, ?, ?)", (role, name, attempts))
        if self._attempt_keys is not None:
            self._attempt_keys.add((role, name))

    def forget_memo_attempts(self, role: str, names: Iterable[str]) -> None:
        keys = {(role, safe_text(n)) for n in names}
        if self._attempt_keys is not None:
            keys &= self._attempt_keys
            self._attempt_keys -= keys
        if keys:
            self.db.executemany("DELETE FROM memo_attempts WHERE role = ? AND name = ?", sorted(keys))

    # cancellations ----------------------------------------------------
    def record_cancellation(self, **fields: Any) -> int:
        keys = list(fields)
        cur = self.db.execute(
            f"INSERT INTO cancellations ({', '.join(keys)}) VALUES ({', '.join('?' * len(keys))})",
            [_encode(k, fields[k]) for k in keys],
        )
        return int(cur.lastrowid or 0)

    def cancellation_of(self, memo_id: str) -> dict[str, Any] | None:
        row = self.db.execute(
            "SELECT * FROM cancellations WHERE memo_id = ? ORDER BY id DESC LIMIT 1", (safe_text(memo_id),)
        ).fetchone()
        return run_row(row) if row else None


SESSION_FIGURES = (  # a session's running totals (its turns are counted per process)
    "cost_usd",
    "input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
)


def migrate(db: sqlite3.Connection) -> None:
    """Columns added since a database was made: added in place, empty for the runs recorded before."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    if "seq" not in columns:
        db.execute("ALTER TABLE runs ADD COLUMN seq INTEGER")
    if "node" not in columns:  # the Ray node that ran it (orchestrator/agents/ray)
        db.execute("ALTER TABLE runs ADD COLUMN node TEXT")
    db.execute("CREATE INDEX IF NOT EXISTS runs_role_seq ON runs(role, seq)")
    for column in ("log_pruned_at", "transcript_pruned_at", "adopted_at", "workspace", "branch", "session_figures"):
        # retention removed; a restart took back; the workspace and branch it worked in (orchestrator/workspaces);
        # JSON: the run's own part of its last session's running totals (``session_spent``)
        if column not in columns:
            db.execute(f"ALTER TABLE runs ADD COLUMN {column} TEXT")
    for column in FIGURES:  # the tokens Codex reports beside input and output; a cost estimated from `prices`
        if column not in columns:
            db.execute(f"ALTER TABLE runs ADD COLUMN {column} INTEGER")
    db.execute(f"CREATE INDEX IF NOT EXISTS runs_time ON runs({RUN_TIME})")  # history --since/--until, budgets
    db.execute(f"CREATE INDEX IF NOT EXISTS runs_role_time ON runs(role, {RUN_TIME})")  # history --role
    db.execute(f"CREATE INDEX IF NOT EXISTS runs_end ON runs({RUN_END})")  # retention: what ended before a time
    db.execute("CREATE INDEX IF NOT EXISTS runs_session ON runs(session_id)")  # a session other runs carried on
    if db.execute("SELECT 1 FROM meta WHERE key = 'run_memos'").fetchone() is None:
        # the runs recorded before ``run_memos`` existed; once, in the same transaction as the mark
        db.execute("BEGIN")
        db.execute(
            "INSERT OR IGNORE INTO run_memos (role, name, run_id) "
            "SELECT runs.role, memo.value, runs.run_id FROM runs, json_each(runs.memos) AS memo"
        )
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('run_memos', 'complete')")
        db.execute("COMMIT")
