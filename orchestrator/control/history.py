"""``orchestrator history``: cost and tokens per run, with totals per role and per day.

A page of runs and the totals of a period. The period is the last ``DEFAULT_DAYS`` days unless ``--since``,
``--until``, ``--limit`` or ``--all`` says otherwise; the page is its newest ``DEFAULT_LIMIT`` runs (``--limit N``:
N; ``--all``: every one), and ``--before RUN_ID`` (``next_before`` of a page) the ones before that run. The totals
are summed by the database over the whole period, so a team of a year reads in the time of a week; one line
says what was left out and how to see it. Every filter is answered by an index of the store; the dashboard's
history page asks ``page`` the same way.
"""

from __future__ import annotations

import sqlite3
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from orchestrator.core.errors import UsageError
from orchestrator.core.view import RunView
from orchestrator.store import RUN_TIME, Store
from orchestrator.store.runs import run_row

DEFAULT_DAYS = 7
DEFAULT_LIMIT = 50  # runs a page shows unless --limit or --all says otherwise


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
    before: int | None = None,
) -> dict[str, Any]:
    """A page of runs, oldest first, with the ``totals`` of their period (``by_role``, ``by_day``: cost_usd, runs and
    tokens), the ``window`` (the period, what was left out, and ``note``: one line saying how to see it) and
    ``next_before``: the cursor of the next, older page (None at the last)."""
    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: expected a whole number >= 1")
    if before is not None and before < 1:
        raise UsageError(f"--before {before}: expected a run id (a whole number >= 1)")
    start, end = _moment("--since", since), _moment("--until", until, end_of_day=True)
    default = start is None and limit is None and not every
    if default:
        upto = datetime.fromisoformat(end) if end else (now or datetime.now().astimezone())
        start = (upto - timedelta(days=DEFAULT_DAYS)).isoformat(timespec="milliseconds")
    size = None if every else (limit or DEFAULT_LIMIT)
    db = root / ".orchestrator" / "state.db"
    rows: list[dict[str, Any]] = []
    totals = _totals([])
    older, next_before = 0, None
    if db.exists():
        store = Store(db, readonly=True)
        try:
            rows, next_before = page(store.db, role=role, since=start, until=end, before=before, limit=size)
            columns = {row[1] for row in store.db.execute("PRAGMA table_info(runs)")}  # `up` may not have migrated it
            totals = _totals(_sums(store.db, role, start, end, "cost_estimated" in columns))
            if default:
                older = _older(store, role, start)
        finally:
            store.close()
    runs = [RunView.from_row(row).to_history_json() for row in rows]
    left = totals["runs"] - len(runs)
    window = {
        "since": start,
        "until": end,
        "limit": size,
        "role": role,
        "default": default,
        "before": before,
        "shown": len(runs),
        "not_shown": left,
        "older": older,
    }
    window["note"] = _note(window, totals["runs"], next_before)
    return {"runs": runs, "totals": totals, "window": window, "next_before": next_before}


def page(
    db: sqlite3.Connection,
    *,
    role: str | None = None,
    since: str | None = None,
    until: str | None = None,
    before: int | None = None,
    limit: int | None = DEFAULT_LIMIT,
) -> tuple[list[dict[str, Any]], int | None]:
    """The newest ``limit`` runs of the period (before run ``before``), oldest first, each a ``runs`` row with its
    JSON lists read; and the run id the next page starts before (None: no older run in the period). Ordered by
    the indexed time, then the id, so the index serves the order and a page of a year costs what one of a day does."""
    where, args = _period(role, since, until)
    if before is not None:
        found = db.execute(f"SELECT {RUN_TIME} FROM runs WHERE run_id = ?", (before,)).fetchone()
        if found is None:  # a run retention removed: the runs with a smaller id
            where.append("run_id < ?")
            args.append(before)
        else:
            where.append(f"{RUN_TIME} <= ? AND ({RUN_TIME} < ? OR run_id < ?)")
            args += [found[0], found[0], before]
    query = f"SELECT * FROM runs WHERE {' AND '.join(where)} ORDER BY {RUN_TIME} DESC, run_id DESC"
    if limit is not None:
        query += " LIMIT ?"
        args.append(limit + 1)
    got = [run_row(row) for row in db.execute(query, args).fetchall()]
    more = limit is not None and len(got) > limit
    got = got[:limit] if limit is not None else got
    return got[::-1], (int(got[-1]["run_id"]) if more and got else None)


def _period(role: str | None, since: str | None, until: str | None) -> tuple[list[str], list[Any]]:
    """The SQL conditions (and their arguments) of the runs of ``role`` (None: every role) in the period."""
    where, args = ["1=1"], list[Any]()
    if role:
        where.append("role = ?")
        args.append(role)
    if since:
        where.append(f"{RUN_TIME} >= ?")
        args.append(since)
    if until:
        where.append(f"{RUN_TIME} < ?")
        args.append(until)
    return where, args


def _sums(
    db: sqlite3.Connection, role: str | None, since: str | None, until: str | None, marked: bool = True
) -> list[tuple[Any, ...]]:
    """(role, day, runs, cost, input tokens, output tokens, whether some cost is estimated) of the period, summed
    by the database."""
    where, args = _period(role, since, until)
    estimated = "COALESCE(MAX(cost_estimated), 0)" if marked else "0"  # (not ``marked``: a record before the mark)
    return db.execute(
        f"SELECT role, substr({RUN_TIME}, 1, 10), COUNT(*), COALESCE(SUM(cost_usd), 0), "
        f"COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), {estimated} "
        # the period's range of the time index, not a scan of every run by role (what SQLite picks for the GROUP BY)
        f"FROM runs {'INDEXED BY runs_time ' if since and not role else ''}WHERE {' AND '.join(where)} "
        "GROUP BY 1, 2 ORDER BY 2, 1",
        args,
    ).fetchall()


def _note(window: dict[str, Any], total: int, next_before: int | None) -> str | None:
    """One line: what the page leaves out of the period and before it, and how to see it (None: nothing)."""
    older, left = window["older"], window["not_shown"]
    if not older and not left:
        return None
    period = f"the last {DEFAULT_DAYS} days" if window["default"] else "the period asked for"
    where = f" before run {window['before']}" if window["before"] else ""
    if left:
        parts = [f"{window['shown']} run(s){where} shown of the {total} of {period} (the totals are of all {total})"]
    else:
        parts = [f"all {total} run(s) of {period} shown"]
    if older:
        parts.append(f"{older} older run(s) not shown")
    more = "`--limit N`, `--all` or `--since DATE` shows more"
    if next_before is not None:
        more += f"; `--before {next_before}` the next page"
    return "; ".join(parts) + ": " + more


def _older(store: Store, role: str | None, before: str | None) -> int:
    query, args = f"SELECT COUNT(*) FROM runs WHERE {RUN_TIME} < ?", [before]
    if role:
        query += " AND role = ?"
        args.append(role)
    return int(store.db.execute(query, args).fetchone()[0])


def _totals(sums: list[tuple[Any, ...]]) -> dict[str, Any]:
    by_role: dict[str, dict[str, Any]] = {}
    by_day: dict[str, dict[str, Any]] = {}
    for role, day, runs, cost, tokens_in, tokens_out, estimated in sums:
        for bucket, key in ((by_role, role), (by_day, day or "")):
            entry = bucket.setdefault(key, {"cost_usd": 0.0, "runs": 0, "input_tokens": 0, "output_tokens": 0})
            if estimated:  # some of its cost is an estimate from `prices`
                entry["cost_estimated"] = True
            entry["cost_usd"] = round(entry["cost_usd"] + cost, 6)
            entry["runs"] += runs
            entry["input_tokens"] += tokens_in
            entry["output_tokens"] += tokens_out
    by_role = dict(sorted(by_role.items()))
    total = round(sum(entry["cost_usd"] for entry in by_day.values()), 6)
    runs = sum(e["runs"] for e in by_day.values())
    estimated = any(e.get("cost_estimated") for e in by_day.values())
    return {"by_role": by_role, "by_day": by_day, "cost_usd": total, "runs": runs, "cost_estimated": estimated}
