"""How ``roles.yaml`` writes a moment for the schedule: times of day, weekdays, windows, ISO times, a task's rule.

Pure parsing, below ``config`` so the settings validate a key at load time and ``schedule.rules`` computes
with the same values; each parser raises ``ValueError`` naming what it expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, tzinfo

from orchestrator.core.calendar import WEEKDAYS

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


def day_seconds(at: time) -> int:
    """The seconds since midnight of a time of day."""
    return at.hour * 3600 + at.minute * 60 + at.second


def window_overlap(windows: list[tuple[time, time]]) -> tuple[int, int] | None:
    """The indexes of two windows that overlap, or None."""
    spans: list[tuple[int, int, int]] = []
    for index, (start, end) in enumerate(windows):
        a, b = day_seconds(start), day_seconds(end)
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
