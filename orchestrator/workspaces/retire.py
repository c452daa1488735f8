"""Which workspaces a retention pass removes (``retention: {workspaces: 14d}``), and removing them; what they hold
on disk (``status``, ``doctor``).

A workspace goes when its conversation has ended (no unfinished run worked there, no memo in an inbox or in
``waiting/`` is for it)
and it has landed or been idle for the limit (since its last run ended). Never with work that exists nowhere
else: changes left in its folder, or a HEAD no ref contains, keep it, and say so. Its folder goes
(``git worktree remove``), its branch and its attempts' refs stay unless base contains them; a registration
whose folder was deleted by hand is pruned (``git worktree prune``). Blocking: called on a worker thread.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from orchestrator.core.clock import iso
from orchestrator.core.states import UNFINISHED
from orchestrator.intake.memo import ACTIVE, INBOX, WAITING, parse_front_matter, read_head
from orchestrator.workspaces import git, land_records, ports
from orchestrator.workspaces.git import safe_name
from orchestrator.workspaces.naming import conversation


@dataclass(frozen=True)
class Known:
    """A workspace as its attempts recorded it: where, its branch and base, its last run and when that ended."""

    name: str
    folder: str
    branch: str
    base: str
    last_run: int
    last_end: str | None  # None while a run works there
    busy_run: int | None  # an unfinished run that worked there


@dataclass(frozen=True)
class Retired:
    """A workspace a pass removes (or would): why, the bytes its folder holds, the refs that go with it."""

    name: str
    folder: str
    bytes: int
    why: str
    deleted_refs: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.folder,
            "bytes": self.bytes,
            "why": self.why,
            "deleted_refs": list(self.deleted_refs),
        }


@dataclass
class WorkspacePlan:
    """What a pass does to the workspaces: removes ``retired``, keeps ``kept`` (name -> why), prunes ``stale``."""

    retired: list[Retired]
    kept: dict[str, str]
    stale: list[str]


def disk_use(folder: Path) -> int:
    """Bytes of every file under ``folder`` (links not followed; 0 when it is gone)."""
    total = 0
    for where, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(where, name)).st_size
            except OSError:
                pass
    return total


def known(db: sqlite3.Connection) -> list[Known]:
    """Every workspace on record, with its last run; none when the feature never ran here."""
    if not db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'workspace_attempts'").fetchone():
        return []
    marks = ", ".join("?" * len(UNFINISHED))
    rows = db.execute(
        "SELECT w.name, w.folder, w.branch, w.base, w.run_id, COALESCE(r.ended_at, r.created_at), "
        f"r.state IN ({marks}) FROM workspace_attempts w LEFT JOIN runs r ON r.run_id = w.run_id "
        "ORDER BY w.run_id, w.attempt",
        [state.value for state in UNFINISHED],
    ).fetchall()
    found: dict[str, Known] = {}
    for name, folder, branch, base, run_id, ended, unfinished in rows:
        previous = found.get(name)
        busy = run_id if unfinished else (previous.busy_run if previous else None)
        found[name] = Known(name, folder, branch, base, run_id, None if unfinished else ended, busy)
    return list(found.values())


def waiting_for(root: Path, db: sqlite3.Connection, folder: str = INBOX) -> set[str]:
    """The workspaces the memos in the inboxes (or in another of the roles' folders, such as ``waiting/``) would
    work in (by their front matter, id or conversation)."""
    names: set[str] = set()
    for path in (root / "memo").glob(f"*/{folder}/*.md"):
        header = parse_front_matter(read_head(path))
        named = header.extra.get("workspace")
        if isinstance(named, str | int) and str(named).strip():
            names.add(safe_name(str(named).strip()))
            continue
        names.add(safe_name(header.id or path.stem))
        if header.reply_to:
            names.add(safe_name(conversation(db, header.reply_to)))
    return names


def _unsaved(folder: Path) -> str | None:
    """Why removing the worktree at ``folder`` would lose work, or None."""
    if git.changed(folder):
        return "changes in its folder that no commit holds"
    head = git.git(folder, "rev-parse", "HEAD")
    if not git.git(folder, "for-each-ref", "--count=1", "--contains", head, "refs/"):
        return f"its HEAD ({head[:10]}) is on no branch or ref"
    return None


def _merged(root: Path, ref: str, base: str) -> bool:
    """Whether ``base`` contains the commit ``ref`` points to (so deleting ``ref`` loses nothing)."""
    tip = git.commit_of(root, ref)
    if tip is None or git.commit_of(root, base) is None:
        return False
    return git.succeeds(root, "merge-base", "--is-ancestor", tip, base)


def plan(root: Path, db: sqlite3.Connection, limit: float | None, now: datetime) -> WorkspacePlan:
    """What a pass at ``now`` does to the workspaces of the project at ``root`` (``limit``: seconds idle, None for
    ``keep``)."""
    out = WorkspacePlan([], {}, [])
    if git.top_level(root) is None:
        return out
    out.stale = git.stale(root)
    if limit is None:
        return out
    waiting = waiting_for(root, db)
    parked = waiting_for(root, db, WAITING)  # a run waiting for a person: its work is there, for its answered memo
    for work in known(db):
        folder = Path(work.folder)
        if not (folder / ".git").exists():
            continue
        if work.busy_run is not None:
            out.kept[work.name] = f"run {work.busy_run} works there"
            continue
        if work.name in waiting:
            out.kept[work.name] = "a memo in an inbox is for it"
            continue
        if work.name in parked:
            out.kept[work.name] = "a memo in waiting/ (for a person) is for it"
            continue
        if work.last_end:
            since = datetime.fromisoformat(work.last_end)
        else:  # its runs' records are gone: its folder's time
            since = datetime.fromtimestamp(folder.stat().st_mtime).astimezone()
        idle = now - since
        if land_records.last_landed(db, work.name) is not None:
            why = "landed, and its conversation has ended"
        elif idle >= timedelta(seconds=limit):
            why = f"idle {idle.days}d (since {iso(since)}), and its conversation has ended"
        else:
            out.kept[work.name] = f"not landed, idle {idle.days}d"
            continue
        unsaved = _unsaved(folder)
        if unsaved is not None:
            out.kept[work.name] = f"{unsaved}: never removed"
            continue
        doomed = tuple(ref for ref in _refs(root, work) if _merged(root, ref, work.base))
        kept_branch = f"refs/heads/{work.branch}" not in doomed
        branch = f"kept (not merged into {work.base})" if kept_branch else f"deleted (merged into {work.base})"
        why += f"; branch {work.branch} {branch}"
        out.retired.append(Retired(work.name, work.folder, disk_use(folder), why, doomed))
    return out


def _refs(root: Path, work: Known) -> list[str]:
    """The branch and attempt refs of a workspace."""
    attempts = git.git(root, "for-each-ref", "--format=%(refname)", f"{git.ATTEMPTS_REF}/{work.name}/")
    return [f"refs/heads/{work.branch}", *attempts.splitlines()]


def carry_out(root: Path, db: sqlite3.Connection, todo: WorkspacePlan) -> None:
    """Remove what ``todo`` names: each folder (checked again for unsaved work first), its merged refs, its ports."""
    if todo.stale:
        git.git(root, "worktree", "prune")
    for item in todo.retired:
        folder = Path(item.folder)
        if not _still_idle(root, db, item.name):  # a run or a memo came for it since the plan: kept, refs and all
            continue
        if (folder / ".git").exists():
            if _unsaved(folder) is not None:  # changed since the plan: kept
                continue
            git.git(root, "worktree", "remove", "--force", str(folder))
        git.git(root, "worktree", "prune")
        for ref in item.deleted_refs:
            if ref.startswith("refs/heads/"):
                git.git(root, "branch", "--quiet", "-D", ref.removeprefix("refs/heads/"), check=False)
            else:
                git.git(root, "update-ref", "-d", ref, check=False)
        if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'workspace_ports'").fetchone():
            ports.release(db, item.name)


def _still_idle(root: Path, db: sqlite3.Connection, name: str) -> bool:
    """Read again just before the removal (a pass plans, then removes logs for a while first, and ``gc`` runs beside
    ``up``): no unfinished run works in workspace ``name``, and no memo in an inbox or in ``waiting/`` is for it."""
    if any(work.name == name and work.busy_run is not None for work in known(db)):
        return False
    if any(landing.name == name for landing in land_records.unfinished(db)):  # queued or landing: its check may run
        return False
    # active/: a run claimed its memo, and its attempt is not on record yet
    return all(name not in waiting_for(root, db, folder) for folder in (INBOX, ACTIVE, WAITING))


def summary(root: Path, db: sqlite3.Connection) -> dict[str, Any]:
    """How many workspaces exist and the bytes they hold (``status``, ``doctor``)."""
    folders = [Path(work.folder) for work in known(db) if (Path(work.folder) / ".git").exists()]
    return {"count": len(folders), "bytes": sum(disk_use(folder) for folder in folders)}
