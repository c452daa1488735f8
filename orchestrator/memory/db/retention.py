"""Retention and compaction: which entries wait for a weekly or monthly summary, tombstoning summarised entries
past ``retention_days`` (their text cleared), and the record of each compaction memo written."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, timedelta
from typing import Any

from orchestrator.memory.db import schema
from orchestrator.memory.db.connection import Connection
from orchestrator.memory.db.schema import LIVE
from orchestrator.memory.db.writes import tombstone
from orchestrator.memory.rules import month_of_week, week_of


class Retention(Connection):
    """The retention and compaction methods of ``MemoryDB``."""

    def unsummarised(self, layer: str, summary_layer: str, periods: Sequence[str]) -> list[dict[str, Any]]:
        """Live entries of ``layer`` in ``periods`` that no live ``summary_layer`` entry summarises yet."""
        marks = ",".join("?" * len(periods))
        sql = (
            f"SELECT * FROM entries e WHERE {LIVE} AND e.layer = ? AND e.period IN ({marks}) AND NOT EXISTS ("
            " SELECT 1 FROM summaries s JOIN entries x ON x.id = s.summary_id"
            " WHERE s.entry_id = e.id AND x.layer = ? AND x.forgotten_at IS NULL)"
            " ORDER BY e.role, e.period, e.id"
        )
        with self._guard("compaction"):
            return [schema.decode(r) for r in self.conn.execute(sql, [layer, *periods, summary_layer])]

    def weekly_periods_of(self, month: str) -> list[str]:
        """The ISO weeks with weekly entries that belong to ``month`` (by their Thursday)."""
        with self._guard("compaction"):
            rows = self.conn.execute(
                "SELECT DISTINCT period FROM entries WHERE layer = 'weekly' AND period IS NOT NULL"
            )
            return [p for (p,) in rows if month_of_week(p) == month]

    def retention(
        self, today: date, daily_days: int, weekly_days: int, at: str, *, apply: bool = True
    ) -> tuple[int, dict[str, int]]:
        """Tombstone summarised entries past retention; count those that wait for their summary.

        Returns how many were retired and, per period still waiting, how many entries wait
        (``daily 2026-W40`` -> 5 means five daily entries of that week wait for a weekly summary).
        With ``apply=False`` nothing changes and only the waiting are counted.
        """
        retired = 0
        waiting: dict[str, int] = {}
        summary = (
            "(SELECT min(s.summary_id) FROM summaries s JOIN entries x ON x.id = s.summary_id"
            " WHERE s.entry_id = e.id AND x.layer = ? AND x.forgotten_at IS NULL)"
        )
        with self._write("retention") if apply else self._read("retention") as conn:
            for layer, summary_layer, cutoff in self._retention_rules(today, daily_days, weekly_days):
                if not apply:
                    for period, count in conn.execute(
                        f"SELECT e.period, count(*) FROM entries e WHERE {LIVE} AND e.layer = ? AND e.period < ?"
                        f" AND {summary} IS NULL GROUP BY e.period",
                        (layer, cutoff, summary_layer),
                    ):
                        key = self._waiting_key(layer, period)
                        waiting[key] = waiting.get(key, 0) + count
                    continue
                rows = conn.execute(
                    f"SELECT e.id, e.period, {summary} AS summary FROM entries e"
                    f" WHERE {LIVE} AND e.layer = ? AND e.period < ?",
                    (summary_layer, layer, cutoff),
                ).fetchall()
                for entry_id, period, summary_id in rows:
                    if summary_id is None:
                        key = self._waiting_key(layer, period)
                        waiting[key] = waiting.get(key, 0) + 1
                    else:
                        days = daily_days if layer == "daily" else weekly_days
                        why = f"retention: {layer} entry past {days} days, summarised by #{summary_id}"
                        tombstone(conn, entry_id, why, "retention", at, True)
                        retired += 1
        return retired, waiting

    @staticmethod
    def _retention_rules(today: date, daily_days: int, weekly_days: int) -> list[tuple[str, str, str]]:
        return [
            ("daily", "weekly", (today - timedelta(days=daily_days)).isoformat()),
            ("weekly", "monthly", week_of(today - timedelta(days=weekly_days))),
        ]

    @staticmethod
    def _waiting_key(layer: str, period: str) -> str:
        return f"{layer} {week_of(date.fromisoformat(period)) if layer == 'daily' else month_of_week(period)}"

    def compaction_written(self, kind: str, period: str) -> bool:
        """Whether the ``kind`` (weekly, monthly) compaction memo of ``period`` was written already."""
        with self._guard("compaction"):
            row = self.conn.execute(
                "SELECT 1 FROM compactions WHERE kind = ? AND period = ?", (kind, period)
            ).fetchone()
            return row is not None

    def record_compaction(self, kind: str, period: str, at: str, memo: str | None) -> None:
        """Record that the compaction memo of ``kind`` and ``period`` was written (the first record of a period stays)."""
        with self._write("compaction") as conn:
            conn.execute("INSERT OR IGNORE INTO compactions VALUES (?, ?, ?, ?)", (kind, period, at, memo))
