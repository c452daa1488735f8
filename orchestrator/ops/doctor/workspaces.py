"""``doctor``'s look at the workspaces (orchestrator/workspaces): how many there are and the disk they use, and any
registration whose folder was deleted by hand (harmless: ``gc`` prunes it, a run there makes it again)."""

from __future__ import annotations

from orchestrator.config import Config
from orchestrator.ops.doctor.findings import Finding, ok, warn
from orchestrator.workspaces import git, retire


def check_workspaces(config: Config) -> list[Finding]:
    """One finding when a role works in worktrees (and the root is a repository); none otherwise."""
    roots = sorted({role.workspace.root for role in config.roles.values() if role.workspace.isolated})
    if not roots or git.version() is None or git.top_level(config.root) is None:
        return []
    folders = [
        entry
        for name in roots
        if (config.root / name).is_dir()
        for entry in (config.root / name).iterdir()
        if (entry / ".git").exists()
    ]
    size = sum(retire.disk_use(folder) for folder in folders)
    shown = f"{len(folders)} workspace(s), {size / 1e6:.1f} MB in {', '.join(roots)}"
    stale = git.stale(config.root)
    if stale:
        return [
            warn(
                "workspaces",
                f"{shown}; {len(stale)} registration(s) whose folder is gone",
                "`orchestrator gc` prunes them (a run there makes its workspace again)",
            )
        ]
    return [ok("workspaces", shown)]
