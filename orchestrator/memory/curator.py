"""Memory as an extension of ``orchestrator up``: ``$memory`` for each run, daily retention, compaction memos.

This extension (the orchestrator's side of memory; the role named by ``memory.curator`` is the agent that writes
the summaries) keeps one small timer on the host's clock, which posts ``MemoryDue``; the loop calls
``check``, which (in the team's zone) retires summarised entries once a day and,
once ``memory.weekly_at`` / ``memory.monthly_at`` has passed, writes one
compaction memo per period into the curator's inbox. Each period is recorded in
the ``compactions`` table and the memo's name is fixed, so a restart never
writes it twice. The memo is an ordinary memo (retried, cancellable); if the
curator never answers, the entries wait and nothing is deleted.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from orchestrator.config import RoleRun
from orchestrator.core.calendar import parse_monthly_at, parse_weekly_at
from orchestrator.core.clock import Timer, iso
from orchestrator.core.errors import MemoryUnavailableError
from orchestrator.intake.memo import FOLDERS
from orchestrator.memory import rules
from orchestrator.memory.db import MemoryDB
from orchestrator.memory.db.schema import db_path
from orchestrator.memory.section import LOOP_WAIT, MemorySection
from orchestrator.memory.status import memory_status
from orchestrator.supervisor.extension import Extension, Handler, Host

MAX_SLEEP = 6 * 3600.0  # look again at least this often, whatever the due times say


@dataclass(frozen=True)
class MemoryDue:
    """The memory timer fired: retention or a compaction may be due."""

    reason: str = "timer"


def compaction_memo(kind: str, period: str, curator: str, entries: list[dict[str, Any]]) -> str:
    """The text of a compaction memo: the entries per role and the exact command that answers for each."""
    layer = "weekly" if kind == "weekly" else "monthly"
    if kind == "weekly":
        monday, sunday = rules.week_days(period)
        span, lines = f"{period} ({monday} to {sunday})", "10-20"
    else:
        span, lines = period, "10-20"
    source_layer = "daily" if kind == "weekly" else "weekly"
    out = [
        "---",
        f"id: memory-{kind}-{period}",
        f"subject: {layer} memory compaction {period}",
        "from: orchestrator",
        f"to: {curator}",
        "---",
        f"Summarise each role's {source_layer} memories of {span} into one {layer} entry of {lines} lines",
        "(what happened, what was learnt, what matters next), then store it with the command given for",
        "that role, the summary on standard input. Entries past retention are deleted only once their",
        "summary exists; until then they wait.",
    ]
    by_role: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_role.setdefault(entry["role"], []).append(entry)
    importance = 5 if kind == "weekly" else 7
    for role, items in by_role.items():
        out += ["", f"## {role} ({len(items)} entries)", ""]
        out += [f"- #{e['id']} ({e['period']}, {e['category']} {e['importance']}): {e['text']}" for e in items]
        ids = ",".join(str(e["id"]) for e in items)
        out += [
            "",
            "Answer with:",
            "",
            f"    orchestrator memory add --role {role} --layer {layer} --period {period} "
            f"--summarises {ids} --importance {importance} --category event -",
        ]
    return "\n".join(out) + "\n"


class MemoryCurator(Extension):
    """Owns the memory timer of one orchestrator and fills ``$memory``."""

    def __init__(self, host: Host) -> None:
        self.config = config = host.config
        self.settings = config.memory
        self.clock = host.clock
        self.handle = host.post
        self.log = host.console.line
        self.section = MemorySection(config, host.clock, host.console.line)
        self.path = db_path(config.state_dir)
        self.timer: Timer | None = None
        self.weekly = parse_weekly_at(self.settings.weekly_at)
        self.monthly = parse_monthly_at(self.settings.monthly_at)
        self.written: list[str] = []  # memo names written by this curator, for tests and the log

    def handlers(self) -> Mapping[type, Handler]:
        return {MemoryDue: self.due}

    def sections(self, run: RoleRun) -> dict[str, str]:
        return self.section(run)

    def start(self) -> None:
        """Catch up on what came due while the orchestrator was down, then arm the timer."""
        self.check()

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.section.close()

    def due(self, _event: MemoryDue) -> None:
        self.check()

    def now(self) -> datetime:
        return self.clock.now().astimezone(self.settings.zone())

    def check(self) -> None:
        """Retention once a day, compaction memos once per period; then sleep until the next due moment."""
        now = self.now()
        try:
            if self.path.exists():
                db = MemoryDB(self.path, timeout=LOOP_WAIT)
                try:
                    self._retention(db, now)
                    self._compact(db, "weekly", *rules.last_weekly_due(self.weekly, now))
                    self._compact(db, "monthly", *rules.last_monthly_due(self.monthly, now))
                finally:
                    db.close()
        except MemoryUnavailableError as exc:
            self.log(f"memory: {exc}; retention and compaction wait for the next check")
        self._arm(now)

    def snapshot(self, full: bool) -> dict[str, Any]:
        """For ``status``: how many entries past retention wait for which summary (``memory.status``)."""
        if not full:
            return {}
        return {"memory": memory_status(self.config.state_dir, self.settings, self.clock.now())}

    def _arm(self, now: datetime) -> None:
        if self.timer is not None:
            self.timer.cancel()
        tomorrow = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), now.tzinfo)
        moments = [
            rules.next_weekly_due(self.weekly, now),
            rules.next_monthly_due(self.monthly, now),
            tomorrow + timedelta(minutes=5),
        ]
        delay = min(MAX_SLEEP, max(1.0, min((m - now).total_seconds() for m in moments)))
        self.timer = self.clock.call_later(delay, self.handle, MemoryDue())

    def _retention(self, db: MemoryDB, now: datetime) -> None:
        today = now.date().isoformat()
        if db.compaction_written("retention", today):
            return
        retired, waiting = db.retention(now.date(), self.settings.daily_days, self.settings.weekly_days, iso(now))
        db.record_compaction("retention", today, iso(now), None)
        if retired or waiting:
            self.log(
                f"memory retention: {retired} summarised entries retired; "
                f"{sum(waiting.values())} past retention wait for their summary"
            )

    def _compact(self, db: MemoryDB, kind: str, moment: datetime, period: str) -> None:
        curator = self.settings.curator
        if curator is None or db.compaction_written(kind, period):
            return
        if kind == "weekly":
            monday, _ = rules.week_days(period)
            days = [(monday + timedelta(days=n)).isoformat() for n in range(7)]
            entries = db.unsummarised("daily", "weekly", days)
        else:
            weeks = db.weekly_periods_of(period)
            entries = db.unsummarised("weekly", "monthly", weeks) if weeks else []
        name = f"memory-{kind}-{period}.md"
        if entries and not self._already_there(curator, name):
            self._write(curator, name, compaction_memo(kind, period, curator, entries))
            self.written.append(name)
            self.log(f"memory: {kind} compaction memo for {period} ({len(entries)} entries) sent to {curator}")
        db.record_compaction(kind, period, iso(self.now()), name if entries else None)

    def _already_there(self, role: str, name: str) -> bool:
        base = self.config.role_dir(role)
        return any((base / folder / name).exists() for folder in (*FOLDERS, "held"))

    def _write(self, role: str, name: str, text: str) -> None:
        inbox = self.config.role_dir(role) / "inbox"
        inbox.mkdir(parents=True, exist_ok=True)
        tmp = inbox / f".{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, inbox / name)  # a rename: the watcher sees it complete at once
