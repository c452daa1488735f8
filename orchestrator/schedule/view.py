"""``orchestrator schedule`` and ``orchestrator task``: what the schedule shows and the one-off ledger.

Both work with or without a running orchestrator: the schedule is computed from ``roles.yaml`` and the
database (read only); the ledger is written straight into the database, and a running orchestrator is then
told to look again, so a task due now is picked at its next wake.
"""

from __future__ import annotations

import contextlib
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from orchestrator.config import Config, when
from orchestrator.config.schedule import zone
from orchestrator.console import say
from orchestrator.core.clock import iso
from orchestrator.core.errors import NotRunningError, OrchestratorError, UsageError
from orchestrator.core.units import parse_duration
from orchestrator.intake.memo import new_memo_id
from orchestrator.schedule import records, rules
from orchestrator.store import Store

LEDGER_PRIORITY = when.DEFAULT_PRIORITY["once"]  # a one-off task ranks as a `once` task unless told otherwise


def _store(config: Config, readonly: bool) -> Store | None:
    path = config.state_dir / "state.db"
    if readonly and not path.exists():
        return None
    store = Store(path, readonly=readonly)
    if not readonly:
        records.ensure_tables(store.db)
    elif not records.has_tables(store.db):  # a database no orchestrator with a schedule made yet
        store.close()
        return None
    return store


def schedule(config: Config, now: datetime | None = None) -> dict[str, Any]:
    """Per role: the next tick, each task's rule, next due time and last done, the last wake or skip, the skips."""
    tz = zone(config.timezone)
    now = (now or datetime.now(UTC)).astimezone(UTC)
    store = _store(config, readonly=True)
    out: dict[str, Any] = {"timezone": config.timezone or str(tz), "now": iso(now.astimezone(tz)), "roles": {}}
    try:
        for name, role in config.roles.items():
            db = store.db if store is not None else None
            done = records.done(db, name) if db is not None else {}
            ledger = records.ledger(db, name, open_only=True) if db is not None else []
            if role.wake is None and not role.tasks and not ledger:
                continue
            state = (
                records.state(db, name)
                if db is not None
                else dict.fromkeys(("last_tick", "last_event", "last_reason", "last_at"))
            )
            every = role.wake.every if role.wake is not None else None
            tick = rules.next_tick(records.when(state["last_tick"]), every, now) if every else None
            tasks = []
            for task, settings in role.tasks.items():
                row = done.get(task, {})
                anchor = records.when(row.get("first_seen")) or now
                last = records.when(row.get("done_at"))
                rule = settings.rule(tz, role.wake)
                due = rules.due_at(rule, last, anchor, tz)
                tasks.append(
                    {
                        "name": task,
                        "rule": rule.describe(),
                        "priority": settings.rank,
                        "next_due": iso(due.astimezone(tz)) if due else None,
                        "due_now": due is not None and due <= now,
                        "last_done": row.get("done_at"),
                        "last_seq": row.get("seq"),
                    }
                )
            for item in ledger:
                due = records.when(item["due_at"])
                tasks.append(
                    {
                        "name": item["id"],
                        "rule": f"once {item['due_at']} (ledger)",
                        "priority": item["priority"],
                        "next_due": item["due_at"],
                        "due_now": due is not None and due <= now,
                        "last_done": None,
                        "last_seq": None,
                        "text": item["text"],
                    }
                )
            out["roles"][name] = {
                "every": every,
                "next_tick": iso(tick.astimezone(tz)) if tick else None,
                "quiet_hours": role.wake.quiet_hours if role.wake is not None else None,
                "tasks": tasks,
                "last": state["last_event"],
                "last_reason": state["last_reason"],
                "last_at": state["last_at"],
                "skips": records.skips(db, name) if db is not None else {},
            }
    finally:
        if store is not None:
            store.close()
    return out


def parse_due(text: str | None, now: datetime, config: Config) -> datetime:
    """``--due``: ISO 8601 (in the team's zone when it has no offset) or ``+2h``; now when omitted."""
    if text is None:
        return now
    try:
        if text.startswith("+"):
            return now + timedelta(seconds=parse_duration(text[1:]))
        return when.parse_moment(text, zone(config.timezone))
    except ValueError as exc:
        raise UsageError(f"orchestrator task add: --due {text!r}: {exc} (or +DURATION such as +2h)") from None


def add_task(config: Config, role: str, text: str, due: str | None, priority: int | None) -> dict[str, Any]:
    """Put a one-off task on the ledger; nothing is stored when anything is wrong."""
    if role not in config.roles:
        raise UsageError(f"orchestrator task add: unknown role {role!r}; roles: {', '.join(config.roles)}")
    if not text.strip():
        raise UsageError("orchestrator task add: the task needs a text")
    now = datetime.now(UTC)
    when = parse_due(due, now, config)
    task_id = f"t-{new_memo_id()}"
    store = _store(config, readonly=False)
    assert store is not None
    try:
        records.ledger_add(
            store.db, task_id, role, text, when, priority if priority is not None else LEDGER_PRIORITY, now
        )
        row = next(r for r in records.ledger(store.db, role) if r["id"] == task_id)
    finally:
        store.close()
    _nudge(config.root)
    return row


def list_tasks(config: Config, role: str | None) -> list[dict[str, Any]]:
    store = _store(config, readonly=True)
    if store is None:
        return []
    try:
        return records.ledger(store.db, role)
    finally:
        store.close()


def drop_task(config: Config, task_id: str) -> None:
    store = _store(config, readonly=False)
    assert store is not None
    try:
        if not records.ledger_drop(store.db, task_id):
            raise UsageError(f"orchestrator task drop: no ledger task {task_id!r}; see `orchestrator task list`")
    finally:
        store.close()
    _nudge(config.root)


def _nudge(root: Path) -> None:
    """Tell a running orchestrator the ledger changed; with none running there is no one to tell."""
    from orchestrator.control import client as control

    with contextlib.suppress(NotRunningError, OrchestratorError):
        control.call(root, "schedule_changed", timeout=5)


def print_schedule(report: dict[str, Any], stream: TextIO | None = None) -> None:
    """``orchestrator schedule``: per role its tick, its tasks and what its last wake did."""
    out = stream or sys.stdout
    say(f"time zone {report['timezone']}, now {report['now']}", out)
    for role, info in report["roles"].items():
        tick = f"every {info['every']:g}s, next tick {info['next_tick']}" if info["every"] else "woken by due tasks"
        skips = ", ".join(f"{k} {v}" for k, v in sorted(info["skips"].items())) or "none"
        say(f"{role}: {tick}; last: {info['last'] or '-'} {info['last_reason'] or ''}; skips: {skips}", out)
        for task in info["tasks"]:
            last = f"last done {task['last_done']} (run {task['last_seq']})" if task["last_done"] else "never done"
            due = "DUE NOW" if task["due_now"] else f"next due {task['next_due'] or 'never'}"
            say(f"  {task['name']}: {task['rule']}, priority {task['priority']}; {due}; {last}", out)
