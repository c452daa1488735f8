"""``orchestrator init``: a default team's roles.yaml, prompts and memo folders; never overwrites a file.

Beside roles.yaml goes ``roles.schema.json``, the JSON Schema of this version's roles.yaml, which the first
line of roles.yaml names for editors (``# yaml-language-server: $schema=./roles.schema.json``): offline, and
relative, so the project can move.

The builder works in git worktrees (``workspace: {mode: worktree}``), which need a repository with a commit, at
the project's folder: in a folder that is no repository yet, ``init`` runs ``git init`` and commits what it wrote
(``.orchestrator/`` kept out by a ``.gitignore``); where git is missing or too old, or the folder is inside a
repository (a worktree would check out all of it), it writes ``mode: shared`` and says why, so the default team
always starts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from orchestrator.intake.memo import INBOX
from orchestrator.ops.configuration import schema_text
from orchestrator.workspaces import git

SCHEMA_NAME = "roles.schema.json"

DEFAULT_ROLES = ("project-manager", "planner", "builder", "reviewer")
WORKTREE_LINE = "    workspace: {mode: worktree}"
IGNORED = ".orchestrator/"  # the orchestrator's state, logs and the worktrees themselves
COMMIT_MESSAGE = "orchestrator init: the default team"


@dataclass
class Scaffolded:
    """What ``init`` did: the paths it created and kept, and what it did with git, in lines for people."""

    created: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)
    said: list[str] = field(default_factory=list)


def _without_git(text: str, why: str, how: str) -> str:
    """The roles.yaml template with the builder in the shared folder, saying why (and ``how`` to have worktrees)."""
    lines = []
    for line in text.splitlines(keepends=True):
        if line.startswith(WORKTREE_LINE):
            lines.append(f"    # {why}, so the builder works in the project folder; {how},\n")
            lines.append(
                "    # then mode: worktree gives each conversation a worktree of its own (docs/workspaces.md)\n"
            )
            lines.append("    workspace: {mode: shared}\n")
        else:
            lines.append(line)
    return "".join(lines)


def git_missing() -> str | None:
    """Why worktrees cannot be made on this machine (no git, or one too old), or None."""
    found = git.version()
    if found is None:
        return "git is not installed here"
    if found < git.MIN_VERSION:
        return f"git {found[0]}.{found[1]} is too old for worktrees (2.17 or newer needed)"
    return None


def init_project(target: Path) -> Scaffolded:
    """Create what is missing under ``target``, and a repository to hold it when there is none."""
    done = Scaffolded()
    templates = resources.files("orchestrator") / "templates"
    files = {Path("roles.yaml"): templates / "roles.yaml"}
    for role in DEFAULT_ROLES:
        files[Path("prompts") / f"{role}.md"] = templates / "prompts" / f"{role}.md"
    texts: dict[Path, Callable[[], str]] = {
        rel: functools.partial(source.read_text, encoding="utf-8") for rel, source in files.items()
    }
    texts[Path(SCHEMA_NAME)] = schema_text
    missing = git_missing()
    how = "with git, `git init`, commit"
    target.mkdir(parents=True, exist_ok=True)  # where git is asked from
    top = git.top_level(target) if missing is None else None
    inside = top is not None and top.resolve() != target.resolve()
    if inside:  # a worktree is a checkout of the whole repository: its builder would start at the repository's top
        missing, how = f"{target} is a folder inside the git repository {top}", "keep the team at its top"
    if missing is not None:
        roles, why = texts[Path("roles.yaml")], missing
        texts[Path("roles.yaml")] = lambda: _without_git(roles(), why, how)
    for rel, text in texts.items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "x", encoding="utf-8") as handle:  # "x": never overwrite, even in a race
                handle.write(text())
            done.created.append(path)
        except FileExistsError:
            done.kept.append(path)
    for role in DEFAULT_ROLES:
        inbox = target / "memo" / role / INBOX
        if not inbox.is_dir():
            inbox.mkdir(parents=True)
            done.created.append(inbox)
    if missing is not None:
        if target / "roles.yaml" in done.created:
            done.said.append(f"{missing}: the builder works in the project folder (workspace: {{mode: shared}})")
        if inside:
            try:
                _ignore(target, done)
            except (git.GitError, OSError) as exc:
                done.said.append(f"{exc}; add {IGNORED} to a .gitignore yourself")
    else:
        try:
            _repository(target, done)
        except (git.GitError, OSError) as exc:
            done.said.append(f"{exc}; make the repository's first commit yourself before `orchestrator up`")
    return done


def _repository(target: Path, done: Scaffolded) -> None:
    """A repository for the builder's worktrees: made and committed to when there is none; ``.orchestrator/``
    ignored in it either way."""
    made = git.top_level(target) is None
    if made:
        git.git(target, "init", "--quiet")
        done.said.append(f"made a git repository in {target} (the builder works in worktrees of it)")
    ignore = _ignore(target, done)
    if not made:
        if git.commit_of(target, "HEAD") is None:
            done.said.append(
                "the repository has no commit yet: commit once before `orchestrator up` (worktrees branch from it)"
            )
        return
    wrote = [str(path.relative_to(target)) for path in done.created if path.is_file()]
    if ignore.exists():
        wrote.append(".gitignore")
    git.git(target, "add", "--", *wrote)
    git.git(target, "commit", "--quiet", "--no-verify", "-m", COMMIT_MESSAGE, env=git.identity(target))
    done.said.append(f"committed what it wrote ({git.git(target, 'rev-parse', '--short', 'HEAD')}: {COMMIT_MESSAGE})")


def _ignore(target: Path, done: Scaffolded) -> Path:
    """``.orchestrator/`` ignored by git at ``target`` (a line added to its ``.gitignore`` when it is not yet)."""
    ignore = target / ".gitignore"
    if not _ignored(target):
        with open(ignore, "a", encoding="utf-8") as handle:
            if ignore.stat().st_size and not ignore.read_text(encoding="utf-8").endswith("\n"):
                handle.write("\n")
            handle.write(f"{IGNORED}\n")
        done.said.append(f"added {IGNORED} to {ignore} (the orchestrator's state and the worktrees stay out of git)")
    return ignore


def _ignored(target: Path) -> bool:
    """Whether git ignores ``.orchestrator/`` at ``target``."""
    probe = git.git(target, "check-ignore", "--no-index", f"{IGNORED}state.db", check=False)
    return bool(probe)
