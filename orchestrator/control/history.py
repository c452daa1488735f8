"""``orchestrator history``: cost and tokens per run, with totals per role and per day."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from typing import Any

from orchestrator.core.errors import UsageError
from orchestrator.core.view import RunView
from orchestrator.store import Store


def _since(value: str | None) -> str | None:
    if not value:
        return None
    try:
        # the same shape as the stored times (``store.now_iso``), which are compared with it as strings
        if len(value) == 10:
            day = datetime.combine(date.fromisoformat(value), datetime.min.time())
            return day.astimezone().isoformat(timespec="milliseconds")
        return datetime.fromisoformat(value).astimezone().isoformat(timespec="milliseconds")
    except ValueError:
        raise UsageError(f"--since {value!r}: expected a date like 2026-11-30 or an ISO time") from None


def collect(root: Path, role: str | None = None, since: str | None = None) -> dict[str, Any]:
    """Every run with its figures, and totals ``by_role`` and ``by_day`` (cost_usd and runs)."""
    db = root / ".orchestrator" / "state.db"
    rows: list[dict[str, Any]] = []
    if db.exists():
        store = Store(db, readonly=True)
        try:
            rows = store.history(role=role, since=_since(since))
        finally:
            store.close()
    runs = []
    by_role: dict[str, dict[str, Any]] = {}
    by_day: dict[str, dict[str, Any]] = {}
    for row in rows:
        started = row.get("started_at") or row.get("created_at")
        runs.append(RunView.from_row(row).to_history_json())
        cost = row.get("cost_usd") or 0.0
        day = (started or "")[:10]
        for bucket, key in ((by_role, row["role"]), (by_day, day)):
            entry = bucket.setdefault(key, {"cost_usd": 0.0, "runs": 0, "input_tokens": 0, "output_tokens": 0})
            entry["cost_usd"] = round(entry["cost_usd"] + cost, 6)
            entry["runs"] += 1
            entry["input_tokens"] += row.get("input_tokens") or 0
            entry["output_tokens"] += row.get("output_tokens") or 0
    total = round(sum((r["cost_usd"] or 0.0) for r in runs), 6)
    return {"runs": runs, "totals": {"by_role": by_role, "by_day": by_day, "cost_usd": total, "runs": len(runs)}}
