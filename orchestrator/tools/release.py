"""``orchestrator release``: a person lets a memo the loop breaker held run after all.

The release is put on record first (the ``memo_releases`` table), then the memo
is renamed from ``held/`` back into its inbox and its ``.reason`` removed; a
running orchestrator picks it up like any new memo, and its check finds the
record, so the memo is not held again at once. Works with or without a running
orchestrator.
"""

from __future__ import annotations

import contextlib
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.core.errors import AmbiguousMemoError, UnknownMemoError, UsageError
from orchestrator.intake import catalog, memo_index
from orchestrator.intake.memo import HELD, INBOX, free_name
from orchestrator.intake.notices import reason_path
from orchestrator.store import Store
from orchestrator.supervisor.breaker import ensure_tables, record_release


def _chosen(root: Path, query: str | None, role: str | None, every: bool) -> list[catalog.Entry]:
    if query is None and not (every and role):
        raise UsageError("orchestrator release: name a held memo (id, file name or path), or use --all --role ROLE")
    held = catalog.scan(root, [role] if role else None, folders=(HELD,))
    if query is None:
        return held
    found = [entry for entry in held if catalog.matches(entry, query)]
    if not found:
        where = f"memo/{role}/held/" if role else "memo/*/held/"
        raise UnknownMemoError(f"orchestrator release: no memo in {where} matches {query!r}")
    if len(found) > 1 and not every:
        raise AmbiguousMemoError(
            f"orchestrator release: {len(found)} held memos match {query!r} "
            f"({', '.join(e.where() for e in found)}); name one by path, or add --all"
        )
    return found


def release(
    root: Path, query: str | None, *, role: str | None = None, every: bool = False, who: str
) -> list[dict[str, Any]]:
    """Move the chosen held memos back to their inboxes, each release recorded first; what was done, per memo."""
    chosen = _chosen(root, query, role, every)
    done: list[dict[str, Any]] = []
    if not chosen:
        return done
    store = Store(root / ".orchestrator" / "state.db")
    try:
        ensure_tables(store.db)
        for entry in chosen:
            inbox = root / "memo" / entry.role / INBOX
            inbox.mkdir(parents=True, exist_ok=True)
            target = free_name(inbox, entry.name)
            when = datetime.now().astimezone().isoformat(timespec="milliseconds")
            record_release(store, entry.role, target.name, entry.memo_id, when, who)
            try:
                os.rename(entry.path, target)
            except FileNotFoundError:
                continue  # released by someone else a moment ago
            memo_index.moved(store.db, entry.path, target, time.time())
            with contextlib.suppress(FileNotFoundError):
                reason_path(entry.path).unlink()
            done.append(
                {
                    "role": entry.role,
                    "memo": target.name,
                    "memo_id": entry.memo_id,
                    "from": str(entry.path.relative_to(root)),
                    "path": str(target),
                    "released_at": when,
                }
            )
    finally:
        store.close()
    return done
