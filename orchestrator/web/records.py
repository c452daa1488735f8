"""Reads of the database file for the history page: one page of runs by key, and spend per day and role.

Paged as ``orchestrator history`` pages (``--before RUN_ID``, ``control.history.page``): by the indexed time, so the
newest page of 100,000 runs costs what the newest page of 100 does; each call opens its own read-only
connection (a worker thread's, never the loop's).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from orchestrator.control import history
from orchestrator.core.view import RunView
from orchestrator.store import RUN_TIME, Store

PAGE = history.DEFAULT_LIMIT
CHART_DAYS = 30


def page(state_db: Path, role: str | None, before: int | None, limit: int = PAGE) -> dict[str, Any]:
    """The ``limit`` runs before run ``before`` (None: the newest), newest first, and the key of the next page: the
    pages of ``orchestrator history --before`` (``control.history.page``)."""
    if not state_db.exists():
        return {"runs": [], "next_before": None}
    store = Store(state_db, readonly=True)
    try:
        rows, next_before = history.page(store.db, role=role, before=before, limit=limit)
    finally:
        store.close()
    views = [RunView.from_row(row).to_history_json() | {"reason": row["reason"]} for row in reversed(rows)]
    return {"runs": views, "next_before": next_before}


def spend(state_db: Path, days: int = CHART_DAYS, now: datetime | None = None) -> dict[str, Any]:
    """Cost and runs per day (the last ``days``) and per role over those days."""
    if not state_db.exists():
        return {"by_day": {}, "by_role": {}}
    since = ((now or datetime.now().astimezone()) - timedelta(days=days)).isoformat(timespec="milliseconds")
    store = Store(state_db, readonly=True)
    try:
        day_rows = store.db.execute(
            f"SELECT substr({RUN_TIME}, 1, 10), COALESCE(SUM(cost_usd), 0), COUNT(*) FROM runs "
            f"WHERE {RUN_TIME} >= ? GROUP BY 1 ORDER BY 1",
            (since,),
        ).fetchall()
        role_rows = store.db.execute(
            f"SELECT role, COALESCE(SUM(cost_usd), 0), COUNT(*) FROM runs WHERE {RUN_TIME} >= ? GROUP BY 1 ORDER BY 1",
            (since,),
        ).fetchall()
    finally:
        store.close()
    return {
        "since": since,
        "by_day": {row[0]: {"cost_usd": round(row[1], 6), "runs": row[2]} for row in day_rows},
        "by_role": {row[0]: {"cost_usd": round(row[1], 6), "runs": row[2]} for row in role_rows},
    }
