"""The ``memory:`` key of ``roles.yaml``: caps, the prompt budget, retention and the compaction times."""

from __future__ import annotations

import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator

from orchestrator.config.when import WEEKDAYS
from orchestrator.core.units import Strict

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


class PromptBudget(Strict):
    """How much of the prompt ``$memory`` may take."""

    lines: int = Field(450, ge=1)
    bytes: int = Field(32 * 1024, ge=1)


class MemorySettings(Strict):
    """Every key under ``memory:``; all have defaults, so the key may be left out."""

    curator: str | None = None  # the role that writes the summaries and may reach every role's memory
    core_max: int = Field(100, ge=1)
    entry_max_bytes: int = Field(2048, ge=1)
    prompt_budget: PromptBudget = Field(default_factory=PromptBudget)
    daily_days: int = Field(30, ge=1)
    weekly_days: int = Field(365, ge=1)
    weekly_at: str = "sun 23:00"
    monthly_at: str = "1 00:30"
    timezone: str | None = None

    @field_validator("weekly_at")
    @classmethod
    def _weekly(cls, value: str) -> str:
        parse_weekly_at(value)
        return value

    @field_validator("monthly_at")
    @classmethod
    def _monthly(cls, value: str) -> str:
        parse_monthly_at(value)
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"expected a time zone's IANA name such as Asia/Tokyo, got {value!r}") from None
        return value

    def zone(self) -> ZoneInfo | None:
        """The team's zone, or None for the machine's local zone."""
        return ZoneInfo(self.timezone) if self.timezone else None
