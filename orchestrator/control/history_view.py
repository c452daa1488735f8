"""``orchestrator history`` for people: the runs as a rich table, then the totals per role and per day."""

from __future__ import annotations

from typing import Any, TextIO

from orchestrator.console import money, print_rich


def print_history(report: dict[str, Any], stream: TextIO | None = None) -> None:
    """``orchestrator history`` for people: its runs, then totals per role and per day."""
    print_rich(history_view(report), stream)


def history_view(report: dict[str, Any]) -> list[Any]:
    """The parts of ``print_history``, in order (rich tables and the total line)."""
    from rich.table import Table

    from orchestrator.core.view import RunView

    table = Table(title="runs", title_justify="left")
    runs = [RunView.of(run) for run in report["runs"]]
    branches = any(run.branch for run in runs)  # a column only where a role works in workspaces
    # Codex's further token counts, each a column only where a run has it, so a narrow terminal keeps the rest
    more = [
        (title, key)
        for title, key in (
            ("cached", "cached_input_tokens"),
            ("cache w", "cache_write_input_tokens"),
            ("reasoning", "reasoning_output_tokens"),
        )
        if any(getattr(run, key) for run in runs)
    ]
    columns = ("run", "role", "memo", "state", "backend", "cost $", "in tok", *(t for t, _ in more), "out tok")
    for col in (*columns, "turns", "started"):
        table.add_column(col)
    if branches:
        table.add_column("branch")
    for run in runs:
        extra = [run.branch or ""] if branches else []
        table.add_row(
            str(run.run_id),
            run.role,
            run.label,
            run.state
            + (" (waiting for a person)" if (run.reason or "").startswith("waiting:") else "")
            + (" (log pruned)" if run.log_pruned_at else ""),
            run.backend or "",
            money(run.cost_usd, bool(run.cost_estimated)),
            str(run.input_tokens or ""),
            *(str(getattr(run, key) or "") for _, key in more),
            str(run.output_tokens or ""),
            str(run.num_turns or ""),
            (run.started_at or "")[:19],
            *extra,
        )
    parts: list[Any] = [table]
    for title, key in (("per role", "by_role"), ("per day", "by_day")):
        totals = Table(title=title, title_justify="left")
        for col in (title.split()[1], "runs", "cost $", "in tok", "out tok"):
            totals.add_column(col)
        for name, entry in report["totals"][key].items():
            totals.add_row(
                name,
                str(entry["runs"]),
                money(entry["cost_usd"], bool(entry.get("cost_estimated"))),
                str(entry["input_tokens"]),
                str(entry["output_tokens"]),
            )
        parts.append(totals)
    mark = "~" if report["totals"].get("cost_estimated") else ""
    parts.append(f"total: {report['totals']['runs']} runs, {mark}${report['totals']['cost_usd']:.4f}")
    if mark:
        parts.append("~: estimated from the token counts and `prices` (the backend reports no cost)")
    note = (report.get("window") or {}).get("note")
    if note:
        parts.append(note)
    return parts
