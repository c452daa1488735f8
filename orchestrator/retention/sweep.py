"""A retention pass: the plan carried out (``sweep``), and ``orchestrator gc`` (``collect``).

Files go first, then their records are marked or removed, in transactions of ``CHUNK`` rows, so a running
orchestrator's own writes never wait long for the pass; a pass can be stopped between two chunks
(``stop``), and the next one goes on from where it was. A file that is already gone is no error.
Works with or without a running orchestrator: the loop never touches what a pass removes (finished runs,
memos in their last folder), and a pass's own connection is not the loop's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.config.retention import RetentionSettings
from orchestrator.core.clock import iso
from orchestrator.core.text import printable
from orchestrator.intake import memo_index
from orchestrator.intake.notices import reason_path
from orchestrator.retention.plan import KINDS, Item, Plan, plan
from orchestrator.store import Store
from orchestrator.workspaces import retire

CHUNK = 500  # rows a transaction; files between two checks of ``stop``


class Stopped(Exception):
    """The pass was asked to stop between two chunks (the orchestrator is ending)."""


def _chunks(values: list[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _remove(path: Path) -> None:
    """A file, or a folder and everything in it; never what a link points to."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def sweep(root: Path, db: sqlite3.Connection, todo: Plan, stop: threading.Event | None = None) -> None:
    """Remove what ``todo`` names: the files, then the records."""

    def check() -> None:
        if stop is not None and stop.is_set():
            raise Stopped()

    now = iso(todo.now)
    for kind, column, marked in (
        ("logs", "log_pruned_at", todo.pruned_logs),
        ("transcripts", "transcript_pruned_at", todo.pruned_transcripts),
    ):
        files = {item.run_id: item.path for item in todo.items[kind] if item.path}
        for chunk in _chunks(marked):
            check()
            for run_id in chunk:
                if run_id in files:
                    _remove(root / files[run_id])
            with _transaction(db):
                db.executemany(f"UPDATE runs SET {column} = ? WHERE run_id = ?", [(now, run_id) for run_id in chunk])
    check()
    retire.carry_out(root, db, todo.workspaces)  # before the records: a workspace is found by its runs' rows
    runs = [item.run_id for item in todo.items["runs"] if item.run_id is not None]
    for chunk in _chunks(runs):
        check()
        with _transaction(db):
            for table in ("attempts", "cancellations", "run_memos", "runs"):
                db.executemany(f"DELETE FROM {table} WHERE run_id = ?", [(run_id,) for run_id in chunk])
    for table, (where, args, _count) in todo.records.items():
        check()
        with _transaction(db):
            db.execute(f"DELETE FROM {table} WHERE {where}", args)
    for chunk in _chunks(todo.items["memos"]):
        check()
        gone = []
        for item in chunk:
            path = root / str(item.path)
            _remove(path)
            with contextlib.suppress(OSError):
                os.unlink(reason_path(path))
            gone.append((printable(path.parent.parent.name), path.parent.name, printable(path.name)))
        with _transaction(db):
            memo_index.forget(db, gone)


def report(todo: Plan, dry_run: bool, reindexed: memo_index.Rebuilt | None = None) -> dict[str, Any]:
    """The pass as ``gc --json`` prints it: per kind the count, bytes and items; what was kept, and why."""
    out: dict[str, Any] = {
        "dry_run": dry_run,
        "now": iso(todo.now),
        "rules": todo.rules.rules(),
    }
    for kind in KINDS:
        items: list[Item] = todo.items[kind]
        out[kind] = {
            "count": len(items),
            "bytes": sum(item.bytes for item in items),
            "items": [item.to_json() for item in items],
        }
    work = todo.workspaces
    out["workspaces"] = {
        "count": len(work.retired),
        "bytes": sum(item.bytes for item in work.retired),
        "items": [item.to_json() for item in work.retired],
        "kept": work.kept,
        "stale": work.stale,
    }
    out["records"] = {table: count for table, (_where, _args, count) in todo.records.items()}
    out["kept"] = {"unfinished_runs": todo.unfinished_runs, "memos_in_use": todo.kept_memos}
    out["reindexed"] = reindexed.indexed if reindexed else None
    out["reindex"] = (
        {"indexed": reindexed.indexed, "added": reindexed.added, "dropped": reindexed.dropped, "line": reindexed.line()}
        if reindexed
        else None
    )
    return out


def collect(
    root: Path,
    rules: RetentionSettings,
    now: datetime,
    *,
    dry_run: bool = False,
    reindex: bool = False,
    stop: threading.Event | None = None,
) -> dict[str, Any]:
    """One pass over ``root`` at ``now`` (``orchestrator gc``, and the daily pass of ``up``): the memo index rebuilt
    first with ``reindex``; with ``dry_run`` nothing is removed and the report is the same."""
    store = Store(root / ".orchestrator" / "state.db")
    try:
        reindexed = memo_index.rebuild(store.db, root, iso(now)) if reindex else None
        todo = plan(root, store.db, rules, now)
        if not dry_run:
            sweep(root, store.db, todo, stop)
        return report(todo, dry_run, reindexed)
    finally:
        store.close()


SHOWN = 20  # items named per kind in the lines for people; --json lists every one


def human_bytes(count: int) -> str:
    """``1.2 MB``, ``340 B``."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def render(result: dict[str, Any]) -> list[str]:
    """The pass in lines for people: per kind what was (or would be) removed, its first items, what was kept."""
    rules = result["rules"]
    verb = "would remove" if result["dry_run"] else "removed"
    lines = [f"gc{' (dry run, nothing removed)' if result['dry_run'] else ''} at {result['now']}"]
    if result.get("reindex"):
        lines.append(result["reindex"]["line"])
    for kind, rule in (
        ("logs", rules["logs"]),
        ("transcripts", rules["transcripts"]),
        ("runs", rules["runs"]),
        ("memos", ", ".join(f"{f}: {rules[f]}" for f in ("archive", "failed", "cancelled", "held"))),
    ):
        part = result[kind]
        what = f"{part['count']} record(s)" if kind == "runs" else f"{part['count']} ({human_bytes(part['bytes'])})"
        what = what if part["count"] else "nothing"
        line = f"{kind} ({kind + ': ' if kind != 'memos' else ''}{rule}): {verb} {what}"
        if kind == "runs" and any(result["records"].values()):
            line += ", and " + ", ".join(f"{n} {table} row(s)" for table, n in result["records"].items() if n)
        lines.append(line)
        for item in part["items"][:SHOWN]:
            lines.append(f"  {item['path'] or 'run ' + str(item['run_id'])}  (since {item['since']})")
        if part["count"] > SHOWN:
            lines.append(f"  ... and {part['count'] - SHOWN} more (`orchestrator gc --json` lists every one)")
    lines += workspace_lines(result, verb)
    kept = result["kept"]
    lines.append(
        f"kept: everything of {kept['unfinished_runs']} unfinished run(s)"
        + (f"; {len(kept['memos_in_use'])} old memo(s) they hold or reply to" if kept["memos_in_use"] else "")
    )
    return lines


def workspace_lines(result: dict[str, Any], verb: str) -> list[str]:
    """The workspaces' part of ``render``: what goes and why, what stays and why, the registrations pruned."""
    part = result.get("workspaces")
    if part is None:
        return []
    what = f"{part['count']} ({human_bytes(part['bytes'])})" if part["count"] else "nothing"
    lines = [f"workspaces (workspaces: {result['rules']['workspaces']}): {verb} {what}"]
    lines += [f"  {item['path']}: {item['why']}" for item in part["items"]]
    lines += [f"  kept {name}: {why}" for name, why in part["kept"].items()]
    if part["stale"]:
        pruned = "would prune" if result["dry_run"] else "pruned"
        lines.append(
            f"  {pruned} {len(part['stale'])} registration(s) whose folder is gone: {', '.join(part['stale'])}"
        )
    return lines
