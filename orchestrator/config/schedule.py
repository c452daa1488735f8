"""The schedule's keys in ``roles.yaml``: ``timezone`` at the top, ``wake``, ``tasks``, ``signals`` and
``preflight`` in a role. Each is checked at load time, so a bad time, an unknown weekday or time zone, an
empty or overlapping window, ``every: 0``, a ``first`` other than now or next (or on a ``once`` task), a reused
task name or a signal that cannot run is a start-up error naming its key (exit 2) before any memo moves."""

from __future__ import annotations

import contextlib
import os
import shutil
from datetime import UTC, datetime, time, tzinfo
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from orchestrator.config import when
from orchestrator.core.units import Duration, Strict

RULE_KEYS = ("daily", "weekly", "every", "once")


def _first(value: Any) -> Any:
    if value not in (when.FIRST_NOW, when.FIRST_NEXT):
        shown = str(value).lower() if isinstance(value, bool) or value is None else repr(value)
        raise ValueError(f"expected now or next (when a task never done is first due), got {shown}")
    return value


First = Annotated[Literal["now", "next"], BeforeValidator(_first)]  # when a task never done is first due


def zone(name: str | None) -> tzinfo:
    """The team's time zone: an IANA name, or the machine's local zone when none is configured."""
    if name is None:
        return local_zone()
    return ZoneInfo(name)


def local_zone() -> tzinfo:
    """The machine's zone with its rules (``$TZ``, else ``/etc/localtime``), so a daily 21:00 stays at 21:00 across
    a DST change; the current fixed offset only when neither names a zone (a POSIX ``TZ`` such as ``JST-9``)."""
    fixed = datetime.now().astimezone().tzinfo or UTC
    env = os.environ.get("TZ")
    if env is not None:
        try:
            return ZoneInfo(env.removeprefix(":"))
        except (ZoneInfoNotFoundError, ValueError, OSError):
            return fixed
    with contextlib.suppress(ZoneInfoNotFoundError, ValueError, OSError):
        target = os.path.realpath("/etc/localtime")
        if "/zoneinfo/" in target:
            return ZoneInfo(target.split("/zoneinfo/", 1)[1])
        with open("/etc/localtime", "rb") as handle:
            return ZoneInfo.from_file(handle, key="localtime")
    return fixed


def check_timezone(name: str | None) -> str | None:
    """``timezone:``: an IANA name such as Asia/Tokyo."""
    if name is not None:
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"expected a time zone's IANA name such as Asia/Tokyo or UTC, got {name!r}") from None
    return name


class WakeSettings(Strict):
    """``wake:`` of a role: its heartbeat and how a wake picks."""

    every: Duration | None = None
    max_tasks: int = Field(2, ge=1)
    skip_when_idle: bool = True
    quiet_hours: str | list[str] | None = None
    first: First = "now"  # the role's tasks that do not say their own `first`

    @field_validator("every")
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError("expected a heartbeat longer than 0 (omit `every` for a role woken only by due tasks)")
        return value

    @field_validator("quiet_hours")
    @classmethod
    def _windows(cls, value: str | list[str] | None) -> str | list[str] | None:
        windows = [when.parse_window(w) for w in ([value] if isinstance(value, str) else value or [])]
        overlap = when.window_overlap(windows)
        if overlap is not None:
            assert isinstance(value, list)
            raise ValueError(f"the windows {value[overlap[0]]!r} and {value[overlap[1]]!r} overlap; merge them")
        return value

    @property
    def windows(self) -> list[tuple[time, time]]:
        """The quiet-hours windows, parsed."""
        value = self.quiet_hours
        return [when.parse_window(w) for w in ([value] if isinstance(value, str) else value or [])]


class TaskSettings(Strict):
    """One task: exactly one of ``daily``, ``weekly``, ``every``, ``once``, and its ``text``."""

    daily: str | None = None
    weekly: str | None = None
    every: Duration | None = Field(None, gt=0)
    once: str | None = None
    text: str = ""
    priority: int | None = None
    in_quiet_hours: bool = False
    first: First | None = None  # None: the role's `wake.first`, else now

    @field_validator("daily")
    @classmethod
    def _daily(cls, value: str | None) -> str | None:
        if value is not None:
            when.parse_time_of_day(value)
        return value

    @field_validator("weekly")
    @classmethod
    def _weekly(cls, value: str | None) -> str | None:
        if value is not None:
            when.parse_weekly(value)
        return value

    @field_validator("once")
    @classmethod
    def _once(cls, value: str | None) -> str | None:
        if value is not None:
            when.parse_moment(value, UTC)
        return value

    @model_validator(mode="after")
    def _one_rule(self) -> TaskSettings:
        given = [key for key in RULE_KEYS if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(
                "expected exactly one of the keys daily, weekly, every, once in a task, got "
                + (" and ".join(given) if given else "none")
            )
        return self

    @field_validator("first")
    @classmethod
    def _not_once(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("once") is not None:
            raise ValueError("applies to daily, weekly and every tasks only; a once task is due at its own time")
        return value

    def rule(self, tz: tzinfo, wake: WakeSettings | None = None) -> when.Rule:
        """The parsed rule, its times in ``tz``; its ``first`` is the task's, else the role's ``wake.first``."""
        first = self.first or (wake.first if wake is not None else when.FIRST_NOW)
        if self.daily is not None:
            return when.Rule("daily", at=when.parse_time_of_day(self.daily), first=first)
        if self.weekly is not None:
            weekday, at = when.parse_weekly(self.weekly)
            return when.Rule("weekly", at=at, weekday=weekday, first=first)
        if self.every is not None:
            return when.Rule("every", period=self.every, first=first)
        assert self.once is not None
        return when.Rule("once", when=when.parse_moment(self.once, tz))

    @property
    def kind(self) -> str:
        return next(key for key in RULE_KEYS if getattr(self, key) is not None)

    @property
    def rank(self) -> int:
        """Its priority: ``priority`` when given, else the default of its kind."""
        return self.priority if self.priority is not None else when.DEFAULT_PRIORITY[self.kind]


class SignalSettings(Strict):
    """A signal: a command whose trimmed standard output is its news."""

    command: list[str] = Field(min_length=1)
    timeout: Duration = Field(30.0, gt=0)


def resolve(argv0: str, root: Path) -> str | None:
    """The program a command would run (relative paths from the root), or None."""
    if os.sep in argv0:
        path = Path(argv0) if os.path.isabs(argv0) else root / argv0
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(argv0)


def check_team(path: Path, root: Path, roles: dict[str, Any]) -> str | None:
    """The cross-key checks pydantic cannot make alone; a one-line error naming the key, or None."""
    for name, role in roles.items():
        for signal, spec in (role.signals or {}).items():
            if resolve(spec.command[0], root) is None:
                where = "is not an executable file" if os.sep in spec.command[0] else "not found on PATH"
                return (
                    f"{path}: roles.{name}.signals.{signal}.command: {spec.command[0]!r} {where}; "
                    "fix the path or make it executable"
                )
    return None


class ScheduleKeys(Strict):
    """A role's keys for waking on a schedule (``orchestrator/schedule``)."""

    wake: WakeSettings | None = None
    tasks: dict[str, TaskSettings] = Field(default_factory=dict)
    signals: dict[str, SignalSettings] = Field(default_factory=dict)
    preflight: list[Annotated[list[str], Field(min_length=1)]] = Field(default_factory=list)
    preflight_reuse: Duration = 60.0  # a passed preflight is not run again before a run for this long
