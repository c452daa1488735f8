"""What the dashboard shows of the workspaces: a run's changes (its latest attempt's diff stat and files) and every
workspace with its branch, how far it is ahead of and behind its base, its last run, its disk use and whether it
has landed. Blocking (git, a walk of the folders): the pages call these on a worker thread, with their own
read-only connection."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from orchestrator.store import Store
from orchestrator.workspaces import git, land_records, records, retire, show


def _has_table(store: Store) -> bool:
    found = store.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'workspace_attempts'")
    return found.fetchone() is not None


def run_changes(root: Path, state_db: Path, run_id: int) -> dict[str, Any] | None:
    """The workspace, branch and changes of run ``run_id``'s latest attempt (its work so far while it works or
    waits for a person, as ``orchestrator diff`` shows it), or None when it worked in no workspace."""
    if not state_db.exists():
        return None
    store = Store(state_db, readonly=True)
    try:
        found = records.of_runs(store.db, [run_id]) if _has_table(store) else []
    finally:
        store.close()
    if not found:
        return None
    work = found[-1]
    out: dict[str, Any] = {
        "workspace": work.name,
        "branch": work.branch,
        "attempt": work.attempt,
        "outcome": work.outcome or "working",
        "commit": work.commit_id,
        "ref": work.ref,
        "stat": "",
        "files": [],
    }
    try:
        out["stat"] = show.changes(root, work, "--stat")
        names = show.changes(root, work, "--name-status")
    except (git.GitError, OSError) as exc:
        out["problem"] = str(exc)
        return out
    out["files"] = [
        {"status": line.split("\t", 1)[0], "path": line.split("\t")[-1]} for line in names.splitlines() if "\t" in line
    ]
    return out


def inventory(root: Path, state_db: Path) -> list[dict[str, Any]]:
    """Every workspace on record: name, branch, base, ahead/behind its base, last run and its end, disk use,
    whether its folder is there and whether it has landed."""
    if not state_db.exists():
        return []
    store = Store(state_db, readonly=True)
    try:
        known = retire.known(store.db)
        landed = {work.name for work in known if _landed(store.db, work.name)}
    finally:
        store.close()
    out = []
    for work in known:
        folder = Path(work.folder)
        present = (folder / ".git").exists()
        ahead = behind = None
        if git.commit_of(root, f"refs/heads/{work.branch}") and git.commit_of(root, work.base):
            counts = git.git(root, "rev-list", "--left-right", "--count", f"{work.base}...refs/heads/{work.branch}")
            behind, ahead = (int(part) for part in counts.split())
        out.append(
            {
                "name": work.name,
                "branch": work.branch,
                "base": work.base,
                "ahead": ahead,
                "behind": behind,
                "last_run": work.last_run,
                "last_end": work.last_end,
                "working": work.busy_run,
                "present": present,
                "bytes": retire.disk_use(folder) if present else 0,
                "landed": work.name in landed,
            }
        )
    return out


def _landed(db: sqlite3.Connection, name: str) -> bool:
    """Whether the workspace has landed (a database from before landing has no such table: not landed)."""
    try:
        return land_records.last_landed(db, name) is not None
    except sqlite3.OperationalError:
        return False
