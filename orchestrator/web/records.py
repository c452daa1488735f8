"""Reads of the database file for the history page: one page of runs by key, and spend per day and role.

Paged by ``run_id`` (the primary key), so the newest page of 100,000 runs costs what the newest page of 100
does; each call opens its own read-only connection (a worker thread's, never the loop's).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from orchestrator.core.view import RunView
from orchestrator.store import RUN_TIME, Store

PAGE = 100
CHART_DAYS = 30


def page(state_db: Path, role: str | None, before: int | None, limit: int = PAGE) -> dict[str, Any]:
    """The ``limit`` runs before run ``before`` (None: the newest), newest first, and the key of the next page."""
    if not state_db.exists():
        return {"runs": [], "next_before": None}
    store = Store(state_db, readonly=True)
    try:
        query, args = "SELECT * FROM runs WHERE 1=1", list[Any]()
        if before is not None:
            query += " AND run_id < ?"
            args.append(before)
        if role:
            query += " AND role = ?"
            args.append(role)
        rows = store.db.execute(query + " ORDER BY run_id DESC LIMIT ?", [*args, limit + 1]).fetchall()
        views = [RunView.from_row(_decoded(r)).to_history_json() | {"reason": r["reason"]} for r in rows[:limit]]
    finally:
        store.close()
    more = len(rows) > limit
    return {"runs": views, "next_before": views[-1]["run_id"] if more and views else None}


def _decoded(row: Any) -> dict[str, Any]:
    """A ``runs`` row with its JSON lists read (as ``Store.run`` gives one)."""
    out = dict(row)
    for key in ("memos", "memo_ids"):
        if isinstance(out.get(key), str):
            out[key] = json.loads(out[key])
    return out


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
