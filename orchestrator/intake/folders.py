"""What both inbox watchers check when a role folder may have changed under them."""

from __future__ import annotations

from pathlib import Path

from orchestrator.intake.memo import INBOX


def folder_problem(folder: Path, identity: tuple[int, int] | None) -> str | None:
    """Why a watched role folder needs new watches: gone, replaced (another device and inode), or its inbox gone."""
    try:
        info = folder.stat()
    except FileNotFoundError:
        return f"folder {folder} was removed"
    if (info.st_dev, info.st_ino) != identity:
        return f"folder {folder} was replaced"
    if not (folder / INBOX).is_dir():
        return f"folder {folder / INBOX} was removed"
    return None
