"""``orchestrator send``: an agent (or a person) hands work to a role as one complete memo.

It checks what it can before writing anything: the role must exist in
``roles.yaml``, the text must hold something, and a ``--reply-to`` should name a
memo that exists (a warning, or a refusal with ``--strict``). It needs no running
orchestrator: it only writes into the role's inbox, and asks the memo index (and
the inboxes) which ids are taken and whether the memo it replies to exists, so a
send costs the same after a year of memos as on the first day.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from orchestrator.config import load_config
from orchestrator.core.errors import UnknownMemoError, UnknownRoleError, UsageError
from orchestrator.intake import catalog, memo_index, outbox
from orchestrator.intake.memo import INBOX, parse_front_matter, read_head
from orchestrator.store import Store

DEFAULT_SENDER = "owner"


@dataclass(frozen=True)
class SendResult:
    """What ``send`` wrote, and a warning for the sender (or None)."""

    memo_id: str
    path: Path
    warning: str | None = None


def default_sender() -> str:
    """The agent's own role (``ORCHESTRATOR_ROLE``) when an agent sends, else ``owner``."""
    return os.environ.get("ORCHESTRATOR_ROLE") or DEFAULT_SENDER


class KnownIds:
    """Which ids memos on disk carry, as ``send`` asks: the memo index when it is complete, beside the inboxes (a
    waiting memo is indexed at its claim) and the runs on record; a memo the index does not know (written or
    moved by hand since the last start of ``up``) is still found, as ``trace`` finds it, by a look at the files
    the index lacks, made only when nothing else knows the id. Without a complete index, every memo is read."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.store: Store | None = None
        path = root / ".orchestrator" / "state.db"
        if path.exists():
            try:
                self.store = Store(path, readonly=True)
            except sqlite3.Error:
                self.store = None  # an unreadable record is no reason not to look at the files
        self.indexed = self.store is not None and memo_index.is_complete(self.store.db)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    def _inbox_names(self) -> list[str]:
        return [path.name for _, _, path in catalog.memo_files(self.root, folders=(INBOX,))]

    def taken(self, memo_id: str) -> bool:
        """Whether a memo file's name (or, in the index, its front matter) carries ``memo_id``: for a new id."""
        if not self.indexed or self.store is None:
            return catalog.id_in_names(self.root, memo_id)
        names = self._inbox_names()
        return memo_index.carries(self.store.db, memo_id) or any(_carries(name, memo_id) for name in names)

    def known(self, memo_id: str) -> bool:
        """Whether some memo carries this id: in a name, its front matter, or the runs on record."""
        if self.indexed and self.store is not None:
            db = self.store.db
            if self.taken(memo_id):
                return True
            if any(entry.memo_id == memo_id for entry in catalog.scan(self.root, folders=(INBOX,))):
                return True
            if self._on_record(memo_id):
                return True
            unknown = memo_index.unindexed(self.root, memo_index.keys(db))
            return any(
                _carries(path.name, memo_id) or parse_front_matter(read_head(path)).id == memo_id
                for _, folder, path in unknown
                if folder != INBOX
            )
        if catalog.id_in_names(self.root, memo_id) or self._on_record(memo_id):
            return True
        return any(entry.memo_id == memo_id for entry in catalog.scan(self.root))

    def _on_record(self, memo_id: str) -> bool:
        if self.store is None:
            return False
        try:
            row = self.store.db.execute(
                "SELECT 1 FROM runs WHERE EXISTS (SELECT 1 FROM json_each(runs.memo_ids) WHERE value = ?) LIMIT 1",
                (memo_id,),
            ).fetchone()
        except sqlite3.Error:
            return False
        return row is not None


def _carries(name: str, memo_id: str) -> bool:
    return name.startswith(memo_id + "-") or name == memo_id + ".md"


def memo_known(root: Path, memo_id: str) -> bool:
    """Whether some memo carries this id: in a file name, in the database's record, or in front matter."""
    ids = KnownIds(root)
    try:
        return ids.known(memo_id)
    finally:
        ids.close()


def own_workspace() -> str | None:
    """The workspace the sending agent works in (``ORCHESTRATOR_WORKSPACE``, its folder), by name: the memo carries
    it, so the next role works in the same workspace."""
    folder = os.environ.get("ORCHESTRATOR_WORKSPACE", "").strip()
    return Path(folder).name or None if folder else None


def send(
    root: Path,
    to: str,
    text: str,
    *,
    subject: str | None = None,
    reply_to: str | None = None,
    tags: Sequence[str] = (),
    sender: str | None = None,
    strict: bool = False,
    now: datetime | None = None,
) -> SendResult:
    """Write ``text`` as a memo to ``to``'s inbox; raises before writing anything when it must refuse."""
    config = load_config(root)
    if to not in config.roles:
        raise UnknownRoleError(
            f"orchestrator send: no role {to!r} in {config.path}; the roles are {', '.join(config.roles)}"
        )
    if not text.strip():
        raise UsageError("orchestrator send: the memo is empty: give its text as an argument, or `-` and stdin")
    subject = (subject or "").strip() or outbox.first_line(text)
    warning = None
    if reply_to is not None:
        reply_to = reply_to.strip()
        if not reply_to:
            raise UsageError("orchestrator send: --reply-to needs the id of the memo this one answers")
    ids = KnownIds(config.root)
    try:
        if reply_to is not None and not ids.known(reply_to):
            message = f"--reply-to {reply_to}: no memo under {config.root / 'memo'} carries that id"
            if strict:
                raise UnknownMemoError(f"orchestrator send: {message}; nothing was sent")
            warning = f"warning: {message}; sent anyway (--strict refuses)"
        sent = outbox.write_memo(
            config.root,
            to,
            text,
            subject=subject,
            sender=(sender or "").strip() or default_sender(),
            now=now or datetime.now().astimezone(),
            reply_to=reply_to,
            tags=[t.strip() for t in tags if t.strip()],
            taken=ids.taken,
            workspace=own_workspace(),
        )
    finally:
        ids.close()
    return SendResult(sent.memo_id, sent.path, warning)
