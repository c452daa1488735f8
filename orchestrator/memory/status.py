"""What ``orchestrator status`` says of memory: how many entries past retention wait for which summary.

The same count as ``memory stats`` (``MemoryDB.retention`` without applying it),
asked of the supervisor while it runs and of the database directly when it does not.
A database that cannot be read is reported, never raised: status always answers.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.core.errors import MemoryUnavailableError
from orchestrator.memory.db import MemoryDB
from orchestrator.memory.db.schema import db_path

if TYPE_CHECKING:
    from orchestrator.config.memory import MemorySettings

WAIT = 0.5  # status never waits long for a writer's lock


def memory_status(state_dir: Path, settings: MemorySettings, now: datetime) -> dict[str, Any] | None:
    """``{"waiting_for_summary": {"daily 2026-W40": 5, ...}, "waiting": 5}``; None with no memory database.

    With a database that cannot be read: ``{"unavailable": "<the reason>"}``.
    """
    path = db_path(state_dir)
    if not path.exists():
        return None
    try:
        db = MemoryDB(path, create=False, timeout=WAIT)
        try:
            today = now.astimezone(settings.zone()).date()
            _, waiting = db.retention(today, settings.daily_days, settings.weekly_days, "", apply=False)
        finally:
            db.close()
    except MemoryUnavailableError as exc:
        return {"unavailable": str(exc)}
    return {"waiting_for_summary": dict(sorted(waiting.items())), "waiting": sum(waiting.values())}


def offline(root: Path) -> dict[str, Any] | None:
    """``memory_status`` for a project whose orchestrator is not running (None if its config cannot be read)."""
    from orchestrator.config import load_config
    from orchestrator.core.errors import ConfigError

    try:
        config = load_config(root)
    except ConfigError:
        return None
    return memory_status(config.state_dir, config.memory, datetime.now().astimezone())
