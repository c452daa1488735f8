"""Which files under ``memo/`` are memos, and where they lie: names and folders only, no file is read.

Kept apart from ``memo`` (front matter, YAML) so that ``orchestrator status``, a
client command, can count held memos with the standard library alone.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

TYPE_CHECKING = False  # typing's flag without importing typing: see tests/test_client_imports.py
if TYPE_CHECKING:
    from pathlib import Path

INBOX, ACTIVE, ARCHIVE, FAILED, CANCELLED = "inbox", "active", "archive", "failed", "cancelled"
HELD = "held"  # memos a check held back from running (released by a person)
WAITING = "waiting"  # memos whose run asked a person and waits for the answer (orchestrator answer)
FOLDERS = (INBOX, ACTIVE, ARCHIVE, FAILED, CANCELLED)
FINISHED_FOLDERS = (ARCHIVE, FAILED, CANCELLED)
ALL_FOLDERS = (*FOLDERS, HELD, WAITING)
_IGNORED_SUFFIXES = ("~", ".swp", ".swx", ".tmp")


def is_memo_name(name: str) -> bool:
    """A memo ends in ``.md`` and is no hidden file (``.*``, Emacs' ``.#*`` too) or editor temporary."""
    return (
        name.endswith(".md") and not name.startswith(".") and not name.endswith(_IGNORED_SUFFIXES) and "/" not in name
    )


def roles_on_disk(root: str | Path) -> list[str]:
    """Every folder under ``memo/``, by name."""
    try:
        return sorted(e.name for e in os.scandir(os.path.join(root, "memo")) if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


def memo_files(
    root: Path, roles: Iterable[str] | None = None, folders: Iterable[str] = ALL_FOLDERS
) -> Iterator[tuple[str, str, Path]]:
    """(role, folder, path) of every memo file, without reading any."""
    for role in roles if roles is not None else roles_on_disk(root):
        for folder in folders:
            try:
                names = sorted(e.name for e in os.scandir(root / "memo" / role / folder) if is_memo_name(e.name))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                yield role, folder, root / "memo" / role / folder / name


def held_counts(root: str | Path, folder: str = HELD) -> dict[str, int]:
    """How many memos wait in each role's ``held/`` (or ``folder``; roles with none are left out), for ``status``
    (a client command: ``root`` may be a path text, and no ``Path`` is made)."""
    counts: dict[str, int] = {}
    for role in roles_on_disk(root):
        try:
            found = sum(is_memo_name(e.name) for e in os.scandir(os.path.join(root, "memo", role, folder)))
        except (FileNotFoundError, NotADirectoryError):
            continue
        if found:
            counts[role] = found
    return counts
