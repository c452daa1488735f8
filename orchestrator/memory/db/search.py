"""Reading entries: search (every word found by the trigram or the bigram index, ranked inside SQLite by bm25,
then importance, then recency, at most ``RANK_WINDOW`` of the newest matches), lists, one entry with its
history, what ``$memory`` loads within its line budget, and the counts of ``memory stats``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, timedelta
from typing import Any

from orchestrator.core.errors import UsageError
from orchestrator.memory import grams
from orchestrator.memory.db import schema
from orchestrator.memory.db.connection import Connection
from orchestrator.memory.db.schema import LIVE
from orchestrator.memory.rules import week_of

RANK_WINDOW = 500  # a search ranks at most this many of its newest matches in scope


class Search(Connection):
    """The reading methods of ``MemoryDB``."""

    def get(self, entry_id: int) -> dict[str, Any] | None:
        """One entry, live or tombstone, with its growth log and the ids that summarise it."""
        with self._guard("show"):
            row = self.conn.execute("SELECT * FROM entries WHERE id = ?", (entry_id,)).fetchone()
            if row is None:
                return None
            out = schema.decode(row)
            out["growth"] = [dict(r) for r in self.conn.execute("SELECT * FROM growth WHERE entry_id = ?", (entry_id,))]
            out["summarised_by"] = [
                r[0] for r in self.conn.execute("SELECT summary_id FROM summaries WHERE entry_id = ?", (entry_id,))
            ]
            return out

    def search(
        self,
        query: str,
        roles: Sequence[str] | None,
        *,
        layer: str | None = None,
        category: str | None = None,
        since: str | None = None,
        until: str | None = None,
        min_importance: int | None = None,
        limit: int = 20,
    ) -> list[dict[str, Any]]:
        """Live entries holding every word of ``query``: by relevance, then importance, then recency.

        Words of three characters or more are found by the trigram index, shorter ones by the bigram
        index; the index of the longer words leads and the others narrow it. Only the ``RANK_WINDOW``
        newest matches in scope are ranked, so a word found in thousands of entries costs no more
        than one found in hundreds.
        """
        words = [w.strip("\"'") for w in query.split()]
        words = [w for w in words if w]
        if not words:
            raise UsageError("memory search: give a word to search for")
        long = [w for w in words if len(w.lower()) >= 3]
        short = [w for w in words if len(w.lower()) < 3]
        where, params = self._filters(roles, layer, category, since, until, min_importance)
        if long:
            table, match = "entries_fts", " AND ".join('"' + w.replace('"', '""') + '"' for w in long)
            if short:
                where.append("e.id IN (SELECT rowid FROM entries_bi WHERE entries_bi MATCH ?)")
                params.append(" AND ".join(grams.query(w) for w in short))
        else:
            table, match = "entries_bi", " AND ".join(grams.query(w) for w in short)
        found = f"FROM {table} f JOIN entries e ON e.id = f.rowid WHERE {table} MATCH ? AND " + " AND ".join(where)
        with self._guard("search"):
            # the oldest id of the newest RANK_WINDOW matches in scope (none: fewer match, rank them all)
            cutoff = self.conn.execute(
                f"SELECT f.rowid {found} ORDER BY f.rowid DESC LIMIT 1 OFFSET {RANK_WINDOW - 1}", [match, *params]
            ).fetchone()
            window = "" if cutoff is None else f" AND f.rowid >= {int(cutoff[0])}"
            ranked = self.conn.execute(
                f"SELECT e.id, bm25({table}) AS score {found}{window}"
                " ORDER BY score, e.importance DESC, e.created_at DESC, e.id DESC LIMIT ?",
                [match, *params, limit],
            ).fetchall()
            ids = [r[0] for r in ranked]
            if not ids:
                return []
            rows = {
                r["id"]: r
                for r in self.conn.execute(f"SELECT * FROM entries WHERE id IN ({','.join('?' * len(ids))})", ids)
            }
        return [{**schema.decode(rows[i]), "score": score} for i, score in ranked]

    @staticmethod
    def _filters(
        roles: Sequence[str] | None,
        layer: str | None,
        category: str | None,
        since: str | None,
        until: str | None,
        min_importance: int | None,
    ) -> tuple[list[str], list[Any]]:
        where: list[str] = [LIVE]
        params: list[Any] = []
        if roles is not None:
            where.append(f"e.role IN ({','.join('?' * len(roles))})")
            params += list(roles)
        for column, value in (("layer", layer), ("category", category)):
            if value is not None:
                where.append(f"e.{column} = ?")
                params.append(value)
        if since is not None:
            where.append("substr(e.created_at, 1, 10) >= ?")
            params.append(since)
        if until is not None:
            where.append("substr(e.created_at, 1, 10) <= ?")
            params.append(until)
        if min_importance is not None:
            where.append("e.importance >= ?")
            params.append(min_importance)
        return where, params

    def entries(
        self,
        roles: Sequence[str] | None,
        *,
        layer: str | None = None,
        category: str | None = None,
        forgotten: bool = False,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Entries newest first; ``forgotten`` lists the tombstones instead."""
        where, params = self._filters(roles, layer, category, None, None, None)
        if forgotten:
            where[0] = "e.forgotten_at IS NOT NULL"
        with self._guard("list"):
            sql = f"SELECT e.* FROM entries e WHERE {' AND '.join(where)} ORDER BY e.created_at DESC, e.id DESC LIMIT ?"
            return [schema.decode(r) for r in self.conn.execute(sql, [*params, limit])]

    def prompt_groups(
        self, roles: Sequence[str], today: date, most: int | None = None
    ) -> list[tuple[str, list[dict[str, Any]], int]]:
        """What ``$memory`` loads, in order: core, daily of the last 7 days, weekly of the last 4 weeks, last monthly.

        Each group comes newest first with how many of its entries were not read. With ``most``
        (the line budget) only what the budget can hold is read: the budget keeps a prefix of the
        order core, daily, weekly, monthly (each by importance, then newest), and every entry takes
        at least a line, so a group reads at most ``most`` minus the entries of the groups before it.
        """
        marks = ",".join("?" * len(roles))
        days = [(today - timedelta(days=n)).isoformat() for n in range(7)]
        weeks = [week_of(today - timedelta(days=7 * n)) for n in range(4)]
        out: list[tuple[str, list[dict[str, Any]], int]] = []
        room = most
        with self._guard("load"):
            (last,) = self.conn.execute(
                f"SELECT max(period) FROM entries e WHERE {LIVE} AND e.role IN ({marks}) AND e.layer = 'monthly'",
                list(roles),
            ).fetchone()
            plan: list[tuple[str, str, list[str]]] = [
                ("core", "core", []),
                ("daily, last 7 days", "daily", days),
                ("weekly, last 4 weeks", "weekly", weeks),
                (f"monthly, {last}" if last else "monthly", "monthly", [last] if last else []),
            ]
            for title, layer, periods in plan:
                if layer != "core" and not periods:
                    out.append((title, [], 0))
                    continue
                where = f"{LIVE} AND e.role IN ({marks}) AND e.layer = ?"
                if periods:
                    where += f" AND e.period IN ({','.join('?' * len(periods))})"
                args = [*roles, layer, *periods]
                total = None
                if room is not None:
                    (total,) = self.conn.execute(f"SELECT count(*) FROM entries e WHERE {where}", args).fetchone()
                ids = [
                    i
                    for (i,) in self.conn.execute(
                        # entries_load holds every column this reads (SQLite's planner takes entries_scope, which
                        # does not, as the partial index's own condition names a column it lacks: a read per row)
                        f"SELECT e.id FROM entries e INDEXED BY entries_load WHERE {where}"
                        " ORDER BY e.importance DESC, e.created_at DESC, e.id"
                        + ("" if room is None else f" LIMIT {max(0, room)}"),
                        args,
                    )
                ]
                rows = self.conn.execute(
                    "SELECT id, period, category, importance, created_at, text FROM entries"
                    f" WHERE id IN ({','.join('?' * len(ids))})",
                    ids,
                ).fetchall()
                entries = [
                    {"id": i, "period": p, "category": c, "importance": n, "created_at": at, "text": t}
                    for i, p, c, n, at, t in rows
                ]
                entries.sort(key=lambda x: (x["created_at"], x["id"]), reverse=True)
                if total is not None and room is not None:
                    room -= total
                out.append((title, entries, 0 if total is None else total - len(entries)))
        return out

    def stats(self, roles: Sequence[str] | None) -> dict[str, Any]:
        """Counts per role and layer, tombstones and changes, for ``memory stats``."""
        where, params = self._filters(roles, None, None, None, None, None)
        with self._guard("stats"):
            per: dict[str, dict[str, int]] = {}
            for role, layer, count in self.conn.execute(
                f"SELECT role, layer, count(*) FROM entries e WHERE {' AND '.join(where)} GROUP BY role, layer", params
            ):
                per.setdefault(role, {})[layer] = count
            where[0] = "e.forgotten_at IS NOT NULL"
            (forgotten,) = self.conn.execute(
                f"SELECT count(*) FROM entries e WHERE {' AND '.join(where)}", params
            ).fetchone()
            (changes, unapproved) = self.conn.execute(
                "SELECT count(*), count(*) - count(approved_at) FROM growth"
            ).fetchone()
        return {"roles": per, "forgotten": forgotten, "changes": changes, "unapproved_changes": unapproved}
