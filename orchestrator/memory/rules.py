"""The rules of memory as pure functions: layers from importance, periods, the prompt budget, due moments.

Nothing here reads a clock, a file or the database, so every rule is tested
with plain values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from orchestrator.core.calendar import MonthlyAt, WeeklyAt

LAYERS = ("daily", "weekly", "monthly", "core")
CATEGORIES = ("value", "belief", "insight", "relationship", "event", "learning", "other")
SOURCES = ("agent", "supervisor", "owner")
SUPERVISOR_BONUS = 2

_DAY = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


def effective_importance(importance: int, source: str) -> int:
    """Importance after the +2 for what comes from the supervisor, capped at 10."""
    bonus = SUPERVISOR_BONUS if source == "supervisor" else 0
    return min(10, importance + bonus)


def layer_for(importance: int, remember: bool = False) -> str:
    """Where a memory lives: 1-3 daily, 4-6 weekly, 7-9 monthly (the long-term layer), 10 or "remember" core."""
    if remember or importance >= 10:
        return "core"
    if importance >= 7:
        return "monthly"
    if importance >= 4:
        return "weekly"
    return "daily"


def week_of(day: date) -> str:
    """The ISO week of a day, ``2026-W49``."""
    year, week, _ = day.isocalendar()
    return f"{year}-W{week:02d}"


def month_of(day: date) -> str:
    return f"{day.year}-{day.month:02d}"


def period_for(layer: str, day: date) -> str | None:
    """The period an entry of ``layer`` written on ``day`` belongs to; core has none."""
    return {"daily": day.isoformat(), "weekly": week_of(day), "monthly": month_of(day)}.get(layer)


def week_days(period: str) -> tuple[date, date]:
    """Monday and Sunday of an ISO week ``YYYY-Www``."""
    match = _WEEK.match(period)
    if not match:
        raise ValueError(f"not an ISO week: {period!r}")
    monday = date.fromisocalendar(int(match.group(1)), int(match.group(2)), 1)
    return monday, monday + timedelta(days=6)


def month_of_week(period: str) -> str:
    """The month an ISO week belongs to: the month of its Thursday (as ISO years are counted)."""
    monday, _ = week_days(period)
    return month_of(monday + timedelta(days=3))


def period_problem(layer: str, period: str | None) -> str | None:
    """Why ``period`` does not fit ``layer`` (None when it fits)."""
    if layer == "core":
        return None if period is None else "core memories have no period; leave out --period"
    if period is None:
        return None
    forms = {"daily": ("a day such as 2026-12-01", _DAY), "weekly": ("an ISO week such as 2026-W49", _WEEK)}
    forms["monthly"] = ("a month such as 2026-12", _MONTH)
    what, pattern = forms[layer]
    match = pattern.match(period)
    try:
        if match is None:
            raise ValueError
        if layer == "daily":
            date.fromisoformat(period)
        elif layer == "weekly":
            week_days(period)
        elif not 1 <= int(match.group(2)) <= 12:
            raise ValueError
    except ValueError:
        return f"--period {period!r} does not fit layer {layer}: expected {what}"
    return None


# ---------------------------------------------------------------- the prompt budget
@dataclass(frozen=True)
class Group:
    """One block of ``$memory``: a title and its entries, newest first.

    ``unread`` counts entries of the group that were not even read because the budget could
    not hold them; they are left out and counted in the closing line like the others.
    """

    title: str
    entries: Sequence[dict[str, Any]]
    unread: int = 0


def entry_line(entry: dict[str, Any]) -> str:
    """How one entry reads in the prompt: id, period, category and importance, then its text."""
    period = f" {entry['period']}" if entry.get("period") else ""
    return f"- [#{entry['id']}{period} {entry['category']} {entry['importance']}] {entry['text']}"


def fit_budget(groups: Sequence[Group], max_lines: int, max_bytes: int) -> tuple[list[Group], int]:
    """The groups cut to the budget, and how many entries were left out.

    The lowest-importance entries of the oldest groups go first (monthly before
    weekly before daily before core; within a group the least important, then the oldest).
    """
    kept, left_out = _fit(groups, max_lines, max_bytes)
    return [Group(g.title, [x for x, _ in e]) for g, e in zip(groups, kept, strict=True)], left_out


def _fit(groups: Sequence[Group], max_lines: int, max_bytes: int) -> tuple[list[list[tuple[dict[str, Any], str]]], int]:
    """``fit_budget`` with each kept entry's prompt line beside it (each line is made once)."""
    texts = [[entry_line(x) for x in g.entries] for g in groups]
    costs = [[(1 + t.count("\n"), len(t.encode("utf-8")) + 1) for t in ts] for ts in texts]
    lines = 1 + sum(2 + sum(c[0] for c in cs) for cs in costs if cs)
    used = 300 + sum(len(g.title) + 8 + sum(c[1] for c in cs) for g, cs in zip(groups, costs, strict=True))
    gone: list[set[int]] = [set() for _ in groups]
    for gi in reversed(range(len(groups))):  # the candidates to leave out, the first ones first
        if lines <= max_lines and used <= max_bytes:
            break
        entries = groups[gi].entries
        order = sorted(
            range(len(entries)), key=lambda i: (entries[i]["importance"], entries[i].get("created_at") or "")
        )
        for i in order:
            if lines <= max_lines and used <= max_bytes:
                break
            gone[gi].add(i)
            lines -= costs[gi][i][0]
            used -= costs[gi][i][1]
            if len(gone[gi]) == len(entries):
                lines -= 2  # its title and blank line go with the last entry
    kept = [[(x, texts[gi][i]) for i, x in enumerate(g.entries) if i not in gone[gi]] for gi, g in enumerate(groups)]
    return kept, sum(len(s) for s in gone) + sum(g.unread for g in groups)


# ---------------------------------------------------------------- due moments
def last_weekly_due(spec: WeeklyAt, now: datetime) -> tuple[datetime, str]:
    """The latest weekly due moment at or before ``now`` and the ISO week it compacts.

    Due on a Sunday it compacts the week that ends that day; on another weekday, the week before.
    """
    moment = now.replace(hour=spec.hour, minute=spec.minute, second=0, microsecond=0)
    moment -= timedelta(days=(now.weekday() - spec.weekday) % 7)
    if moment > now:
        moment -= timedelta(days=7)
    day = moment.date() if spec.weekday == 6 else moment.date() - timedelta(days=7)
    return moment, week_of(day)


def last_monthly_due(spec: MonthlyAt, now: datetime) -> tuple[datetime, str]:
    """The latest monthly due moment at or before ``now`` and the month it compacts (the one before)."""
    moment = now.replace(day=spec.day, hour=spec.hour, minute=spec.minute, second=0, microsecond=0)
    if moment > now:
        first = moment.replace(day=1) - timedelta(days=1)
        moment = moment.replace(year=first.year, month=first.month)
    previous = moment.replace(day=1) - timedelta(days=1)
    return moment, month_of(previous)


def next_weekly_due(spec: WeeklyAt, now: datetime) -> datetime:
    return last_weekly_due(spec, now)[0] + timedelta(days=7)


def next_monthly_due(spec: MonthlyAt, now: datetime) -> datetime:
    moment = last_monthly_due(spec, now)[0]
    after = moment.replace(day=28) + timedelta(days=4)
    return moment.replace(year=after.year, month=after.month)


def render_memory(groups: Sequence[Group], max_lines: int, max_bytes: int) -> str:
    """``$memory``: each non-empty group under its title, within the budget; a last line says what was left out."""
    kept, left_out = _fit(groups, max_lines, max_bytes)
    blocks = [f"### {g.title}\n" + "\n".join(t for _, t in e) for g, e in zip(groups, kept, strict=True) if e]
    text = "\n\n".join(blocks)
    if left_out:
        text += (
            f"\n\n({left_out} older or less important entries were left out to stay within "
            f"{max_lines} lines / {max_bytes} bytes; find them with `orchestrator memory search WORD`)"
        )
    return text
