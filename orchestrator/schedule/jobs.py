"""Timed jobs for other features (``Wakes.register_job``): a rule such as ``{"weekly": "sun 23:00"}`` that writes
its own memo into a role's inbox when due, done (and so not due again) only when that memo's run succeeds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from orchestrator.config import when
from orchestrator.config.schedule import TaskSettings
from orchestrator.schedule import records, rules

if TYPE_CHECKING:
    from orchestrator.schedule.context import ScheduleContext
    from orchestrator.schedule.due import DueTasks
    from orchestrator.schedule.writer import MemoWriter


@dataclass(frozen=True)
class Job:
    """A timed job: at ``rule`` a memo with ``text`` goes into ``role``'s inbox (``register_job``)."""

    role: str
    name: str
    rule: when.Rule
    text: str
    subject: str
    tags: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"job:{self.name}"


class Jobs:
    """The timed jobs registered with one supervisor's scheduler, by key (``job:<name>``)."""

    def __init__(self, context: ScheduleContext, due: DueTasks, writer: MemoWriter) -> None:
        self.wakes = context
        self.due_tasks = due
        self.writer = writer
        self.by_key: dict[str, Job] = {}

    def register(
        self, role: str, name: str, rule: dict[str, Any], text: str, subject: str | None, tags: tuple[str, ...]
    ) -> Job:
        """Check and keep one job (see ``Wakes.register_job``); a job of the same name is replaced."""
        if role not in self.wakes.config.roles:
            raise ValueError(f"register_job: unknown role {role!r}")
        settings = TaskSettings.model_validate({**rule, "text": text})
        job = Job(role, name, settings.rule(self.wakes.tz), text, subject or f"Job: {name}", tags)
        self.by_key[job.key] = job
        return job

    def roles(self) -> set[str]:
        """The roles that have a job."""
        return {job.role for job in self.by_key.values()}

    def due(self, job: Job, now: datetime) -> datetime | None:
        """When the job is next due; None while its memo is queued or running."""
        wakes = self.wakes
        if any(job.key in w["tasks"] for w in self.due_tasks.pending(job.role)):
            return None
        done = records.done(wakes.db, job.role).get(job.key, {})
        anchor = records.first_seen(wakes.db, job.role, job.key, now)
        return rules.due_at(job.rule, records.when(done.get("done_at")), anchor, wakes.tz)

    def moments(self, now: datetime) -> list[datetime]:
        """The due times of all jobs not pending, for the scheduler's one timer."""
        return [m for m in (self.due(job, now) for job in self.by_key.values()) if m is not None]

    def write_due(self, now: datetime) -> None:
        """Write the memo of each job that is due now."""
        for job in list(self.by_key.values()):
            due = self.due(job, now)
            if due is not None and due <= now:
                self.write(job)

    def write(self, job: Job) -> None:
        """Write the job's memo into its role's inbox."""
        path = self.writer.write(
            job.role, "job", job.subject, ["job", job.name, *job.tags], [job.name], [job.key], ("", ""), job.text
        )
        if path is not None:
            self.wakes.console.line(f"job {job.name}: wrote {path.name}", role=job.role)
