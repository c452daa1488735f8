"""``up``'s live view on a terminal: the agents, the queues, the pauses and the last events of one snapshot."""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing: see tests/test_client_imports.py
if TYPE_CHECKING:
    from typing import Any

    from rich.console import Group


def render_view(snap: dict[str, Any]) -> Group:
    """The live view from a status snapshot, whose runs are ``RunView``s or their JSON."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from orchestrator.core.view import RunView

    table = Table(title=f"agents ({snap['limits']['running']}/{snap['limits']['max_concurrent']} running)", expand=True)
    for col in ("run", "role", "memo", "subject", "state", "attempt", "elapsed", "pid", "activity / cost"):
        table.add_column(col, overflow="ellipsis", no_wrap=True)
    for run in map(RunView.of, snap["runs"]):
        style = {"running": "green", "cancelling": "red", "timing_out": "red", "retry_wait": "yellow"}.get(
            run.state, ""
        )
        elapsed = f"{run.elapsed:.0f}s" if run.elapsed is not None else ""
        if run.state == "retry_wait" and run.next_attempt_at:
            elapsed = f"next {run.next_attempt_at[11:19]}"
        activity = run.activity or ""
        if run.cost_usd is not None:
            activity = f"${run.cost_usd:.4f} {activity}"
        table.add_row(
            str(run.run_id),
            run.role,
            run.label,
            run.subject or "",
            Text(run.state, style=style),
            str(run.attempt),
            elapsed,
            str(run.pid or ""),
            activity,
        )
    queued = ", ".join(f"{role} {n}" for role, n in snap["queued"].items()) or "none"
    extra = []
    if snap.get("crash_counts"):
        extra.append("crashes in a row: " + ", ".join(f"{r} {n}" for r, n in snap["crash_counts"].items()))
    if snap.get("budget_blocks"):
        extra.append("paused by budget: " + "; ".join(f"{r}: {w}" for r, w in snap["budget_blocks"].items()))
    extra += pause_lines(snap)
    if snap.get("ending"):
        extra.append(f"ENDING ({snap['ending']}): nothing new starts")
    parts: list[Any] = [table, Text(f"queued: {queued}")]
    parts += [Text(line, style="bold yellow") for line in extra]
    parts.append(Text("last events:", style="bold"))
    parts += [Text(line) for line in snap.get("events", [])]
    return Group(*parts)


def pause_lines(snap: dict[str, Any]) -> list[str]:
    """``paused: usage limit (five_hour) until 14:10``, one line per account a usage limit paused."""

    def clock(stamp: str) -> str:
        return stamp[11:16] if len(stamp) >= 16 else stamp

    lines = []
    for account, pause in (snap.get("paused") or {}).items():
        if pause.get("until"):
            when = f"until {clock(pause['until'])}"
        elif pause.get("probing") is not None:
            when = f"until a probe run gets through (run {pause['probing']} probes now)"
        elif pause.get("probe_at"):
            when = f"until a probe run gets through (next probe at {clock(pause['probe_at'])})"
        else:
            when = "until a probe run gets through (the next run to start probes)"
        roles = ", ".join(pause.get("roles") or [])
        lines.append(f"paused: {pause.get('reason')} {when}; account {account}: {roles}")
    return lines
