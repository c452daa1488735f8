"""The memory's words that every layer reads, with the standard library only: the ``team`` part of memory and the
weekly and monthly times people write for its summaries (``sun 23:00``, ``1 00:30``).

Here, below ``config``, so that an agent's ``orchestrator memory ...`` call reads them without loading the
configuration's models.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
TEAM = "team"  # the memory every role shares: a part beside the roles' own, not a role
_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


@dataclass(frozen=True)
class WeeklyAt:
    weekday: int  # 0 = Monday
    hour: int
    minute: int


@dataclass(frozen=True)
class MonthlyAt:
    day: int
    hour: int
    minute: int


def _clock(text: str, what: str) -> tuple[int, int]:
    match = _CLOCK.match(text)
    if not match:
        raise ValueError(f"expected {what} with a time such as 23:00, got {text!r}")
    return int(match.group(1)), int(match.group(2))


def parse_weekly_at(text: str) -> WeeklyAt:
    """``sun 23:00`` -> weekday and time."""
    parts = str(text).lower().split()
    if len(parts) != 2 or parts[0][:3] not in WEEKDAYS:
        raise ValueError(f"expected a weekday and a time such as 'sun 23:00', got {text!r}")
    hour, minute = _clock(parts[1], "a weekday")
    return WeeklyAt(WEEKDAYS.index(parts[0][:3]), hour, minute)


def parse_monthly_at(text: str) -> MonthlyAt:
    """``1 00:30`` -> day of the month (1-28) and time."""
    parts = str(text).split()
    if len(parts) != 2 or not parts[0].isdigit() or not 1 <= int(parts[0]) <= 28:
        raise ValueError(f"expected a day of the month (1-28) and a time such as '1 00:30', got {text!r}")
    hour, minute = _clock(parts[1], "a day of the month")
    return MonthlyAt(int(parts[0]), hour, minute)
