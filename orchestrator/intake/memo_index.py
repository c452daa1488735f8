"""The memo index: where each memo lies (role, folder, file name) with its ``id`` and ``reply_to``, in the database.

``trace`` and ``send`` read it instead of every memo on disk, and retention dates a memo by it (``moved_at``: when
it came into its folder). The orchestrator keeps it at every claim and every move it makes (``placed``, ``moved``,
on the loop's thread, in the event's transaction); ``orchestrator release`` at its move. Each start of ``up``
completes it off the loop (``missing`` on a worker thread; ``add_found``, ``drop_gone`` and ``mark_complete`` back
on the loop, the one writer), and ``orchestrator gc --reindex`` rebuilds it from the folders (``rebuild``). Until
it is marked ``complete`` (a store from before the index, until its first ``up`` has indexed it) ``trace`` reads
every folder, as it must without an index. A memo moved or written by hand is not in it until the next start:
``trace`` and ``send`` find one they ask for by a scan of the files the index does not know (``unindexed``).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.core.text import printable
from orchestrator.intake.catalog import memo_files
from orchestrator.intake.memo import INBOX, MemoHeader, parse_front_matter, read_head
from orchestrator.intake.names import ALL_FOLDERS

COMPLETE = "memo_index"  # the ``meta`` key set by a rebuild: every memo on disk was indexed once


@dataclass(frozen=True)
class Row:
    """One memo as the index has it; ``path`` is where it should be."""

    role: str
    folder: str
    name: str
    memo_id: str | None
    reply_to: str | None
    moved_at: float

    def path(self, root: Path) -> Path:
        return root / "memo" / self.role / self.folder / self.name


def _at(root: Path, key: tuple[str, str, str]) -> Path:
    """Where the memo of a (role, folder, name) key lies."""
    return root / "memo" / key[0] / key[1] / key[2]


def _place(path: Path) -> tuple[str, str, str]:
    """(role, folder, name) of ``memo/<role>/<folder>/<name>``."""
    return path.parent.parent.name, path.parent.name, path.name


def placed(db: sqlite3.Connection, path: Path, memo_id: str | None, reply_to: str | None, at: float) -> None:
    """A memo is at ``path`` now, with this front matter."""
    role, folder, name = _place(path)
    db.execute(
        "INSERT OR REPLACE INTO memo_index (role, folder, name, memo_id, reply_to, moved_at) VALUES (?, ?, ?, ?, ?, ?)",
        (printable(role), folder, printable(name), memo_id, reply_to, at),
    )


def moved(db: sqlite3.Connection, src: Path, dst: Path, at: float, header: MemoHeader | None = None) -> None:
    """A memo moved from ``src`` to ``dst``: its row follows it. ``header``: its front matter, when just read
    (its claim); else the row keeps what it had, and a memo with no row yet has its front matter read now."""
    role, folder, name = _place(src)
    new_role, new_folder, new_name = _place(dst)
    where = (printable(role), folder, printable(name))
    place = (printable(new_role), new_folder, printable(new_name), at)
    if header is not None:
        done = db.execute(
            "UPDATE OR REPLACE memo_index SET role = ?, folder = ?, name = ?, moved_at = ?, memo_id = ?, reply_to = ? "
            "WHERE role = ? AND folder = ? AND name = ?",
            (*place, header.id, header.reply_to, *where),
        ).rowcount
    else:
        done = db.execute(
            "UPDATE OR REPLACE memo_index SET role = ?, folder = ?, name = ?, moved_at = ? "
            "WHERE role = ? AND folder = ? AND name = ?",
            (*place, *where),
        ).rowcount
    if not done:  # not indexed yet (from before the index, or put in its folder by hand)
        header = header or parse_front_matter(read_head(dst))
        placed(db, dst, header.id, header.reply_to, at)


def forget(db: sqlite3.Connection, rows: Iterable[tuple[str, str, str]]) -> None:
    """Rows of memos that are gone (removed by retention), by (role, folder, name)."""
    db.executemany("DELETE FROM memo_index WHERE role = ? AND folder = ? AND name = ?", list(rows))


def _rows(db: sqlite3.Connection, where: str, args: list[str]) -> list[Row]:
    return [
        Row(*row)
        for row in db.execute(
            f"SELECT role, folder, name, memo_id, reply_to, moved_at FROM memo_index WHERE {where} "
            "ORDER BY role, folder, name",
            args,
        )
    ]


def with_ids(db: sqlite3.Connection, ids: Iterable[str]) -> list[Row]:
    """The rows of memos that carry any of ``ids``."""
    ids = sorted(set(ids))
    return _rows(db, f"memo_id IN ({', '.join('?' * len(ids))})", ids) if ids else []


def replying_to(db: sqlite3.Connection, memo_id: str) -> list[Row]:
    """The rows of memos whose ``reply_to`` is ``memo_id``."""
    return _rows(db, "reply_to = ?", [memo_id])


def named(db: sqlite3.Connection, names: Iterable[str]) -> list[Row]:
    """The rows of memos with one of these file names, in any role and folder."""
    names = sorted({printable(n) for n in names})
    return _rows(db, f"name IN ({', '.join('?' * len(names))})", names) if names else []


def carries(db: sqlite3.Connection, memo_id: str) -> bool:
    """Whether a row carries ``memo_id``: in its front matter, or in its file name in the corpus style
    (``<id>.md``, ``<id>-<slug>.md``: a range of the name index, ``-`` sorting just before ``.``)."""
    return (
        db.execute(
            "SELECT 1 FROM memo_index WHERE memo_id = ? OR name = ? OR (name >= ? AND name < ?) LIMIT 1",
            (memo_id, memo_id + ".md", memo_id + "-", memo_id + "."),
        ).fetchone()
        is not None
    )


def keys(db: sqlite3.Connection) -> set[tuple[str, str, str]]:
    """(role, folder, name) of every row."""
    return {(row[0], row[1], row[2]) for row in db.execute("SELECT role, folder, name FROM memo_index")}


def is_complete(db: sqlite3.Connection) -> bool:
    """Whether a rebuild has indexed every memo once (also False for a database from before the index)."""
    try:
        return db.execute("SELECT 1 FROM meta WHERE key = ?", (COMPLETE,)).fetchone() is not None
    except sqlite3.OperationalError:  # no such table: an older database opened read-only
        return False


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild did: memos indexed, of which ``added`` were not in the index, and rows ``dropped`` (their
    memo was no longer where the row said)."""

    indexed: int
    added: int
    dropped: int

    def line(self) -> str:
        return (
            f"memo index rebuilt: {self.indexed} memo(s) on disk indexed, {self.added} of them not indexed before; "
            f"{self.dropped} row(s) of memos no longer where they were dropped"
        )


def rebuild(db: sqlite3.Connection, root: Path, now: str) -> Rebuilt:
    """Index every memo on disk anew (its front matter read once); a row already right keeps its ``moved_at``,
    a new one takes the file's modification time.

    The folders are read before the one transaction that replaces the rows, so a running orchestrator's
    writes wait only for that transaction; a memo it moves meanwhile may be left at its old place, which
    ``trace`` notices (the file is not there) and looks past.
    """
    known = {
        (row[0], row[1], row[2]): float(row[3])
        for row in db.execute("SELECT role, folder, name, moved_at FROM memo_index")
    }
    rows = []
    for role, folder, path in memo_files(root):
        try:
            mtime = os.lstat(path).st_mtime
        except OSError:
            continue
        header = parse_front_matter(read_head(path))
        key = (printable(role), folder, printable(path.name))
        rows.append((*key, header.id, header.reply_to, known.get(key, mtime)))
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("DELETE FROM memo_index")
        db.executemany(
            "INSERT OR REPLACE INTO memo_index (role, folder, name, memo_id, reply_to, moved_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (COMPLETE, now))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    now_keys = {row[:3] for row in rows}
    return Rebuilt(len(rows), len(now_keys - known.keys()), len(known.keys() - now_keys))


Found = tuple[str, str, str, str | None, str | None, float]  # a row to add: role, folder, name, id, reply_to, mtime


@dataclass(frozen=True)
class Missing:
    """What the index lacks, as a scan of the folders found it: rows of memos it does not know (``found``) and
    keys of rows whose memo is not where they say (``gone``)."""

    found: list[Found]
    gone: list[tuple[str, str, str]]


def missing(root: Path, known: set[tuple[str, str, str]], stop: Callable[[], bool] = lambda: False) -> Missing:
    """The folders against the index's ``known`` keys; the front matter of each memo it lacks read once. The
    inboxes are left out: a waiting memo is read where it lies and indexed at its claim. Off the loop's thread
    (``stop``: checked between memos; a stopped scan returns what it found so far)."""
    found: list[Found] = []
    seen: set[tuple[str, str, str]] = set()
    for role, folder, path in memo_files(root, folders=[f for f in ALL_FOLDERS if f != INBOX]):
        key = (printable(role), folder, printable(path.name))
        seen.add(key)
        if key in known:
            continue
        if stop():
            break
        try:
            mtime = os.lstat(path).st_mtime
        except OSError:
            continue
        header = parse_front_matter(read_head(path))
        found.append((*key, header.id, header.reply_to, mtime))
    gone = [key for key in known - seen if key[1] != INBOX and not os.path.lexists(_at(root, key))]
    return Missing(found, sorted(gone))


def add_found(db: sqlite3.Connection, root: Path, found: Iterable[Found]) -> int:
    """On the loop: the rows of ``found`` whose memo still lies there and has no row yet (the loop's own rows,
    written since the scan, are newer). Returns how many were added."""
    rows = [row for row in found if os.path.isfile(_at(root, row[:3]))]
    before = db.total_changes
    db.executemany(
        "INSERT OR IGNORE INTO memo_index (role, folder, name, memo_id, reply_to, moved_at) VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )
    return db.total_changes - before


def drop_gone(db: sqlite3.Connection, root: Path, gone: Iterable[tuple[str, str, str]]) -> int:
    """On the loop: the rows of ``gone`` whose memo is still not there. Returns how many were dropped."""
    keys = [key for key in gone if not os.path.lexists(_at(root, key))]
    before = db.total_changes
    forget(db, keys)
    return db.total_changes - before


def mark_complete(db: sqlite3.Connection, now: str) -> None:
    """Every memo on disk has been indexed once: ``trace`` may read the index."""
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (COMPLETE, now))


def unindexed(root: Path, known: set[tuple[str, str, str]]) -> list[tuple[str, str, Path]]:
    """(role, folder, path) of every memo file the index does not have where it lies (names only, no reads)."""
    return [
        (role, folder, path)
        for role, folder, path in memo_files(root)
        if (printable(role), folder, printable(path.name)) not in known
    ]
