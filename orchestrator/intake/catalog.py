"""Every memo on disk, in every role's folders, with its front matter: what ``send``, ``trace`` and ``release`` read.

Read-only and independent of ``roles.yaml``: a role is any folder under
``memo/``, so the catalog also covers roles that left the configuration and
projects that were never configured (a copied corpus). Only the head of each
file is read (``memo.read_head``), and never a FIFO or device.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.intake.memo import MemoHeader, parse_front_matter, read_head
from orchestrator.intake.names import ALL_FOLDERS, held_counts, memo_files, roles_on_disk  # noqa: F401 - used by callers


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
