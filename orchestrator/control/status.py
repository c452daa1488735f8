"""``orchestrator status``: live state through the control channel, else what the database recorded."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console as RichConsole
from rich.table import Table

from orchestrator.control import channel as control
from orchestrator.core.errors import NotRunningError
from orchestrator.core.states import UNFINISHED
from orchestrator.store import Store



def _from_row(row: dict[str, Any]) -> dict[str, Any]:
    memos = row.get("memos") or []
    ids = row.get("memo_ids") or []
    return {
        "run_id": row["run_id"],
        "role": row["role"],
        "memo": memos[0] if memos else None,
        "memo_id": ids[0] if ids else None,
        "memos": memos,
        "subject": row.get("subject"),
        "state": row["state"],
        "pid": row.get("pid"),
        "attempt": row.get("attempt"),
        "started_at": row.get("started_at"),
        "ended_at": row.get("ended_at"),
        "next_attempt_at": row.get("next_attempt_at"),
        "exit_code": row.get("exit_code"),
        "reason": row.get("reason"),
        "backend": row.get("backend"),
        "cost_usd": row.get("cost_usd"),
        "input_tokens": row.get("input_tokens"),
        "output_tokens": row.get("output_tokens"),
        "log": row.get("log_path"),
    }


def collect(root: Path) -> dict[str, Any]:
    """The status of ``root`` as the JSON of ``status --json``."""
    try:
        snap = control.call(root, "status", timeout=10)
        snap["recent"] = [_from_row(r) for r in snap.get("recent", [])]
        return snap
    except NotRunningError:
        pass
    db = root / ".orchestrator" / "state.db"
    snap: dict[str, Any] = {"running": False, "pid": None, "root": str(root), "runs": [], "recent": []}
    if db.exists():
        store = Store(db, readonly=True)
        try:
            snap["runs"] = [_from_row(r) for r in store.runs_in_states(s.value for s in UNFINISHED)]
            snap["recent"] = [_from_row(r) for r in store.recent_runs(20)]
        finally:
            store.close()
    return snap


def print_human(snap: dict[str, Any]) -> None:
    console = RichConsole(file=sys.stdout, width=160 if not sys.stdout.isatty() else None)
    if snap["running"]:
        console.print(f"orchestrator running for {snap['root']} (pid {snap['pid']})"
                      + (f", ENDING ({snap['ending']})" if snap.get("ending") else ""))
    else:
        console.print(f"no orchestrator running for {snap['root']}" + (" (runs below are as last recorded)" if snap["runs"] else ""))
    if snap.get("runs"):
        table = Table(title="current runs", title_justify="left")
        for col in ("run", "role", "memo", "state", "attempt", "pid", "elapsed / next", "cost $", "subject / activity"):
            table.add_column(col)
        for run in snap["runs"]:
            when = f"{run['elapsed']:.0f}s" if run.get("elapsed") is not None else (run.get("next_attempt_at") or "")
            about = run.get("subject") or ""
            if run.get("activity"):
                about = f"{about} | {run['activity']}"
            table.add_row(str(run["run_id"]), run["role"], run.get("memo_id") or run.get("memo") or "", run["state"],
                          str(run.get("attempt") or ""), str(run.get("pid") or ""), when, _money(run.get("cost_usd")),
                          about)  # fmt: skip
        console.print(table)
    queued = snap.get("queued") or {}
    if queued:
        console.print("queued: " + ", ".join(f"{role} {n}" for role, n in queued.items()))
    if snap.get("crash_counts"):
        console.print("critical roles, crashes in a row: " + ", ".join(f"{r} {n}" for r, n in snap["crash_counts"].items()))
    if snap.get("budget_blocks"):
        for role, why in snap["budget_blocks"].items():
            console.print(f"paused by budget: {role}: {why}")
    if snap.get("recent"):
        table = Table(title="recent", title_justify="left")
        for col in ("run", "role", "memo", "state", "exit", "ended", "cost $", "tokens in/out", "reason"):
            table.add_column(col)
        for run in snap["recent"]:
            code = run.get("exit_code")
            tokens = ""
            if run.get("input_tokens") is not None or run.get("output_tokens") is not None:
                tokens = f"{run.get('input_tokens') or 0}/{run.get('output_tokens') or 0}"
            table.add_row(str(run["run_id"]), run["role"], run.get("memo_id") or run.get("memo") or "", run["state"],
                          "" if code is None else str(code), (run.get("ended_at") or "")[:19],
                          _money(run.get("cost_usd")), tokens, run.get("reason") or "")  # fmt: skip
        console.print(table)


def _money(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"
