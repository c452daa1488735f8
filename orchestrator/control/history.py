"""``orchestrator history``: cost and tokens per run, with totals per role and per day.

Without ``--since``, ``--limit`` or ``--all`` it shows the last ``DEFAULT_DAYS`` days, and says how many older
runs there are and how to see them: a team woken every half hour makes tens of thousands of runs a year,
and reading them all was most of the command's time. Every filter is answered by an index of the store.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from orchestrator.core.errors import UsageError
from orchestrator.core.view import RunView
from orchestrator.store import RUN_TIME, Store

DEFAULT_DAYS = 7


def _moment(option: str, value: str | None, end_of_day: bool = False) -> str | None:
    """A date or ISO time in the shape of the stored times (``store.now_iso``), which are compared with it as
    strings; a date alone means its start (``end_of_day``: the start of the next day, for ``--until``)."""
    if not value:
        return None
    try:
        if len(value) == 10:
            day = date.fromisoformat(value) + timedelta(days=1 if end_of_day else 0)
            return datetime.combine(day, datetime.min.time()).astimezone().isoformat(timespec="milliseconds")
        return datetime.fromisoformat(value).astimezone().isoformat(timespec="milliseconds")
    except ValueError:
        raise UsageError(f"{option} {value!r}: expected a date like 2026-11-30 or an ISO time") from None


def collect(
    root: Path,
    role: str | None = None,
    since: str | None = None,
    until: str | None = None,
    limit: int | None = None,
    every: bool = False,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The runs asked for with their figures, totals ``by_role`` and ``by_day`` (cost_usd and runs), and the
    ``window`` they were taken from (with ``older``: how many runs the default window left out, and ``note``)."""
    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: expected a whole number >= 1")
    start, end = _moment("--since", since), _moment("--until", until, end_of_day=True)
    default = start is None and limit is None and not every
    if default:
        upto = datetime.fromisoformat(end) if end else (now or datetime.now().astimezone())
        start = (upto - timedelta(days=DEFAULT_DAYS)).isoformat(timespec="milliseconds")
    db = root / ".orchestrator" / "state.db"
    rows: list[dict[str, Any]] = []
    older = 0
    if db.exists():
        store = Store(db, readonly=True)
        try:
            rows = store.history(role=role, since=start, until=end, limit=limit)
            if default:
                older = _older(store, role, start)
        finally:
            store.close()
    report = _totals(rows)
    report["window"] = {
        "since": start,
        "until": end,
        "limit": limit,
        "role": role,
        "default": default,
        "older": older,
        "note": (
            f"the last {DEFAULT_DAYS} days; {older} older run(s) not shown: "
            "`--since DATE`, `--limit N` or `--all` shows them"
            if default and older
            else None
        ),
    }
    return report


def _older(store: Store, role: str | None, before: str | None) -> int:
    query, args = f"SELECT COUNT(*) FROM runs WHERE {RUN_TIME} < ?", [before]
    if role:
        query += " AND role = ?"
        args.append(role)
    return int(store.db.execute(query, args).fetchone()[0])


def _totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
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
