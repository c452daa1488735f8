"""The git work of a workspace, driven by the git CLI: make or reuse a worktree, commit what an attempt left, set
an attempt's changes aside under a ref of their own and put the workspace back where it was.

Every function here blocks (it runs git); the feature calls them off the loop where it can wait
(``asyncio.to_thread``), and keeps each one short.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from orchestrator.workspaces.unfinished import ABORT, operation

MIN_VERSION = (2, 17)  # `git worktree remove`, `worktree add` of an existing branch
IDENTITY = {  # who commits when the repository names no one: the commit must not fail for want of a name
    "GIT_AUTHOR_NAME": "orchestrator",
    "GIT_AUTHOR_EMAIL": "orchestrator@localhost",
    "GIT_COMMITTER_NAME": "orchestrator",
    "GIT_COMMITTER_EMAIL": "orchestrator@localhost",
}
ATTEMPTS_REF = "refs/orchestrator/attempts"
BRANCH_PREFIX = "orchestrator/"


TIMEOUT = 600.0  # seconds one git command may take (a checkout of a very large repository is the longest)


class GitError(Exception):
    """A git command failed; the message is its one-line account."""


def git(folder: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    """Run ``git args`` in ``folder`` and return its output, stripped; ``GitError`` with git's words on failure,
    or when it takes longer than ``TIMEOUT`` (a run's end waits for its git work: a stuck git must not hold it)."""
    full = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", **(env or {})}
    try:
        done = subprocess.run(  # noqa: S603 - an argv list, never a shell
            ["git", *args], cwd=folder, env=full, capture_output=True, text=True, check=False, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args[:2])} took longer than {TIMEOUT:g}s in {folder}; stopped") from None
    if check and done.returncode != 0:
        words = account(done.stderr or done.stdout) or str(done.returncode)
        raise GitError(f"git {' '.join(args[:2])} failed in {folder}: {words}")
    return done.stdout.strip()


def account(output: str) -> str:
    """Git's own account of a failure, in one line: its first ``fatal:`` or ``error:`` line (the one that names the
    file, such as an ``index.lock`` left behind), then its last line when that is another (what to do: "remove the
    file manually to continue."); its last line alone when it said neither; empty when it said nothing."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    said = next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[-1])
    last = lines[-1]
    return said if last == said or last.startswith("hint:") else f"{said} ({last})"


def succeeds(folder: Path, *args: str) -> bool:
    """Whether ``git args`` in ``folder`` exits 0 (a question git answers with its status)."""
    full = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    done = subprocess.run(["git", *args], cwd=folder, env=full, capture_output=True, check=False)  # noqa: S603, S607
    return done.returncode == 0


def version() -> tuple[int, int] | None:
    """The installed git's version (major, minor), or None when there is no git."""
    if shutil.which("git") is None:
        return None
    try:
        text = subprocess.run(["git", "--version"], capture_output=True, text=True, check=False).stdout  # noqa: S607
    except OSError:
        return None
    found = re.search(r"(\d+)\.(\d+)", text)
    return (int(found.group(1)), int(found.group(2))) if found else None


def top_level(root: Path) -> Path | None:
    """The top of the work tree ``root`` is in, or None when it is not in a git repository."""
    try:
        return Path(git(root, "rev-parse", "--show-toplevel"))
    except (GitError, OSError):
        return None


def current_branch(root: Path) -> str | None:
    """The branch checked out at ``root``, or None (a detached head, or no commit yet)."""
    name = git(root, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return name or None


def safe_name(key: str) -> str:
    """``key`` as one path component and branch name: letters, digits, ``.``, ``_``, ``-``; at most 80. A key that is
    not such a name already gets a short hash of itself: two keys that clean to the same letters (``設計`` and
    ``テスト``, ``fix #1`` and ``fix #1!``) never share a workspace, and a safe name stays what it is."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", key).strip(".-")
    name = re.sub(r"\.\.+", ".", name)
    while name.endswith(".lock"):  # git refuses a ref component ending so
        name = name.removesuffix(".lock").rstrip(".-")
    if name == key and len(name) <= 80:
        return name
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{name[:71].rstrip('.-') or 'workspace'}-{digest}"


def commit_of(root: Path, name: str) -> str | None:
    """The commit ``name`` points to, or None when it names none."""
    return git(root, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", check=False) or None


def ensure_worktree(root: Path, folder: Path, branch: str, base: str) -> bool:
    """The worktree at ``folder`` on ``branch``, made (the branch from ``base`` when new) or reused; True when made.

    A registration whose folder was deleted by hand is pruned first, so it is made again, not fatal."""
    if (folder / ".git").exists():
        return False
    git(root, "worktree", "prune")
    folder.parent.mkdir(parents=True, exist_ok=True)
    if commit_of(root, f"refs/heads/{branch}"):
        git(root, "worktree", "add", "--quiet", str(folder), branch)
    else:
        git(root, "worktree", "add", "--quiet", "-b", branch, str(folder), base)
    return True


def exclude(root: Path, folder: Path) -> bool:
    """Have the repository at ``root`` ignore ``folder`` (the worktrees' root, inside it), through its own
    ``info/exclude`` (never a file of the project's) when nothing ignores it yet; True when a line was added.

    Unignored, the root's ``git status`` would list the worktrees, and a ``git add --all`` there take them in."""
    top = top_level(root)
    if top is None:
        return False
    relative = Path(os.path.relpath(folder.resolve(), top.resolve()))
    if relative.parts[:1] == ("..",) or not relative.parts:
        return False
    name = relative.as_posix()
    if _ignored(top, f"{name}/x"):
        return False
    path = top / git(top, "rev-parse", "--git-common-dir") / "info" / "exclude"  # `top /` an absolute one: itself
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        if path.stat().st_size and not path.read_text(encoding="utf-8").endswith("\n"):
            handle.write("\n")
        handle.write(f"/{name}/\n")
    return True


def _ignored(top: Path, name: str) -> bool:
    done = subprocess.run(  # noqa: S603 - an argv list
        ["git", "check-ignore", "--quiet", "--no-index", name],
        cwd=top,
        capture_output=True,
        check=False,  # noqa: S607
    )
    return done.returncode == 0


def stale(root: Path) -> list[str]:
    """The worktree registrations of the repository at ``root`` whose folder is gone (deleted by hand): what
    ``git worktree prune`` would remove, by name."""
    full = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    done = subprocess.run(  # noqa: S603 - it tells on standard error
        ["git", "worktree", "prune", "--dry-run", "--verbose"],  # noqa: S607
        cwd=root,
        env=full,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = (done.stdout + done.stderr).splitlines()
    return [line.split("worktrees/", 1)[1].split(":", 1)[0] for line in lines if line.startswith("Removing worktrees/")]


def changed(folder: Path) -> bool:
    """Whether the work tree at ``folder`` has changes, tracked or untracked (ignored files do not count)."""
    return bool(git(folder, "status", "--porcelain", "--untracked-files=all"))


def commit_all(folder: Path, message: str, identity: dict[str, str]) -> str | None:
    """Commit everything left at ``folder`` (tracked and untracked, not ignored) to its branch; the new commit, or
    None when nothing was left."""
    if not changed(folder):
        return None
    git(folder, "add", "--all")
    git(folder, "commit", "--quiet", "--no-verify", "-m", message, env=identity)
    return git(folder, "rev-parse", "HEAD")


def set_aside(
    folder: Path, start: str, ref: str, message: str, identity: dict[str, str], branch: str | None = None
) -> str | None:
    """Keep what the attempt did since ``start`` (its commits and what it left) as one commit under ``ref``, then
    put the workspace back at ``start`` (on ``branch``, wherever the attempt left its HEAD); the commit, or None
    when the attempt changed nothing."""
    head = git(folder, "rev-parse", "HEAD")
    tree = snapshot(folder)
    if head == start and tree == git(folder, "rev-parse", "HEAD^{tree}"):
        return None
    commit = git(folder, "commit-tree", tree, "-p", head, "-m", message, env=identity)
    git(folder, "update-ref", ref, commit)
    under_way = operation(folder)  # a rebase stopped at a conflict: undone, so the branch is its own again
    if under_way is not None:
        git(folder, *ABORT[under_way], check=False)
    if branch is not None:
        git(folder, "checkout", "--quiet", "--force", branch)
    reset(folder, start)
    return commit


def snapshot(folder: Path) -> str:
    """The tree of everything at ``folder`` (tracked and untracked files, not ignored ones), written without
    touching its files, its index or its branch: an agent may be at work there.

    It is made through a copy of the workspace's index, whose file times spare ``add`` from reading every unchanged
    file again (a fresh index would hash the whole checkout)."""
    own = folder / git(folder, "rev-parse", "--git-path", "index")  # `folder /` an absolute path: itself
    with tempfile.TemporaryDirectory(prefix="orchestrator-index-") as scratch:
        index = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        if own.exists():
            shutil.copyfile(own, index["GIT_INDEX_FILE"])
        else:
            git(folder, "read-tree", "HEAD", env=index)
        git(folder, "add", "--all", env=index)
        return git(folder, "write-tree", env=index)


def reset(folder: Path, start: str) -> None:
    """The workspace's branch and files back at ``start``: tracked changes undone, untracked files removed (ignored
    ones, a dependency folder, kept)."""
    git(folder, "reset", "--quiet", "--hard", start)
    git(folder, "clean", "--quiet", "-d", "--force")


def identity(root: Path) -> dict[str, str]:
    """The commit identity to add: none when the repository or the user names one, else the orchestrator's."""
    if git(root, "config", "user.email", check=False) and git(root, "config", "user.name", check=False):
        return {}
    return dict(IDENTITY)
