"""The start-up check of the workspaces feature: a role that asks for a worktree needs a project root in a git
repository (at its top: a worktree is a checkout of the whole repository) with at least one commit, and a git new
enough; otherwise ``up`` is refused with one line (fail closed:
the runs would share one folder, the promise broken)."""

from __future__ import annotations

from orchestrator.config import Config
from orchestrator.core.errors import ConfigError
from orchestrator.workspaces import git


def check_workspaces(config: Config) -> None:
    """``ConfigError`` naming the role and the way out when its worktrees cannot be made here."""
    asking = [name for name, role in config.roles.items() if role.workspace.isolated]
    if not asking:
        return
    where = f"{config.path}: roles.{asking[0]}.workspace.mode: worktree"
    found = git.version()
    if found is None:
        raise ConfigError(f"{where} needs git, which is not installed; install git, or use mode: shared")
    if found < git.MIN_VERSION:
        need = ".".join(map(str, git.MIN_VERSION))
        raise ConfigError(
            f"{where} needs git {need} or newer (found {found[0]}.{found[1]}); upgrade git, or use mode: shared"
        )
    top = git.top_level(config.root)
    if top is None:
        raise ConfigError(
            f"{where} needs a git repository, and {config.root} is not in one; run `git init` and commit there, or "
            "use mode: shared"
        )
    if top.resolve() != config.root.resolve():  # a worktree is the whole repository: its agent would start at its top
        raise ConfigError(
            f"{where} needs the project root at the top of its git repository, and {config.root} is a folder inside "
            f"{top}; keep the team at {top}, or use mode: shared"
        )
    if git.commit_of(config.root, "HEAD") is None:
        raise ConfigError(
            f"{where} needs a commit to branch from, and the repository at {config.root} has none; commit once, or "
            "use mode: shared"
        )
    for name in asking:
        base = config.roles[name].workspace.base
        if base is not None and git.commit_of(config.root, base) is None:
            raise ConfigError(
                f"{config.path}: roles.{name}.workspace.base: {base!r} names no commit in {config.root}; name a branch"
            )
