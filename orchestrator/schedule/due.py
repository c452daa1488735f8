"""What is due: each role's tasks (its rules and its open ledger tasks) with the moment each comes due, the
tasks a wake may carry now (``rules.pick``), and the role's wakes whose run may still happen."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from orchestrator.core.errors import ControlError, UsageError
from orchestrator.intake.memo import ACTIVE, INBOX
from orchestrator.schedule import records, rules

if TYPE_CHECKING:
    from orchestrator.config import Role
    from orchestrator.schedule.context import ScheduleContext


@dataclass(frozen=True)
class Due:
    """A task of a role with the moment it is (or becomes) due."""

    name: str
    text: str
    priority: int
    in_quiet_hours: bool
    due_at: datetime | None


class DueTasks:
    """The due tasks and pending wakes of one supervisor's roles, read from the schedule records."""

    def __init__(self, context: ScheduleContext) -> None:
        self.wakes = context

    def tasks(self, name: str, now: datetime, write: bool = True) -> list[Due]:
        """Every task of the role (its rules and its open ledger tasks) with when it is due."""
        wakes = self.wakes
        role = wakes.config.roles[name]
        done = records.done(wakes.db, name)
        out = []
        for task, settings in role.tasks.items():
            anchor = records.first_seen(wakes.db, name, task, now) if write else now
            last = records.when(done.get(task, {}).get("done_at"))
            due = rules.due_at(settings.rule(wakes.tz, role.wake), last, anchor, wakes.tz)
            out.append(Due(task, settings.text, settings.rank, settings.in_quiet_hours, due))
        for row in records.ledger(wakes.db, name, open_only=True):
            out.append(Due(row["id"], row["text"], row["priority"], False, records.when(row["due_at"])))
        return out

    def known(self, name: str, task: str, now: datetime, every: list[Due] | None = None) -> list[Due]:
        """The role's task ``task``; ``UsageError`` naming its tasks when it has none of that name."""
        every = self.tasks(name, now) if every is None else every
        chosen = [d for d in every if d.name == task]
        if not chosen:
            raise UsageError(f"role {name} has no task {task!r}; its tasks: {', '.join(d.name for d in every)}")
        return chosen

    def pick(self, name: str, now: datetime, forced: str | None = None) -> rules.Picked:
        """The tasks a wake of the role carries now: due, not carried by another wake, within the rules."""
        role = self.wakes.config.roles[name]
        busy = {task for wake in self.pending(name) for task in wake["tasks"]}
        every = self.tasks(name, now)
        if forced is not None:
            chosen = self.known(name, forced, now, every)
            if forced in busy:
                raise ControlError(f"task {forced} of {name} is already carried by a wake that is queued or running")
            d = chosen[0]
            return rules.Picked([rules.Candidate(d.name, d.text, d.priority, d.in_quiet_hours)], [], [])
        due = [
            rules.Candidate(d.name, d.text, d.priority, d.in_quiet_hours)
            for d in every
            if d.due_at is not None and d.due_at <= now and d.name not in busy
        ]
        windows = role.wake.windows if role.wake is not None else []
        quiet = bool(windows) and rules.in_window(now, windows, self.wakes.tz)
        return rules.pick(due, role.wake.max_tasks if role.wake is not None else 2, quiet)

    def eligible_at(self, role: Role, due: Due) -> datetime:
        """When a due task may wake the role: at once, or at the end of the quiet hours it falls into."""
        assert due.due_at is not None
        windows = role.wake.windows if role.wake is not None else []
        return due.due_at if due.in_quiet_hours or not windows else rules.window_end(due.due_at, windows, self.wakes.tz)

    def pending(self, name: str) -> list[dict[str, Any]]:
        """The role's wakes whose run may still happen; one whose memo is gone (deleted, lost) is let go."""
        wakes = self.wakes
        out = []
        folder = wakes.config.role_dir(name)
        live = {m.memo_id for run in wakes.host.runs().values() for m in run.memos if run.role.name == name}
        for wake in records.pending_wakes(wakes.db, name):
            if (
                wake["memo_id"] in live
                or (folder / INBOX / wake["name"]).exists()
                or (folder / ACTIVE / wake["name"]).exists()
            ):
                out.append(wake)
            else:
                records.end_wake(wakes.db, wake["memo_id"], "gone", wakes.clock.now(), None, None)
        return out
