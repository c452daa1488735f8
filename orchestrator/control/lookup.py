"""Finding the memo a person means: by front-matter id, file name, file name without ``.md``, or a path.

Pure look-ups over the live runs and the inboxes, used by the supervisor to
answer ``cancel``, ``interrupt`` and ``tell``; they change nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import RoleRun
from orchestrator.core.states import RunState
from orchestrator.intake.memo import INBOX, WAITING, MemoHeader, is_memo_name, parse_front_matter, read_head
from orchestrator.store import Store


@dataclass
class Candidate:
    """A memo that matches: either part of a live run, or waiting in an inbox or in ``waiting/`` (for a person)."""

    role: str
    name: str
    path: Path
    memo_id: str | None
    run: RoleRun | None = None

    def describe(self) -> str:
        state = self.run.state.value if self.run else "waiting" if self.path.parent.name == WAITING else "queued"
        return f"{self.role}/{self.name} (id {self.memo_id or '-'}, {state})"


def read_header(path: Path) -> MemoHeader:
    return parse_front_matter(read_head(path))


def _matches(query: str, qpath: Path | None, name: str, path: Path, memo_id: str | None) -> bool:
    if qpath is not None:
        # a path names one role's memo: where it was dropped (inbox/) or where it runs (active/), never its namesake
        # in another role
        same_role = qpath.parent.parent == path.parent.parent
        return path == qpath or (
            path.name == qpath.name and same_role and qpath.parent.name in (INBOX, "active", WAITING)
        )
    return query in (name, name.removesuffix(".md")) or (memo_id is not None and query == memo_id)


def inbox_files(role_dir: Path) -> list[Path]:
    """The memos waiting in one role's inbox, by name, then those in its ``waiting/`` (a run that asked a person:
    cancelled like a queued memo)."""
    found: list[Path] = []
    for folder in (INBOX, WAITING):
        try:
            found += sorted(Path(e.path) for e in os.scandir(role_dir / folder) if is_memo_name(e.name))
        except FileNotFoundError:
            pass
    return found


def find(runs: Iterable[RoleRun], roles: Iterable[str], role_dir: Callable[[str], Path], query: str) -> list[Candidate]:
    """Every live or waiting memo the query names, runs first (a batch run once)."""
    qpath = Path(query) if ("/" in query or query.endswith(".md")) and os.path.isabs(query) else None
    found: list[Candidate] = []
    seen_runs: set[int] = set()
    for run in runs:
        for memo in run.memos:
            if _matches(query, qpath, memo.name, memo.path, memo.memo_id) and run.run_id not in seen_runs:
                seen_runs.add(run.run_id)
                found.append(Candidate(run.role.name, memo.name, memo.path, memo.memo_id, run))
    for role in roles:
        for path in inbox_files(role_dir(role)):
            memo_id = read_header(path).id  # read once: it is matched and reported
            if _matches(query, qpath, path.name, path, memo_id):
                found.append(Candidate(role, path.name, path, memo_id))
    return found


def role_candidates(runs: Iterable[RoleRun], role: str, role_dir: Path) -> list[Candidate]:
    """All of one role's live and waiting work."""
    out = [
        Candidate(role, run.memos[0].name, run.memos[0].path, run.memos[0].memo_id, run)
        for run in runs
        if run.role.name == role
    ]
    out += [Candidate(role, p.name, p, read_header(p).id) for p in inbox_files(role_dir)]
    return out


def waiting_in_gone_role(root: Path, roles: Collection[str], query: str) -> str | None:
    """A line for a memo ``query`` names that waits for a person in a role no longer in roles.yaml, or None."""
    name = os.path.basename(query)
    try:
        folders = [entry.name for entry in os.scandir(root / "memo") if entry.is_dir() and entry.name not in roles]
    except OSError:
        return None
    for role in sorted(folders):
        for candidate in (name, name + ".md"):
            if is_memo_name(candidate) and os.path.lexists(root / "memo" / role / WAITING / candidate):
                return (
                    f"memo {candidate} waits in memo/{role}/{WAITING}/, but role {role} is no longer in roles.yaml: "
                    "add the role back to cancel or answer it, or move the memo out of that folder yourself"
                )
    return None


def finished_message(store: Store, query: str) -> str | None:
    """How a memo that matches no live work ended, from the database; None when it did not end (a query of a form
    that matched nothing live, such as a path relative to another folder, is not said to have finished)."""
    row = store.last_run_of_memo(query)
    if row is None or not RunState(row["state"]).finished:
        return None
    ended = row.get("ended_at") or "?"
    why = f" ({row['reason']})" if row.get("reason") else ""
    return f"memo {query} already finished: {row['state']} at {ended} in run {row['run_id']} of role {row['role']}{why}"
