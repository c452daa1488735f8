"""``orchestrator history``: cost and tokens per run, with totals per role and per day."""

from __future__ import annotations

import sys
from datetime import date, datetime
from pathlib import Path
from typing import Any

from rich.console import Console as RichConsole
from rich.table import Table

from orchestrator.core.errors import UsageError
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
        memos = row.get("memos") or []
        runs.append({
            "run_id": row["run_id"], "role": row["role"], "memo": memos[0] if memos else None,
            "memo_id": (row.get("memo_ids") or [None])[0], "state": row["state"], "backend": row.get("backend"),
            "attempt": row.get("attempt"), "cost_usd": row.get("cost_usd"), "input_tokens": row.get("input_tokens"),
            "output_tokens": row.get("output_tokens"), "num_turns": row.get("num_turns"),
            "session_id": row.get("session_id"), "is_error": bool(row["is_error"]) if row.get("is_error") is not None else None,
            "started_at": row.get("started_at"), "ended_at": row.get("ended_at"),
        })  # fmt: skip
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


def print_human(report: dict[str, Any]) -> None:
    console = RichConsole(file=sys.stdout, width=160 if not sys.stdout.isatty() else None)
    table = Table(title="runs", title_justify="left")
    for col in ("run", "role", "memo", "state", "backend", "cost $", "in tok", "out tok", "turns", "started"):
        table.add_column(col)
    for run in report["runs"]:
        cost = run["cost_usd"]
        table.add_row(str(run["run_id"]), run["role"], run.get("memo_id") or run.get("memo") or "", run["state"],
                      run.get("backend") or "", "" if cost is None else f"{cost:.4f}", str(run.get("input_tokens") or ""),
                      str(run.get("output_tokens") or ""), str(run.get("num_turns") or ""), (run.get("started_at") or "")[:19])
    console.print(table)
    for title, key in (("per role", "by_role"), ("per day", "by_day")):
        totals = Table(title=title, title_justify="left")
        for col in (title.split()[1], "runs", "cost $", "in tok", "out tok"):
            totals.add_column(col)
        for name, entry in report["totals"][key].items():
            totals.add_row(name, str(entry["runs"]), f"{entry['cost_usd']:.4f}", str(entry["input_tokens"]),
                           str(entry["output_tokens"]))
        console.print(totals)
    console.print(f"total: {report['totals']['runs']} runs, ${report['totals']['cost_usd']:.4f}")
