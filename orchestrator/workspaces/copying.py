"""``workspace.copy``: files from the project root copied into a new workspace (``.env``, ``node_modules``), the
things a fresh checkout lacks. A copied file reaches the agent, secrets included.

Only what git ignores in the workspace may be copied: anything else would be work like the agent's, committed on
the branch with its first success (a ``.env`` on a branch that lands). So a copy git would see is undone and
refused with one line, before the agent starts.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from orchestrator.workspaces import git

SKIPPED = (".git", ".orchestrator")  # never copied: the repository itself, the orchestrator's state and worktrees


class CopyError(Exception):
    """A copy that cannot be made, or would be committed; the message says which file and what to do."""


def matches(root: Path, patterns: list[str]) -> list[Path]:
    """The paths under ``root`` the patterns name (a pattern with ``*``, ``?`` or ``[`` is a glob, ``**`` goes
    down folders), relative, in order and once each; a pattern that matches nothing names nothing."""
    found: dict[Path, None] = {}
    for pattern in patterns:
        if glob.has_magic(pattern):
            hits = sorted(root.glob(pattern))
        else:
            hits = [root / pattern] if os.path.lexists(root / pattern) else []
        for hit in hits:
            relative = hit.relative_to(root)
            if relative.parts and relative.parts[0] not in SKIPPED:
                found[relative] = None
    return list(found)


def copy_in(root: Path, folder: Path, patterns: list[str]) -> list[Path]:
    """Copy what ``patterns`` name from ``root`` into the workspace ``folder`` (folders whole, links as links);
    the paths copied. ``CopyError`` when git in the workspace would see one of them (the copies undone)."""
    copied = matches(root, patterns)
    for relative in copied:
        source, target = root / relative, folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir() and not source.is_symlink():
            shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target, follow_symlinks=False)
    if not copied:
        return copied
    seen = git.git(folder, "status", "--porcelain", "--untracked-files=all", "--", *map(str, copied))
    if seen:
        git.reset(folder, git.git(folder, "rev-parse", "HEAD"))  # a new workspace: nothing else to lose
        first = seen.splitlines()[0][3:].strip().strip('"')
        raise CopyError(
            f"copy: {first} is not ignored by git in the workspace, so the run's commit would take it; add it to "
            ".gitignore, or remove it from workspace.copy"
        )
    return copied
