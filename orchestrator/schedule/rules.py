"""The pure rules of a schedule: when a task is due, when a heartbeat ticks, what quiet hours hold, what is picked.

Nothing here reads a clock: every function takes ``now``. Times of day are local to the team's time zone
(``zoneinfo``) and every moment is compared in UTC, so a DST gap or repeat moves an occurrence, never doubles
it: a time that does not exist that day (the spring gap) falls at the same distance after the gap's start, and
a time that happens twice (the autumn repeat) counts once, at its first occurrence.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from orchestrator.config.when import FIRST_NEXT, Rule, day_seconds


def occurrence(day: date, at: time, tz: tzinfo) -> datetime:
    """``at`` on the local ``day``, in UTC; a time in a DST gap lands after it, a repeated time at its first pass."""
    return datetime.combine(day, at, tzinfo=tz).astimezone(UTC)


def _matches(rule: Rule, day: date) -> bool:
    return rule.kind == "daily" or day.weekday() == rule.weekday


def next_occurrence(rule: Rule, after: datetime, tz: tzinfo) -> datetime:
    """The first occurrence of a daily or weekly rule strictly after ``after``."""
    assert rule.at is not None
    start = after.astimezone(tz).date() - timedelta(days=1)
    for offset in range(0, 10):
        day = start + timedelta(days=offset)
        if _matches(rule, day):
            moment = occurrence(day, rule.at, tz)
            if moment > after:
                return moment
    raise AssertionError("a weekly rule occurs within 10 days")  # pragma: no cover


def current_occurrence(rule: Rule, moment: datetime, tz: tzinfo) -> datetime:
    """The occurrence of a daily or weekly rule in the local day or week (Monday to Sunday) of ``moment``, in
    UTC: it may lie before ``moment`` (already passed) or after it (still to come)."""
    assert rule.at is not None
    day = moment.astimezone(tz).date()
    if rule.kind == "weekly":
        day += timedelta(days=(rule.weekday or 0) - day.weekday())
    return occurrence(day, rule.at, tz)


def due_at(rule: Rule, last_done: datetime | None, first_seen: datetime, tz: tzinfo) -> datetime | None:
    """When the task is (or becomes) due; None when it never will again (a ``once`` task that is done).

    A daily or weekly task done before is due from its first occurrence after that done: one occurrence or
    many missed while the orchestrator was down make one wake, at once. One never done counts from
    ``first_seen`` (when the task was first known): with ``first: now`` from the occurrence of that local day or
    week, so a daily 21:00 first seen at 22:30 is due at once and one first seen at 10:00 at 21:00 that day;
    with ``first: next`` from its first occurrence after ``first_seen``. An ``every`` task never done is due at
    ``first_seen`` (``next``: one period later); a ``once`` task at its time, until done.
    """
    if rule.kind in ("daily", "weekly"):
        if last_done is not None:
            return next_occurrence(rule, last_done, tz)
        if rule.first == FIRST_NEXT:
            return next_occurrence(rule, first_seen, tz)
        return current_occurrence(rule, first_seen, tz)
    if rule.kind == "every":
        period = timedelta(seconds=rule.period or 0)
        if last_done is not None:
            return last_done + period
        return first_seen + period if rule.first == FIRST_NEXT else first_seen
    return None if last_done is not None else rule.when


def next_tick(last_tick: datetime | None, every: float, now: datetime) -> datetime:
    """The heartbeat's next tick: ``every`` after the last one, at once if it was missed (one tick, never a
    backlog), and never further off than ``every`` from now (a clock that went back does not stall it)."""
    if last_tick is None:
        return now
    due = last_tick + timedelta(seconds=every)
    return min(max(due, now), now + timedelta(seconds=every))


def in_window(moment: datetime, windows: list[tuple[time, time]], tz: tzinfo) -> bool:
    """Whether ``moment`` falls in one of the local windows (``start <= t < end``; a window may wrap midnight)."""
    local = day_seconds(moment.astimezone(tz).time())
    for start, end in windows:
        a, b = day_seconds(start), day_seconds(end)
        if (a <= local < b) if a < b else (local >= a or local < b):
            return True
    return False


def window_end(moment: datetime, windows: list[tuple[time, time]], tz: tzinfo) -> datetime:
    """The first moment at or after ``moment`` outside every window (``moment`` itself when outside)."""
    current = moment
    for _ in range(len(windows) + 2):
        if not in_window(current, windows, tz):
            return current
        local = current.astimezone(tz)
        ends = []
        for start, end in windows:
            if in_window(current, [(start, end)], tz):
                day = local.date() if day_seconds(end) > day_seconds(local.time()) else local.date() + timedelta(days=1)
                ends.append(occurrence(day, end, tz))
        current = max(min(ends), current + timedelta(seconds=1))
    return current


@dataclass(frozen=True)
class Candidate:
    """A task that is due now, as the picker sees it."""

    name: str
    text: str
    priority: int
    in_quiet_hours: bool = False


@dataclass(frozen=True)
class Picked:
    tasks: list[Candidate]
    deferred: list[Candidate]
    quiet_skipped: list[Candidate]


def pick(due: list[Candidate], max_tasks: int, quiet: bool) -> Picked:
    """At most ``max_tasks`` due tasks, highest priority first (ties by name); in quiet hours only the tasks
    marked ``in_quiet_hours``. The rest are deferred to the next wake."""
    allowed = [c for c in due if not quiet or c.in_quiet_hours]
    held = [c for c in due if quiet and not c.in_quiet_hours]
    ordered = sorted(allowed, key=lambda c: (-c.priority, c.name))
    return Picked(ordered[:max_tasks], ordered[max_tasks:], held)
