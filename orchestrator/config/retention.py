"""The ``retention:`` key of ``roles.yaml``: how long each kind of finished work is kept, or ``keep`` (never removed).

Durations are measured from the end of a run (its log, its transcript folder, its record) or, for a memo, from
the time the orchestrator moved it into its folder (the memo index; its modification time when not indexed).
Memo folders are the user's and default to ``keep``. The record of a run must outlive its files: a run's
age is read from its record, so a file whose record had gone could never be dated again.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, ValidationInfo, field_validator

from orchestrator.core.units import Expect, Strict, parse_duration

DAY = 86400.0
KEEP = "keep"
KEEP_EXPECTED = "a duration such as 30d or 12h, or keep"


def parse_keep(value: Any) -> float | None:
    """Seconds from a duration (``30d``, ``12h``, a number of seconds), or None for ``keep``."""
    if value is None or (isinstance(value, str) and value.strip().lower() == KEEP):
        return None
    try:
        seconds = parse_duration(value)
    except ValueError:
        raise ValueError(f"expected {KEEP_EXPECTED}, got {value!r}") from None
    if seconds <= 0:
        raise ValueError(f"expected a duration longer than 0 (such as 30d or 12h), or keep, got {value!r}")
    return seconds


#: a limit in seconds, or None for ``keep``
Keep = Annotated[float | None, BeforeValidator(parse_keep), Expect(KEEP_EXPECTED)]

#: the memo folders a rule may name, as they are on disk
MEMO_FOLDERS = ("archive", "failed", "cancelled", "held")


def describe(seconds: float | None) -> str:
    """A limit as a person writes it: ``keep``, ``30d``, ``12h``, ``90s``."""
    if seconds is None:
        return KEEP
    for unit, size in (("d", DAY), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


class RetentionSettings(Strict):
    """Every key under ``retention:``; all have defaults, so the key may be left out."""

    logs: Keep = 30 * DAY  # .orchestrator/logs/<run>-<role>.log, from the run's end
    transcripts: Keep = 90 * DAY  # .orchestrator/runs/<run>/ (an SDK run's transcript and event files)
    runs: Keep = 400 * DAY  # the run's record in the database (history, status, trace read it)
    archive: Keep = None  # memo/<role>/archive/
    failed: Keep = None  # memo/<role>/failed/ (with each memo's .reason)
    cancelled: Keep = None  # memo/<role>/cancelled/
    held: Keep = None  # memo/<role>/held/ (memos the loop breaker held and nobody released)
    workspaces: Keep = 14 * DAY  # a workspace's folder (orchestrator/workspaces), idle since its last run ended

    @field_validator("runs")
    @classmethod
    def _record_outlives_files(cls, runs: float | None, info: ValidationInfo) -> float | None:
        if runs is not None and runs < DAY:
            raise ValueError(
                f"shorter than a day ({describe(runs)}): a daily budget counts the day's runs from their records, so "
                "a restart would forget what the day spent; make it at least 1d or keep"
            )
        for name in ("logs", "transcripts"):
            files = info.data.get(name)
            if runs is not None and files is not None and files > runs:
                raise ValueError(
                    f"shorter than {name} ({describe(files)}): a run's record must outlive its files (a file "
                    f"whose record is gone can never be dated again); make it at least {describe(files)} or keep"
                )
        return runs

    def folder_limit(self, folder: str) -> float | None:
        """The limit of one memo folder (``archive``, ``failed``, ``cancelled``, ``held``)."""
        return getattr(self, folder) if folder in MEMO_FOLDERS else None

    def rules(self) -> dict[str, str]:
        """Every rule as a person writes it, for ``gc --json`` and its lines."""
        return {name: describe(getattr(self, name)) for name in RetentionSettings.model_fields}
