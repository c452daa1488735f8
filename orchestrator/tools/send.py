"""``orchestrator send``: an agent (or a person) hands work to a role as one complete memo.

It checks what it can before writing anything: the role must exist in
``roles.yaml``, the text must hold something, and a ``--reply-to`` should name a
memo that exists (a warning, or a refusal with ``--strict``). It needs no running
orchestrator: it only writes into the role's inbox, and reads the memo folders
and the database (read-only) to know the memo it replies to.
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
from orchestrator.intake import catalog, outbox
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


def memo_known(root: Path, memo_id: str) -> bool:
    """Whether some memo carries this id: in a file name (cheap), in the database's record, or in front matter."""
    if catalog.id_in_names(root, memo_id):
        return True
    db = root / ".orchestrator" / "state.db"
    if db.exists():
        try:
            store = Store(db, readonly=True)
            try:
                row = store.db.execute(
                    "SELECT 1 FROM runs WHERE EXISTS (SELECT 1 FROM json_each(runs.memo_ids) WHERE value = ?) LIMIT 1",
                    (memo_id,),
                ).fetchone()
            finally:
                store.close()
            if row is not None:
                return True
        except sqlite3.Error:
            pass  # an unreadable record is no reason not to look at the files
    return any(entry.memo_id == memo_id for entry in catalog.scan(root))


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
        if not memo_known(config.root, reply_to):
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
    )
    return SendResult(sent.memo_id, sent.path, warning)
