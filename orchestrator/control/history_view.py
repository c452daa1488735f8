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
    for col in ("run", "role", "memo", "state", "backend", "cost $", "in tok", "out tok", "turns", "started"):
        table.add_column(col)
    for run in map(RunView.of, report["runs"]):
        table.add_row(
            str(run.run_id),
            run.role,
            run.label,
            run.state
            + (" (waiting for a person)" if (run.reason or "").startswith("waiting:") else "")
            + (" (log pruned)" if run.log_pruned_at else ""),
            run.backend or "",
            money(run.cost_usd),
            str(run.input_tokens or ""),
            str(run.output_tokens or ""),
            str(run.num_turns or ""),
            (run.started_at or "")[:19],
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
                f"{entry['cost_usd']:.4f}",
                str(entry["input_tokens"]),
                str(entry["output_tokens"]),
            )
        parts.append(totals)
    parts.append(f"total: {report['totals']['runs']} runs, ${report['totals']['cost_usd']:.4f}")
    note = (report.get("window") or {}).get("note")
    if note:
        parts.append(note)
    return parts
