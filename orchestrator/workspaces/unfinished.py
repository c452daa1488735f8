"""A workspace its attempt left in the middle of a git operation, or off its branch, read from git's own files.

An agent told to rebase its branch (a landing's conflict memo says so) may end with the rebase stopped at a
conflict: HEAD detached, files holding conflict markers. Committing that put a commit on no branch while the log said
"committed on the branch". Such an end is a failed attempt (``Workspaces.decide_end``), and its work is set aside
as any failed attempt's is, the operation aborted so that the next attempt starts on its branch. No git command
runs here: ``decide_end`` asks on the loop, and a few small files answer.
"""

from __future__ import annotations

from pathlib import Path

# the file or folder git keeps in a worktree's own git folder while each operation is under way
OPERATIONS = (
    ("rebase-merge", "a rebase"),
    ("rebase-apply", "a rebase"),
    ("MERGE_HEAD", "a merge"),
    ("CHERRY_PICK_HEAD", "a cherry-pick"),
    ("REVERT_HEAD", "a revert"),
    ("BISECT_LOG", "a bisect"),
)
ABORT = {  # how each is undone, once the attempt's work is set aside
    "a rebase": ("rebase", "--abort"),
    "a merge": ("merge", "--abort"),
    "a cherry-pick": ("cherry-pick", "--abort"),
    "a revert": ("revert", "--abort"),
    "a bisect": ("bisect", "reset"),
}


def git_dir(folder: Path) -> Path | None:
    """The git folder of the work tree at ``folder``: ``.git`` itself, or where a worktree's ``.git`` file points."""
    dot = folder / ".git"
    if dot.is_dir():
        return dot
    try:
        text = dot.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir:"):
        return None
    path = Path(text.removeprefix("gitdir:").strip())
    return path if path.is_absolute() else (folder / path).resolve()


def operation(folder: Path) -> str | None:
    """The git operation under way in the work tree at ``folder`` ("a rebase", ...), or None."""
    where = git_dir(folder)
    if where is None:
        return None
    return next((what for name, what in OPERATIONS if (where / name).exists()), None)


def unfinished(folder: Path, branch: str) -> str | None:
    """Why the work at ``folder`` cannot be committed on ``branch`` ("in the middle of a rebase", "on a detached
    HEAD, not on orchestrator/x"), or None."""
    what = operation(folder)
    if what is not None:
        return f"in the middle of {what}"
    where = git_dir(folder)
    try:
        head = (where / "HEAD").read_text(encoding="utf-8").strip() if where is not None else None
    except (OSError, UnicodeDecodeError):
        return None
    if head is None or head == f"ref: refs/heads/{branch}":
        return None
    on = head.removeprefix("ref: refs/heads/") if head.startswith("ref: ") else "a detached HEAD"
    return f"on {on}, not on {branch}"
