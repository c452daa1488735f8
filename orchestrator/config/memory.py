"""The ``memory:`` key of ``roles.yaml``: caps, the prompt budget, retention and the compaction times."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator

from orchestrator.core.calendar import TEAM, MonthlyAt, WeeklyAt, parse_monthly_at, parse_weekly_at  # noqa: F401 - memory's keys are read with them
from orchestrator.core.units import Strict


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
