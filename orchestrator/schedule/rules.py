"""The pure rules of a schedule: when a task is due, when a heartbeat ticks, what quiet hours hold, what is picked.

Nothing here reads a clock: every function takes ``now``. Times of day are local to the team's time zone
(``zoneinfo``) and every moment is compared in UTC, so a DST gap or repeat moves an occurrence, never doubles
it: a time that does not exist that day (the spring gap) falls at the same distance after the gap's start, and
a time that happens twice (the autumn repeat) counts once, at its first occurrence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_LONG_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")

# default priorities, higher first: the seed order weekly > daily > every > once (ledger tasks are `once` tasks)
DEFAULT_PRIORITY = {"weekly": 400, "daily": 300, "every": 200, "once": 100}


def parse_time_of_day(text: str) -> time:
    """``HH:MM`` or ``HH:MM:SS``; ``ValueError`` naming what was expected."""
    match = _TIME.match(str(text).strip())
    if not match:
        raise ValueError(f"expected a time of day such as 21:00 or 21:00:30, got {text!r}")
    hour, minute, second = int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"expected a time of day between 00:00 and 23:59:59, got {text!r}")
    return time(hour, minute, second)


def parse_weekly(text: str) -> tuple[int, time]:
    """``"sun 10:00"``: (weekday 0 = Monday, time of day)."""
    parts = str(text).split()
    if len(parts) != 2:
        raise ValueError(f'expected a weekday and a time such as "sun 10:00", got {text!r}')
    day = parts[0].lower()
    if day in WEEKDAYS:
        weekday = WEEKDAYS.index(day)
    elif day in _LONG_DAYS:
        weekday = _LONG_DAYS.index(day)
    else:
        raise ValueError(f"unknown weekday {parts[0]!r}; expected one of {', '.join(WEEKDAYS)}")
    return weekday, parse_time_of_day(parts[1])


def parse_moment(text: str, tz: tzinfo) -> datetime:
    """An ISO 8601 time; one without an offset is in ``tz``. Returned in UTC."""
    try:
        moment = datetime.fromisoformat(str(text).strip())
    except ValueError:
        raise ValueError(f"expected an ISO 8601 time such as 2026-12-01T09:00, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    return moment.astimezone(UTC)


def parse_window(text: str) -> tuple[time, time]:
    """``"02:00-06:00"`` (may wrap midnight: ``"22:00-06:00"``); an empty window is an error."""
    parts = str(text).split("-")
    if len(parts) != 2:
        raise ValueError(f'expected a window such as "02:00-06:00", got {text!r}')
    start, end = parse_time_of_day(parts[0]), parse_time_of_day(parts[1])
    if start == end:
        raise ValueError(f"the window {text!r} is empty (it starts where it ends)")
    return start, end


def _seconds(at: time) -> int:
    return at.hour * 3600 + at.minute * 60 + at.second


def window_overlap(windows: list[tuple[time, time]]) -> tuple[int, int] | None:
    """The indexes of two windows that overlap, or None."""
    spans: list[tuple[int, int, int]] = []
    for index, (start, end) in enumerate(windows):
        a, b = _seconds(start), _seconds(end)
        spans.extend([(a, b, index)] if a < b else [(a, 86400, index), (0, b, index)])
    for i, (a1, b1, n1) in enumerate(spans):
        for a2, b2, n2 in spans[i + 1 :]:
            if n1 != n2 and a1 < b2 and a2 < b1:
                return (min(n1, n2), max(n1, n2))
    return None


FIRST_NOW, FIRST_NEXT = "now", "next"


@dataclass(frozen=True)
class Rule:
    """One parsed task rule: ``kind`` is daily, weekly, every or once.

    ``first`` says when a task never done is first due: ``now`` in the period it first appeared in (today's
    occurrence of a daily, this week's of a weekly, at once for an every), ``next`` only from the period after
    it (the first occurrence after it appeared; an every one period after). A once task has its own time.
    """

    kind: str
    at: time | None = None  # daily, weekly
    weekday: int | None = None  # weekly
    period: float | None = None  # every, in seconds
    when: datetime | None = None  # once, in UTC
    first: str = FIRST_NOW  # daily, weekly, every

    def describe(self) -> str:
        """As written in roles.yaml (``daily 21:00``, ``weekly sun 10:00``, ``every 3d``, ``once ...``), with
        ``, first: next`` when the task waits for its next period."""
        if self.kind == "once":
            return f"once {self.when.isoformat() if self.when else '?'}"
        if self.kind == "daily":
            text = f"daily {self.at}"
        elif self.kind == "weekly":
            text = f"weekly {WEEKDAYS[self.weekday or 0]} {self.at}"
        else:
            text = f"every {_duration(self.period or 0)}"
        return text + (f", first: {FIRST_NEXT}" if self.first == FIRST_NEXT else "")


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


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
    local = _seconds(moment.astimezone(tz).time())
    for start, end in windows:
        a, b = _seconds(start), _seconds(end)
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
                day = local.date() if _seconds(end) > _seconds(local.time()) else local.date() + timedelta(days=1)
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
