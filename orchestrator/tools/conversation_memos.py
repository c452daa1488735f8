"""Where ``trace`` finds the memos of a conversation: the memo index, or every folder when there is none.

Both answer the same three questions: which memos a query names, which carry an id, which reply to one.
``Indexed`` asks the memo index (``intake/memo_index``) and reads only the memos it returns, plus the
inboxes (what waits is indexed at its claim). A row whose file is not where it says (a memo moved or
deleted by hand since), or a query nothing answers, widens it once to the files the index does not know
(their front matter read), so a memo moved by hand is still found. ``Scanned`` reads every memo on disk:
for a project whose index was never built (``orchestrator gc --reindex`` builds it, and so does ``up``).
"""

from __future__ import annotations

import os
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from orchestrator.intake import catalog, memo_index
from orchestrator.intake.catalog import ALL_FOLDERS, Entry
from orchestrator.intake.memo import INBOX, is_memo_name, parse_front_matter, read_head


class ConversationMemos(Protocol):
    """The look-ups ``trace`` makes."""

    def matching(self, query: str) -> list[Entry]:
        """The memos ``query`` names: id, file name, file name without ``.md``, or path."""
        ...

    def with_id(self, memo_id: str) -> list[Entry]: ...

    def replies(self, memo_id: str) -> list[Entry]: ...


class Scanned:
    """Every memo on disk, read once."""

    def __init__(self, root: Path) -> None:
        self.entries = catalog.scan(root)
        self.by_id: dict[str, list[Entry]] = defaultdict(list)
        self.by_reply: dict[str, list[Entry]] = defaultdict(list)
        for entry in self.entries:
            if entry.memo_id:
                self.by_id[entry.memo_id].append(entry)
            if entry.header.reply_to:
                self.by_reply[entry.header.reply_to].append(entry)

    def matching(self, query: str) -> list[Entry]:
        return [entry for entry in self.entries if catalog.matches(entry, query)]

    def with_id(self, memo_id: str) -> list[Entry]:
        return self.by_id.get(memo_id, [])

    def replies(self, memo_id: str) -> list[Entry]:
        return self.by_reply.get(memo_id, [])


def _entry(path: Path) -> Entry:
    return Entry(path.parent.parent.name, path.parent.name, path, parse_front_matter(read_head(path)))


def _is_file(path: Path) -> bool:
    try:
        return os.path.isfile(path) and not os.path.islink(path)
    except OSError:
        return False


class Indexed:
    """The memo index, checked against the folders for the memos it returns."""

    def __init__(self, root: Path, db: sqlite3.Connection) -> None:
        self.root = root
        self.db = db
        self.read: dict[Path, Entry] = {}
        self.live = catalog.scan(root, folders=(INBOX,))  # waiting memos: indexed only at their claim
        self.extra: list[Entry] | None = None  # the files the index does not know, once a look-up needed them

    def matching(self, query: str) -> list[Entry]:
        if os.sep in query:
            path = Path(os.path.abspath(query))
            inside = path.parent.parent.parent == self.root / "memo" and path.parent.name in ALL_FOLDERS
            return [_entry(path)] if inside and is_memo_name(path.name) and _is_file(path) else []
        rows = memo_index.named(self.db, [query, query + ".md"]) + memo_index.with_ids(self.db, [query])
        found = self._merge(self._entries(rows), lambda e: catalog.matches(e, query))
        if not found and self._widen():
            found = self._merge([], lambda e: catalog.matches(e, query))
        return found

    def with_id(self, memo_id: str) -> list[Entry]:
        entries = self._entries(memo_index.with_ids(self.db, [memo_id]))
        return self._merge(entries, lambda e: e.memo_id == memo_id)

    def replies(self, memo_id: str) -> list[Entry]:
        entries = self._entries(memo_index.replying_to(self.db, memo_id))
        return self._merge(entries, lambda e: e.header.reply_to == memo_id)

    # ------------------------------------------------------------ inside
    def _entries(self, rows: Iterable[memo_index.Row]) -> list[Entry]:
        out: list[Entry] = []
        for row in rows:
            path = row.path(self.root)
            if any(entry.path == path for entry in out):
                continue
            if path not in self.read:
                if not _is_file(path):  # moved or removed by hand: the files the index does not know may hold it
                    self._widen()
                    continue
                self.read[path] = _entry(path)
            out.append(self.read[path])
        return out

    def _merge(self, entries: list[Entry], wanted: Callable[[Entry], bool]) -> list[Entry]:
        """``entries`` and the waiting (and unindexed, once read) memos that ``wanted`` accepts, each once, in the
        catalog's order (role, folder, name)."""
        seen = {entry.path for entry in entries}
        out = list(entries)
        for entry in self.live + (self.extra or []):
            if entry.path not in seen and wanted(entry):
                seen.add(entry.path)
                out.append(entry)
        order = {folder: index for index, folder in enumerate(ALL_FOLDERS)}
        return sorted(out, key=lambda e: (e.role, order.get(e.folder, len(order)), e.name))

    def _widen(self) -> bool:
        """Read the files the index does not know (once); False when that was done before."""
        if self.extra is not None:
            return False
        self.extra = [
            _entry(path)
            for _, folder, path in memo_index.unindexed(self.root, memo_index.keys(self.db))
            if folder != INBOX  # already read
        ]
        return True


def memos_of(root: Path, db: sqlite3.Connection | None) -> ConversationMemos:
    """The index when it was built, else every folder."""
    if db is not None and memo_index.is_complete(db):
        return Indexed(root, db)
    return Scanned(root)
