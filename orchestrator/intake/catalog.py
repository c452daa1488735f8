"""Every memo on disk, in every role's folders, with its front matter: what ``send``, ``trace`` and ``release`` read.

Read-only and independent of ``roles.yaml``: a role is any folder under
``memo/``, so the catalog also covers roles that left the configuration and
projects that were never configured (a copied corpus). Only the head of each
file is read (``memo.read_head``), and never a FIFO or device.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from orchestrator.intake.memo import FOLDERS, HELD, MemoHeader, is_memo_name, parse_front_matter, read_head

ALL_FOLDERS = (*FOLDERS, HELD)


@dataclass(frozen=True)
class Entry:
    """One memo file: its role and folder (from where it lies) and its front matter."""

    role: str
    folder: str
    path: Path
    header: MemoHeader

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def memo_id(self) -> str | None:
        return self.header.id

    def where(self) -> str:
        return f"{self.role}/{self.folder}/{self.name}"


def roles_on_disk(root: Path) -> list[str]:
    """Every folder under ``memo/``, by name."""
    try:
        return sorted(e.name for e in os.scandir(root / "memo") if e.is_dir(follow_symlinks=False))
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


def scan(root: Path, roles: Iterable[str] | None = None, folders: Iterable[str] = ALL_FOLDERS) -> list[Entry]:
    """Every memo with its front matter, role by role and folder by folder."""
    return [
        Entry(role, folder, path, parse_front_matter(read_head(path)))
        for role, folder, path in memo_files(root, roles, folders)
    ]


def matches(entry: Entry, query: str) -> bool:
    """Whether ``query`` names this memo: its front-matter id, file name, file name without ``.md``, or path."""
    if os.sep in query:
        return os.path.abspath(query) == str(entry.path)
    return query in (entry.name, entry.name.removesuffix(".md")) or query == entry.memo_id


def id_in_names(root: Path, memo_id: str) -> bool:
    """Whether a memo file named in the corpus style (``<id>-<slug>.md`` or ``<id>.md``) carries this id."""
    return any(path.name.startswith(memo_id + "-") or path.name == memo_id + ".md" for _, _, path in memo_files(root))


def held_counts(root: Path) -> dict[str, int]:
    """How many memos wait in each role's ``held/`` (roles with none are left out), for ``status``."""
    counts: dict[str, int] = {}
    for role, _, _ in memo_files(root, folders=(HELD,)):
        counts[role] = counts.get(role, 0) + 1
    return counts
