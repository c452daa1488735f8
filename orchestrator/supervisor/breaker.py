"""The loop breaker: two agents that keep answering each other are stopped before they spend the night.

A memo check (``Launcher.memo_checks``) run at each claim. A memo is held back
(``memo/<role>/held/`` with a ``.reason`` beside it, by the launcher) when

- its ``reply_to`` chain is deeper than ``limits.chain_depth`` (each link a memo
  this orchestrator handed out before), or
- its sender already had ``limits.pair_rate`` memos delivered to this role within
  the rate's window (a sliding window on the supervisor's clock).

Memos from ``owner`` or ``orchestrator`` are never held, nor a memo that
``orchestrator release`` let through. The ``notify`` role gets one notice per
chain (the chain's root id), however many of its memos are held. Every checked
memo is recorded (``memo_links``), so a memo returned to its inbox and claimed
again is not counted twice.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.config import Config, Role
from orchestrator.console import Console
from orchestrator.core.clock import Clock
from orchestrator.core.run import MemoRef
from orchestrator.intake import outbox
from orchestrator.store import Store

NEVER_HELD = frozenset({"owner", "orchestrator"})
DELIVERED, HELD = "delivered", "held"
ROOT_SEARCH_CAP = 100_000  # links followed to find a chain's root (which names the chain for its one notice)


def normal_sender(sender: str | None) -> str | None:
    """``Project Manager``, ``project_manager`` and ``project-manager`` are one sender."""
    if not sender:
        return None
    return "-".join(sender.strip().lower().replace("_", " ").split()) or None


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


class Breaker:
    """The memo check of the limits in ``roles.yaml``; register ``check`` in ``Launcher.memo_checks``."""

    def __init__(self, config: Config, store: Store, console: Console, clock: Clock) -> None:
        self.config = config
        self.store = store
        self.console = console
        self.clock = clock

    def check(self, role: Role, ref: MemoRef, text: str) -> str | None:
        """Why ``ref`` must be held (one line), or None to deliver it."""
        sender = normal_sender(ref.sender)
        earlier = self.store.db.execute(
            "SELECT memo_id, outcome FROM memo_links WHERE role = ? AND name = ?", (role.name, ref.name)
        ).fetchone()
        if earlier is not None and earlier[0] == ref.memo_id and earlier[1] == DELIVERED:
            return None  # claimed before and returned to the inbox: checked and counted once
        why = None
        if sender not in NEVER_HELD and not is_released(self.store, role.name, ref.name, ref.memo_id):
            why = self._over_depth(ref) or self._over_rate(role.name, sender)
        self._record(role.name, ref, sender, HELD if why else DELIVERED)
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

    def _over_rate(self, role: str, sender: str | None) -> str | None:
        rate = self.config.limits.pair_rate
        if rate is None or sender is None:
            return None
        count, window = rate
        since = self.clock.now().timestamp() - window
        (delivered,) = self.store.db.execute(
            "SELECT COUNT(*) FROM memo_links WHERE sender = ? AND role = ? AND outcome = ? AND seen_ts > ?",
            (sender, role, DELIVERED, since),
        ).fetchone()
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
    def _record(self, role: str, ref: MemoRef, sender: str | None, outcome: str) -> None:
        self.store.db.execute(
            "INSERT OR REPLACE INTO memo_links (role, name, memo_id, reply_to, sender, seen_ts, outcome) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (role, ref.name, ref.memo_id, ref.reply_to, sender, self.clock.now().timestamp(), outcome),
        )

    def _tell(self, role: str, ref: MemoRef, why: str) -> None:
        """One notice per chain to the notify role: the first held memo of a chain is news, the next ones are not."""
        chain = self.chain(ref.reply_to, ROOT_SEARCH_CAP)[1] if ref.reply_to else None
        key = chain or ref.memo_id or f"{role}/{ref.name}"
        if self.store.db.execute("SELECT 1 FROM breaker_notices WHERE chain = ?", (key,)).fetchone():
            return
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
