"""What a retention pass removes, read from the records and the folders; it changes nothing.

The rules (``config.retention``) against one moment ``now``:

- ``logs``, ``transcripts``: the log file (``.orchestrator/logs/<run>-<role>.log``) and the run folder
  (``.orchestrator/runs/<run>/``: an SDK run's transcript, events and result files) of every finished run
  that ended before ``now - limit`` and whose file was not removed before (``log_pruned_at``,
  ``transcript_pruned_at``: the record stays, and says so);
- ``runs``: the records of finished runs that ended before ``now - runs`` (their attempts, cancellation and
  memo rows with them), except each role's newest numbered run, which carries the role's run number on;
  and the loop breaker's links, wake memos' outcomes and cancellations older than that;
- ``archive``, ``failed``, ``cancelled``, ``held``: memo files that came into that folder before ``now - limit``
  (by the memo index; a memo it does not know by its modification time), with their ``.reason`` files;
- ``workspaces``: the worktrees of ended conversations that landed or were idle that long, never one with work
  that exists nowhere else (``workspaces.retire`` decides).

Never anything of a run that is not finished, and never a memo an unfinished run holds or replies to (its
``reply_to`` chain, as far as the memo index knows it): those are counted as kept.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from orchestrator.config.retention import MEMO_FOLDERS, RetentionSettings
from orchestrator.core.clock import iso
from orchestrator.core.states import FINISHED, UNFINISHED
from orchestrator.core.text import printable
from orchestrator.intake import catalog
from orchestrator.intake.memo import parse_front_matter, read_head
from orchestrator.intake.notices import reason_path
from orchestrator.schedule import records
from orchestrator.store import RUN_END
from orchestrator.supervisor import breaker
from orchestrator.workspaces import retire

KINDS = ("logs", "transcripts", "runs", "memos")
_FINISHED = tuple(sorted(state.value for state in FINISHED))
_IN_FINISHED = f"+state IN ({', '.join('?' * len(_FINISHED))})"  # ``+``: the end-time index, not the state one


@dataclass(frozen=True)
class Item:
    """One thing a pass removes: a file or folder (``path``, relative to the root) and/or a run's record."""

    kind: str  # log | transcript | run | memo
    path: str | None
    bytes: int
    since: str  # the time its age counts from (the run's end, the memo's arrival in its folder)
    run_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "bytes": self.bytes, "since": self.since, "run_id": self.run_id}


@dataclass
class Plan:
    """Everything one pass removes (``items``) and what it keeps that the rules alone would remove."""

    now: datetime
    rules: RetentionSettings
    items: dict[str, list[Item]] = field(default_factory=lambda: {k: [] for k in KINDS})
    #: runs whose log or transcript is marked removed (some had no file left)
    pruned_logs: list[int] = field(default_factory=list)
    pruned_transcripts: list[int] = field(default_factory=list)
    #: other rows older than ``runs``, per table: (where clause, arguments, how many)
    records: dict[str, tuple[str, list[Any], int]] = field(default_factory=dict)
    #: memos kept because unfinished runs hold them or reply to them
    kept_memos: list[str] = field(default_factory=list)
    unfinished_runs: int = 0
    workspaces: retire.WorkspacePlan = field(default_factory=lambda: retire.WorkspacePlan([], {}, []))

    def cutoff(self, seconds: float) -> datetime:
        return self.now - timedelta(seconds=seconds)


def _size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder (links not followed); 0 when it is gone."""
    try:
        info = os.lstat(path)
    except OSError:
        return 0
    if not os.path.isdir(path) or os.path.islink(path):
        return info.st_size
    return retire.disk_use(path)


def _relative(root: Path, path: Path) -> str:
    return printable(os.path.relpath(path, root))


class _InUse:
    """The runs that are not finished, the memos they hold, and the ids their memos reply to (up the chain)."""

    def __init__(self, root: Path, db: sqlite3.Connection) -> None:
        states = [state.value for state in UNFINISHED]
        marks = ", ".join("?" * len(states))
        rows = db.execute(f"SELECT run_id, role, memos, memo_ids FROM runs WHERE state IN ({marks})", states).fetchall()
        self.run_ids = {int(row[0]) for row in rows}
        self.names: set[tuple[str, str]] = set()
        self.ids: set[str] = set()
        replies: set[str] = set()
        for _run_id, role, memos, memo_ids in rows:
            names = json.loads(memos or "[]")
            self.names.update((role, name) for name in names)
            self.ids.update(i for i in json.loads(memo_ids or "[]") if i)
            for name in names:  # in active/ (or back in the inbox): a few files, read for their reply_to
                for folder in ("active", "inbox"):
                    header = parse_front_matter(read_head(root / "memo" / role / folder / name))
                    if header.reply_to:
                        replies.add(header.reply_to)
        seen: set[str] = set()
        while replies - seen:  # up the chain, as far as the memo index knows it
            level = sorted(replies - seen)
            seen |= set(level)
            found = db.execute(
                f"SELECT reply_to FROM memo_index WHERE memo_id IN ({', '.join('?' * len(level))}) "
                "AND reply_to IS NOT NULL",
                level,
            ).fetchall()
            replies |= {row[0] for row in found}
        self.ids |= seen

    def holds(self, role: str, name: str, memo_id: str | None) -> bool:
        return (role, name) in self.names or (memo_id is not None and memo_id in self.ids)


def plan(root: Path, db: sqlite3.Connection, rules: RetentionSettings, now: datetime) -> Plan:
    """What a pass at ``now`` removes under ``rules``; reads the database ``db`` and the folders."""
    out = Plan(now, rules)
    state_dir = root / ".orchestrator"
    in_use = _InUse(root, db)
    out.unfinished_runs = len(in_use.run_ids)
    if rules.logs is not None:
        for run_id, role, log_path, ended in _ended_before(db, out.cutoff(rules.logs), "log_pruned_at"):
            out.pruned_logs.append(run_id)
            path = Path(log_path) if log_path else state_dir / "logs" / f"{run_id}-{role}.log"
            if path.parent == state_dir / "logs" and os.path.lexists(path):  # never a file elsewhere
                out.items["logs"].append(Item("log", _relative(root, path), _size(path), ended, run_id))
    if rules.transcripts is not None:
        for run_id, _role, _log, ended in _ended_before(db, out.cutoff(rules.transcripts), "transcript_pruned_at"):
            out.pruned_transcripts.append(run_id)
            path = state_dir / "runs" / str(run_id)
            if os.path.lexists(path):
                out.items["transcripts"].append(Item("transcript", _relative(root, path), _size(path), ended, run_id))
    if rules.runs is not None:
        _old_records(db, out, out.cutoff(rules.runs))
    for folder in MEMO_FOLDERS:
        limit = rules.folder_limit(folder)
        if limit is not None:
            _old_memos(root, db, out, folder, out.cutoff(limit).timestamp(), in_use)
    out.workspaces = retire.plan(root, db, rules.workspaces, now)
    return out


def _ended_before(db: sqlite3.Connection, cutoff: datetime, pruned: str) -> list[tuple[int, str, str | None, str]]:
    """(run id, role, log path, end) of finished runs that ended before ``cutoff`` and still have this file."""
    rows = db.execute(
        f"SELECT run_id, role, log_path, {RUN_END} FROM runs WHERE {RUN_END} < ? AND {_IN_FINISHED} "
        f"AND {pruned} IS NULL ORDER BY {RUN_END}, run_id",
        [iso(cutoff), *_FINISHED],
    ).fetchall()
    return [(int(r[0]), str(r[1]), r[2], str(r[3])) for r in rows]


def _old_records(db: sqlite3.Connection, out: Plan, cutoff: datetime) -> None:
    newest = {
        (row[0], row[1]) for row in db.execute("SELECT role, MAX(seq) FROM runs GROUP BY role") if row[1] is not None
    }
    rows = db.execute(
        f"SELECT run_id, role, seq, {RUN_END} FROM runs WHERE {RUN_END} < ? AND {_IN_FINISHED} ORDER BY {RUN_END}, run_id",
        [iso(cutoff), *_FINISHED],
    ).fetchall()
    for run_id, role, seq, ended in rows:
        if (role, seq) not in newest:
            out.items["runs"].append(Item("run", None, 0, str(ended), int(run_id)))
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, where, args in (
        ("memo_links", breaker.EXPIRED_LINKS, [cutoff.timestamp()]),  # each feature says what of its own expires
        ("wake_memos", records.EXPIRED_WAKES, [iso(cutoff)]),
        ("cancellations", "run_id IS NULL AND cancelled_at < ?", [iso(cutoff)]),  # a run's go with its record
    ):
        if table not in tables:  # a feature that never ran here made no table
            continue
        count = int(db.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}", args).fetchone()[0])
        out.records[table] = (where, args, count)


def _old_memos(root: Path, db: sqlite3.Connection, out: Plan, folder: str, cutoff: float, in_use: _InUse) -> None:
    indexed = {
        (row[0], row[1]): (float(row[2]), row[3])
        for row in db.execute("SELECT role, name, moved_at, memo_id FROM memo_index WHERE folder = ?", (folder,))
    }
    for role, _folder, path in catalog.memo_files(root, folders=(folder,)):
        key = (printable(role), printable(path.name))
        if key in indexed:
            since, memo_id = indexed[key]
        else:
            try:
                since = os.lstat(path).st_mtime
            except OSError:
                continue
            memo_id = None
        if since >= cutoff:
            continue
        if key not in indexed:  # an old memo the index does not know: its id, for the check below
            memo_id = parse_front_matter(read_head(path)).id
        if in_use.holds(role, path.name, memo_id):
            out.kept_memos.append(_relative(root, path))
            continue
        size = _size(path) + _size(reason_path(path))
        moment = iso(datetime.fromtimestamp(since).astimezone())
        out.items["memos"].append(Item("memo", _relative(root, path), size, moment))
