"""Which workspace a memo's run works in: the one its front matter names (``workspace: NAME``, written by
``orchestrator send`` from a run in a workspace), else its conversation's (the first memo of its ``reply_to``
chain, ``key: conversation``) or its own (``key: memo``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path

from orchestrator.config import Role
from orchestrator.intake import memo_index
from orchestrator.intake.memo import parse_front_matter, read_head
from orchestrator.workspaces.git import safe_name

CHAIN_MAX = 200  # reply_to links followed at most (the loop breaker holds deeper chains anyway)


def workspace_name(db: sqlite3.Connection, role: Role, path: Path) -> str:
    """The safe name of the workspace the memo at ``path`` is worked on in, for ``role``."""
    return workspace_and_memo(db, role, path)[0]


def workspace_and_memo(
    db: sqlite3.Connection, role: Role, path: Path, queued: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """(the workspace the memo at ``path`` is worked on in, the memo itself: its id, else its file name), from one
    read of its front matter; the memo is known by its id because an answer may put it back under another name.

    ``queued``: the workspaces of memos still queued, by id: the memo index knows a memo once it is claimed, so a
    reply to a memo that still waits in the inbox is in that memo's workspace."""
    header = parse_front_matter(read_head(path))
    memo = memo_key(header.id, path.name)
    named = header.extra.get("workspace")
    if isinstance(named, str | int) and str(named).strip():
        return safe_name(str(named).strip()), memo
    own = header.id or path.stem
    if role.workspace.key == "memo" or header.reply_to is None:
        return safe_name(own), memo
    first = conversation(db, header.reply_to)
    return (queued or {}).get(first) or safe_name(first), memo


def memo_key(memo_id: str | None, name: str) -> str:
    """How a memo is known across its moves: its id, else its file name."""
    return f"id:{memo_id}" if memo_id else f"name:{name}"


def conversation(db: sqlite3.Connection, reply_to: str) -> str:
    """The id of the first memo of the chain ``reply_to`` leads up (as far as the memo index knows it)."""
    current, seen = reply_to, {reply_to}
    for _ in range(CHAIN_MAX):
        rows = memo_index.with_ids(db, [current])
        parent = next((row.reply_to for row in rows if row.reply_to), None)
        if parent is None or parent in seen:
            return current
        seen.add(parent)
        current = parent
    return current
