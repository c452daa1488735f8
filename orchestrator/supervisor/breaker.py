"""The loop breaker: two agents that keep answering each other are stopped before they spend the night.

A memo check (``Launcher.memo_checks``) run at each claim. A memo is held back
(``memo/<role>/held/`` with a ``.reason`` beside it, by the launcher) when

- its ``reply_to`` chain is deeper than ``limits.chain_depth`` (each link a memo
  this orchestrator handed out before), or
- its sender is a role of this team (names compared as ``normal_sender`` does) that
  already had N memos to this role delivered that were written within one window of
  ``limits.pair_rate`` (N per window) with this one. A memo counts at the time it was written
  (``written_time``: its ``created_at`` when sane, else when the orchestrator first
  saw it), not at its claim, so a backlog claimed at once (after downtime, or a
  hold) is not a loop. People and scripts (``alice``, ``ci-bot``) are checked
  against ``chain_depth`` only.

Memos from ``owner`` or ``orchestrator`` are never held, nor a memo that
``orchestrator release`` let through. The ``notify`` role gets one notice per
chain (the chain's root id), however many of its memos are held. Every checked
memo is recorded (``memo_links``), so a memo returned to its inbox and claimed
again is not counted twice.
"""

from __future__ import annotations

import bisect
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.config import Role
from orchestrator.core.run import MemoRef
from orchestrator.core.senders import NEVER_HELD, normal_sender
from orchestrator.core.team_events import TeamEvent
from orchestrator.intake import outbox
from orchestrator.store import Store
from orchestrator.supervisor.extension import Extension, Host

DELIVERED, HELD = "delivered", "held"
ROOT_SEARCH_CAP = 100_000  # links followed to find a chain's root (which names the chain for its one notice)
# a created_at is believed when it is a date and time (a naive one is local time) between these bounds:
CLOCK_SKEW = 300.0  # at most this after the memo was first seen (the writer's clock a little fast) ...
EARLIEST_WRITTEN = datetime(2000, 1, 1, tzinfo=UTC).timestamp()  # ... and not before (a zeroed clock)

SCHEMA = """
CREATE TABLE IF NOT EXISTS memo_links (  -- every memo the loop breaker checked at its claim
    role      TEXT NOT NULL,              -- the role it was addressed to (its folder)
    name      TEXT NOT NULL,
    memo_id   TEXT,
    reply_to  TEXT,
    sender    TEXT,                       -- its `from`, normalised (lower case, dashes)
    written_ts REAL NOT NULL,             -- when it was written (seconds since the epoch): its created_at, when
                                          -- sane, else when the supervisor first saw it (limits.pair_rate)
    outcome   TEXT NOT NULL,              -- delivered | held
    PRIMARY KEY (role, name)
);
CREATE INDEX IF NOT EXISTS memo_links_id ON memo_links(memo_id);
CREATE TABLE IF NOT EXISTS memo_releases (  -- `orchestrator release`: these memos are never held again
    role        TEXT NOT NULL,
    name        TEXT NOT NULL,
    memo_id     TEXT,
    released_at TEXT NOT NULL,
    who         TEXT
);
CREATE TABLE IF NOT EXISTS breaker_notices (  -- one notice to the notify role per held chain
    chain       TEXT PRIMARY KEY,
    noticed_at  TEXT NOT NULL,
    notice_path TEXT
);
CREATE INDEX IF NOT EXISTS memo_links_written ON memo_links(written_ts);  -- retention
"""
EXPIRED_LINKS = "written_ts < ?"  # retention: the links checked before a cutoff (seconds since the epoch)


def ensure_tables(db: sqlite3.Connection) -> None:
    """The breaker's tables, made or brought up to date (a writable connection)."""
    links = {row[1] for row in db.execute("PRAGMA table_info(memo_links)")}
    if "seen_ts" in links:  # the time of its check at the claim: the nearest to a written time those rows have
        db.execute("ALTER TABLE memo_links RENAME COLUMN seen_ts TO written_ts")  # its index follows
    db.executescript(SCHEMA)
    db.execute("CREATE INDEX IF NOT EXISTS memo_links_pair ON memo_links(sender, role, written_ts)")


def links_of(db: sqlite3.Connection, memo_ids: set[str]) -> list[tuple[str | None, str | None]]:
    """(sender, reply_to) of each checked memo with one of these ids; senders as ``normal_sender`` has them."""
    if not memo_ids or not _has_links(db):
        return []
    marks = ", ".join("?" * len(memo_ids))
    rows = db.execute(f"SELECT sender, reply_to FROM memo_links WHERE memo_id IN ({marks})", sorted(memo_ids))
    return [(row[0], row[1]) for row in rows]


def _has_links(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'memo_links'").fetchone() is not None


def written_time(created_at: str | None, seen_ts: float) -> float:
    """When a memo was written (seconds since the epoch): its ``created_at`` when sane, else ``seen_ts``.

    Sane: a date with a time of day, from 2000 on, at most ``CLOCK_SKEW`` after ``seen_ts`` (when the
    orchestrator first saw the memo); a time after that sight counts as the sight, since a memo is
    written before it is seen. Anything else (a placeholder, a date alone, a clock far off) is not believed.
    """
    if not created_at or ":" not in created_at:
        return seen_ts
    try:
        moment = datetime.fromisoformat(created_at.strip()).timestamp()  # a naive time is local
    except (ValueError, OverflowError, OSError):
        return seen_ts
    if moment < EARLIEST_WRITTEN or moment > seen_ts + CLOCK_SKEW:
        return seen_ts
    return min(moment, seen_ts)


def busiest_window(times: list[float], at: float, window: float) -> int:
    """The most of ``times`` (sorted) that lie within one window of ``window`` seconds that contains ``at``.

    Windows are half-open, ``[start, start + window)``; the busiest starts at one of the times (or at
    ``at``). Times written after ``at`` count too: a backlog is claimed in file-name order, not written order.
    """
    best = 0
    for start in [t for t in times if at - window < t <= at] + [at]:
        best = max(best, bisect.bisect_left(times, start + window) - bisect.bisect_left(times, start))
    return best


def describe_window(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def is_released(store: Store, role: str, name: str, memo_id: str | None) -> bool:
    """Whether ``orchestrator release`` let this memo through (by file name or front-matter id, in this role)."""
    row = store.db.execute(
        "SELECT 1 FROM memo_releases WHERE role = ? AND (name = ? OR (memo_id IS NOT NULL AND memo_id = ?)) LIMIT 1",
        (role, name, memo_id),
    ).fetchone()
    return row is not None


def record_release(store: Store, role: str, name: str, memo_id: str | None, when: str, who: str) -> None:
    """Put a release on record before the memo moves: its next claim must not hold it again."""
    store.db.execute(
        "INSERT INTO memo_releases (role, name, memo_id, released_at, who) VALUES (?, ?, ?, ?, ?)",
        (role, name, memo_id, when, who),
    )


class Breaker(Extension):
    """The memo check of the limits in ``roles.yaml``, at every claim."""

    def __init__(self, host: Host) -> None:
        self.config = host.config
        self.store = host.store
        self.console = host.console
        self.clock = host.clock
        self.tell = host.tell
        self.team = {normal_sender(name) for name in self.config.roles}  # the senders ``pair_rate`` counts
        ensure_tables(self.store.db)

    def check_memo(self, role: Role, ref: MemoRef, text: str) -> str | None:
        """Why ``ref`` must be held (one line), or None to deliver it."""
        sender = normal_sender(ref.sender)
        earlier = self.store.db.execute(
            "SELECT memo_id, outcome FROM memo_links WHERE role = ? AND name = ?", (role.name, ref.name)
        ).fetchone()
        if earlier is not None and earlier[0] == ref.memo_id and earlier[1] == DELIVERED:
            return None  # claimed before and returned to the inbox: checked and counted once
        why = None
        seen = self.clock.now().timestamp() if ref.seen_ts is None else ref.seen_ts
        written = written_time(ref.created_at, seen)
        if sender not in NEVER_HELD and not is_released(self.store, role.name, ref.name, ref.memo_id):
            why = self._over_depth(ref) or self._over_rate(role.name, sender, written)
        self._record(role.name, ref, sender, written, HELD if why else DELIVERED)
        if why:
            self._tell(role.name, ref, why)
        return why

    # ------------------------------------------------------------ the limits
    def _over_depth(self, ref: MemoRef) -> str | None:
        limit = self.config.limits.chain_depth
        if limit is None or not ref.reply_to:
            return None
        depth, _ = self.chain(ref.reply_to, limit + 1)
        if depth <= limit:
            return None
        return (
            f"its reply_to chain is deeper than limits.chain_depth ({limit}); a runaway loop? "
            f"`orchestrator release {ref.label}` runs it"
        )

    def _over_rate(self, role: str, sender: str | None, written: float) -> str | None:
        """Over when ``count`` memos the sender wrote to this role were delivered within a window with this one."""
        rate = self.config.limits.pair_rate
        if rate is None or sender not in self.team:
            return None
        count, window = rate
        rows = self.store.db.execute(
            "SELECT written_ts FROM memo_links WHERE sender = ? AND role = ? AND outcome = ? "
            "AND written_ts > ? AND written_ts < ? ORDER BY written_ts",
            (sender, role, DELIVERED, written - window, written + window),
        ).fetchall()
        delivered = busiest_window([row[0] for row in rows], written, window)
        if delivered < count:
            return None
        return (
            f"{sender} already sent {role} {delivered} memos within {describe_window(window)}, "
            f"the limits.pair_rate ({count}/{describe_window(window)}); a runaway loop?"
        )

    def chain(self, reply_to: str, cap: int) -> tuple[int, str]:
        """(links above a memo that replies to ``reply_to``, counted up to ``cap``; the chain's root id).

        A repeated id is followed along every memo that carries it: the deepest counts.
        """
        depth, level, root, seen = 1, {reply_to}, reply_to, {reply_to}
        while depth < cap:
            marks = ", ".join("?" * len(level))
            rows = self.store.db.execute(
                f"SELECT DISTINCT reply_to FROM memo_links WHERE memo_id IN ({marks}) AND reply_to IS NOT NULL",
                sorted(level),
            ).fetchall()
            parents = {row[0] for row in rows} - seen  # a cycle of reply_to links ends here
            if not parents:
                break
            seen |= parents
            depth += 1
            level, root = parents, min(parents)
        return depth, root

    # ------------------------------------------------------------ records and notices
    def _record(self, role: str, ref: MemoRef, sender: str | None, written: float, outcome: str) -> None:
        self.store.db.execute(
            "INSERT OR REPLACE INTO memo_links (role, name, memo_id, reply_to, sender, written_ts, outcome) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (role, ref.name, ref.memo_id, ref.reply_to, sender, written, outcome),
        )

    def _tell(self, role: str, ref: MemoRef, why: str) -> None:
        """One notice per chain to the notify role: the first held memo of a chain is news, the next ones are not."""
        chain = self.chain(ref.reply_to, ROOT_SEARCH_CAP)[1] if ref.reply_to else None
        key = chain or ref.memo_id or f"{role}/{ref.name}"
        if self.store.db.execute("SELECT 1 FROM breaker_notices WHERE chain = ?", (key,)).fetchone():
            return
        self.tell(TeamEvent("held", role, ref.name, ref.subject, why))
        notify = self.config.notify
        path: Path | None = None
        if notify is not None:
            body = "\n".join(
                [
                    f"The orchestrator held a memo of role **{role}** instead of running it.",
                    "",
                    f"- Memo: {ref.name} (id {ref.memo_id or '-'}, subject: {ref.subject or '-'}, "
                    f"from {ref.sender or '-'})",
                    f"- Now at: memo/{role}/held/ (the `.reason` file beside it says why)",
                    f"- Why: {why}",
                    f"- Conversation: `orchestrator trace {ref.label}`",
                    "",
                    f"Further memos of this conversation that are held are not announced again. To run it anyway: "
                    f"`orchestrator release {ref.label}` (every held memo of the role: "
                    f"`orchestrator release --all --role {role}`).",
                ]
            )
            sent = outbox.write_memo(
                self.config.root,
                notify,
                body,
                subject=f"Held: {ref.subject or ref.name}",
                sender="orchestrator",
                now=self.clock.now(),
                reply_to=ref.memo_id or ref.label,
                tags=["held"],
            )
            path = sent.path
            self.console.line(f"told {notify} that {ref.name} is held ({path.name})", role=role)
        self.store.db.execute(
            "INSERT OR IGNORE INTO breaker_notices (chain, noticed_at, notice_path) VALUES (?, ?, ?)",
            (key, self.clock.now().isoformat(timespec="milliseconds"), str(path) if path else None),
        )
