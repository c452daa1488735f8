"""``orchestrator trace``: why did this happen? The conversation a memo belongs to, as a tree.

The conversation is every memo reachable from the memo's root: its ``reply_to``
ancestors up to the first memo that replies to nothing known, and every memo
that replies to any memo of it, at any depth. Each memo is shown with its role,
id, subject, folder and state, its sender, and the runs that handled it (from
the database, read-only). Cancelled work, and replies that came after it was
cancelled, are marked. An id that several memos carry (real corpora have them)
is never guessed at: every memo that carries it is shown as a candidate.
The memos come from the memo index and only the conversation's files are read
(``conversation_memos``); the runs of each memo are asked of the database one memo at a time.
Needs no running orchestrator and no ``roles.yaml``.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.core.errors import UnknownMemoError
from orchestrator.intake import notices
from orchestrator.intake.catalog import Entry
from orchestrator.store import Store
from orchestrator.tools.conversation_memos import memos_of

STATE_OF_FOLDER = {
    "inbox": "waiting",
    "active": "running",
    "archive": "done",
    "failed": "failed",
    "cancelled": "cancelled",
    "held": "held",
}


def _when(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.astimezone()


def _seconds(start: str | None, end: str | None) -> float | None:
    a, b = _when(start), _when(end)
    return round((b - a).total_seconds(), 3) if a and b else None


class _Record:
    """What the database knows: the runs of each memo (role, file name) and the cancellation of each memo id.

    Asked memo by memo (``run_memos``, ``cancellations_memo_id``); a database from before ``run_memos`` is
    read whole, once.
    """

    def __init__(self, root: Path) -> None:
        self.store: Store | None = None
        self._all_runs: dict[tuple[str, str], list[dict[str, Any]]] | None = None
        self._runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._cancellations: dict[str, dict[str, Any] | None] = {}
        db = root / ".orchestrator" / "state.db"
        if not db.exists():
            return
        try:
            self.store = Store(db, readonly=True)
            if self.store.meta("run_memos") is None:
                self._all_runs = defaultdict(list)
                for row in self.store.history():
                    for name in row.get("memos") or []:
                        self._all_runs[(row["role"], name)].append(row)
        except sqlite3.Error:
            self.close()  # a record from an older version, or a busy one: the folders still tell the story

    def runs(self, role: str, name: str) -> list[dict[str, Any]]:
        if self._all_runs is not None:
            return self._all_runs.get((role, name), [])
        if (role, name) not in self._runs:
            self._runs[(role, name)] = self._ask(lambda store: store.runs_of_memo(role, name), [])
        return self._runs[(role, name)]

    def cancellation(self, memo_id: str | None) -> dict[str, Any] | None:
        if not memo_id:
            return None
        if memo_id not in self._cancellations:
            self._cancellations[memo_id] = self._ask(lambda store: store.cancellation_of(memo_id), None)
        return self._cancellations[memo_id]

    def _ask(self, question: Any, otherwise: Any) -> Any:
        if self.store is None:
            return otherwise
        try:
            return question(self.store)
        except sqlite3.Error:
            return otherwise

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


def _run_json(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": row["run_id"],
        "seq": row.get("seq"),
        "attempt": row.get("attempt"),
        "state": row.get("state"),
        "started_at": row.get("started_at"),
        "ended_at": row.get("ended_at"),
        "duration": _seconds(row.get("started_at"), row.get("ended_at")),
        "cost_usd": row.get("cost_usd"),
        "reason": row.get("reason"),
    }


class _Conversation:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.record = _Record(root)
        self.memos = memos_of(root, self.record.store.db if self.record.store else None)

    def roots_of(self, entry: Entry) -> list[Entry]:
        """The first memos up the ``reply_to`` links that reply to nothing known (every candidate of a repeated id)."""
        roots: list[Entry] = []
        seen: set[Path] = set()
        todo = [entry]
        while todo:
            current = todo.pop()
            if current.path in seen:
                continue
            seen.add(current.path)
            parents = self.memos.with_id(current.header.reply_to) if current.header.reply_to else []
            if not parents:
                roots.append(current)
            todo.extend(parents)
        if not roots:  # a cycle of reply_to links: start from the memo asked about
            roots.append(entry)
        return roots

    def cancelled_at(self, entry: Entry) -> str | None:
        """When this memo's work was cancelled ("" when it lies in cancelled/ with no record), else None."""
        record = self.record.cancellation(entry.memo_id)
        if record is not None:
            return str(record["cancelled_at"])
        runs = self.record.runs(entry.role, entry.name)
        if entry.folder == "cancelled" or any(r.get("state") == "cancelled" for r in runs):
            return next((r.get("ended_at") or "" for r in reversed(runs) if r.get("state") == "cancelled"), "")
        return None

    def node(self, entry: Entry, matched: set[Path], shown: set[Path]) -> dict[str, Any]:
        header = entry.header
        runs = [_run_json(r) for r in self.record.runs(entry.role, entry.name)]
        state = runs[-1]["state"] if runs else STATE_OF_FOLDER.get(entry.folder, entry.folder)
        if entry.folder == "held":
            state = "held"
        parents = self.memos.with_id(header.reply_to) if header.reply_to else []
        late = False
        for parent in parents if header.sender != notices.SENDER else []:  # its own notice of a cancel: no late work
            cancelled = self.cancelled_at(parent)
            if cancelled is not None:
                at, created = _when(cancelled), _when(header.created_at)
                late = late or at is None or created is None or created >= at
        out: dict[str, Any] = {
            "id": entry.memo_id,
            "role": entry.role,
            "folder": entry.folder,
            "name": entry.name,
            "path": str(entry.path),
            "state": state,
            "subject": header.subject,
            "from": header.sender,
            "to": header.to,
            "created_at": header.created_at,
            "reply_to": header.reply_to,
            "tags": list(header.tags),
            "runs": runs,
            "cancelled": self.cancelled_at(entry) is not None,
            "late_reply_to_cancelled": late,
            "match": entry.path in matched,
            "reply_to_candidates": [p.where() for p in parents] if len(parents) > 1 else [],
            "id_shared_with": [e.where() for e in self._with_id(entry.memo_id) if e.path != entry.path],
            "shown_above": entry.path in shown,
            "replies": [],
        }
        if entry.path in shown:  # a memo reached twice (a repeated id): shown once, named again
            return out
        shown.add(entry.path)
        replies = self.memos.replies(entry.memo_id) if entry.memo_id else []
        out["replies"] = [self.node(reply, matched, shown) for reply in sorted(replies, key=_order)]
        return out

    def _with_id(self, memo_id: str | None) -> list[Entry]:
        return self.memos.with_id(memo_id) if memo_id else []


def _order(entry: Entry) -> tuple[str, str]:
    return (entry.header.created_at or "", entry.name)


def trace(root: Path, query: str) -> dict[str, Any]:
    """The conversation of the memo(s) ``query`` names (id, file name, name without ``.md``, or path)."""
    talk = _Conversation(root)
    try:
        found = talk.memos.matching(query)
        if not found:
            raise UnknownMemoError(f"orchestrator trace: no memo under {root / 'memo'} matches {query!r}")
        roots: list[Entry] = []
        for entry in found:
            for candidate in talk.roots_of(entry):
                if candidate not in roots:
                    roots.append(candidate)
        matched = {entry.path for entry in found}
        shown: set[Path] = set()
        return {
            "query": query,
            "matches": [entry.where() for entry in found],
            "roots": [talk.node(r, matched, shown) for r in sorted(roots, key=_order)],
        }
    finally:
        talk.record.close()


def _money(value: float | None) -> str:
    return f" ${value:.2f}" if value else ""


def _line(node: dict[str, Any]) -> str:
    marks = []
    if node["match"]:
        marks.append("<== asked")
    if node["cancelled"]:
        marks.append("CANCELLED")
    if node["late_reply_to_cancelled"]:
        marks.append("LATE: replies to cancelled work")
    if node["reply_to_candidates"]:
        marks.append(f"reply_to {node['reply_to']} is carried by {len(node['reply_to_candidates'])} memos")
    if node["id_shared_with"]:
        marks.append("id also on " + ", ".join(node["id_shared_with"]))
    runs = "; ".join(
        f"run {r['run_id']}"
        + (f" #{r['seq']}" if r.get("seq") else "")
        + f" attempt {r['attempt']} {r['state']}"
        + (f" {r['duration']:.1f}s" if r.get("duration") is not None else "")
        + _money(r.get("cost_usd"))
        for r in node["runs"]
    )
    text = (
        f"{node['id'] or node['name']}  {node['role']}/{node['folder']}  {node['state']}  "
        f'"{node["subject"] or "-"}"  from {node["from"] or "-"}'
    )
    if runs:
        text += f"  [{runs}]"
    if node["shown_above"]:
        text += "  (shown above)"
    return text + ("  " + "  ".join(f"** {m}" for m in marks) if marks else "")


def render(report: dict[str, Any]) -> list[str]:
    """The tree as lines of text, for ``orchestrator trace`` without ``--json``."""
    lines = []
    if len(report["matches"]) > 1:
        lines.append(
            f"{len(report['matches'])} memos match {report['query']!r}: {', '.join(report['matches'])}; "
            "every one is shown"
        )

    def walk(node: dict[str, Any], prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└── " if last else "├── ")
        lines.append(prefix + branch + _line(node))
        inner = prefix + ("" if top else ("    " if last else "│   "))
        for index, reply in enumerate(node["replies"]):
            walk(reply, inner, index == len(node["replies"]) - 1, False)

    for root in report["roots"]:
        walk(root, "", True, True)
    return lines
