"""Writing the scheduler's memos into an inbox: wake memos, recorded before they are written so their
run can mark their tasks done, and notices to the ``notify`` role; each written whole and queued at once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.core.clock import iso
from orchestrator.intake.memo import INBOX, new_memo_id, render_memo, slug, write_atomically
from orchestrator.schedule import records, rules

if TYPE_CHECKING:
    from orchestrator.schedule.context import ScheduleContext


@dataclass(frozen=True)
class WakeText:
    """What a wake memo says: its subject and body, and the ``$tasks`` and ``$signals`` of its run."""

    tasks: list[str]
    subject: str
    tasks_text: str
    signals_text: str
    body: str


def wake_text(picked: rules.Picked, news: list[tuple[str, str]]) -> WakeText:
    """The text of a wake carrying the ``picked`` tasks and the signals with ``news`` (name, output)."""
    tasks = [c.name for c in picked.tasks]
    tasks_text = "\n".join(f"- **{c.name}**: {c.text}" for c in picked.tasks)
    signals_text = "\n\n".join(f"### {signal}\n\n{output}" for signal, output in news)
    body = ["## Tasks", "", tasks_text or "(no task is due)"]
    if news:
        body += ["", "## Signals", "", signals_text]
    subject = "Wake: " + (
        ", ".join(tasks) if tasks else "signals: " + ", ".join(s for s, _ in news) if news else "no task"
    )
    return WakeText(tasks, subject, tasks_text, signals_text, "\n".join(body))


class MemoWriter:
    """The inbox writes of one supervisor's scheduler."""

    def __init__(self, context: ScheduleContext) -> None:
        self.wakes = context

    def write(
        self,
        name: str,
        kind: str,
        subject: str,
        tags: list[str],
        shown: list[str],
        keys: list[str],
        texts: tuple[str, str],
        body: str,
    ) -> Path | None:
        """Record the memo, then write it whole into the inbox and queue it at once; None when it could not be."""
        wakes = self.wakes
        now = wakes.clock.now()
        stem = f"{kind}-{slug(name, 60)}-{new_memo_id()}"
        while stem in wakes.wake_ids:
            stem += "x"
        path = wakes.config.role_dir(name) / INBOX / f"{stem}.md"
        front = {
            "id": stem,
            "subject": subject,
            "from": "orchestrator",
            "to": name,
            "tags": tags,
            "tasks": shown,
            "created_at": iso(now),
        }
        records.add_wake(wakes.db, stem, name, path.name, keys, texts, now)
        wakes.wake_ids.add(stem)
        try:
            write_atomically(path, render_memo(front, body))
        except OSError as exc:
            records.drop_wake(wakes.db, stem)
            wakes.wake_ids.discard(stem)
            wakes.console.error(f"internal error: cannot write {path}: {exc}")
            return None
        wakes.host.offer_memo(name, path)
        return path

    def notice(self, name: str, subject: str, body: str) -> None:
        """Tell the ``notify`` role about role ``name`` (nothing when there is none, or it is that role)."""
        wakes = self.wakes
        notify = wakes.config.notify
        if notify is None or notify == name:
            return
        memo_id = new_memo_id()
        front = {
            "id": memo_id,
            "subject": subject,
            "from": "orchestrator",
            "to": notify,
            "tags": ["wake-hold"],
            "created_at": iso(wakes.clock.now()),
        }
        path = wakes.config.role_dir(notify) / INBOX / f"{memo_id}-{slug(subject)}.md"
        try:
            write_atomically(path, render_memo(front, body))
        except OSError as exc:
            wakes.console.error(f"cannot write the notice {path}: {exc}")
            return
        wakes.host.offer_memo(notify, path)
