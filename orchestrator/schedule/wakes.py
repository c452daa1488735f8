"""The scheduler: heartbeats and due tasks become wake memos; a wake's tasks are done only when its run succeeds.

It attaches to the supervisor through the extension points and owns one timer on the supervisor's clock,
set for the earliest next tick or due time of any role (never more than ``MAX_SLEEP`` ahead, so a wall clock
that jumps is noticed within a minute; there is no polling per task). When it fires, each role that is due:

1. is skipped (no memo, no agent, no cost; counted by reason) when the orchestrator is ending, the role's
   previous wake is still queued or running (the tick is coalesced into it), or the role is over its budget;
2. runs its ``signals`` and ``preflight`` commands off the loop (``probes``); their outcome comes back as a
   ``ProbesDone`` event. A failing command holds the role (``Supervisor.holds``) and writes nothing;
3. picks at most ``max_tasks`` due tasks (``rules.pick``; quiet hours keep all but ``in_quiet_hours`` tasks
   out) and, unless nothing is due and no signal has news, writes one wake memo into the role's inbox.

From there the wake is an ordinary memo. ``run_finished`` (a ``Lifecycle`` listener) marks its tasks done when
the run succeeded, and nothing otherwise.

Timed jobs for other features (``register_job``): a rule such as ``{"weekly": "sun 23:00"}`` that writes its
own memo into a role's inbox when due, done (and so not due again) only when that memo's run succeeds.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.core.clock import Timer, iso
from orchestrator.core.errors import ControlError, UsageError
from orchestrator.core.events import MemoSeen, RunFinished, ScheduleChanged, WakeRequested
from orchestrator.core.run import Run
from orchestrator.core.states import RunState
from orchestrator.intake.memo import ACTIVE, INBOX, new_memo_id, render_memo, slug, write_atomically
from orchestrator.schedule import records, rules
from orchestrator.schedule.preflight import PreflightGate, preflight_probes
from orchestrator.schedule.probes import Probe, ProbeResult, run_probes
from orchestrator.schedule.settings import TaskSettings, zone

if TYPE_CHECKING:
    from orchestrator.config import Role
    from orchestrator.supervisor.loop import Supervisor

MAX_SLEEP = 60.0  # the timer never sleeps longer: a wall clock that jumps (suspend, NTP) is seen within this
RECHECK = 60.0  # a due-driven role skipped (budget, held) is looked at again after this
AFTER_FAILURE = 600.0  # a role without a heartbeat is not woken again for tasks whose wake failed, for this long
HOLD_SOURCE = "wake"
LEDGER_PRIORITY = rules.DEFAULT_PRIORITY["once"]


@dataclass(frozen=True)
class WakeDue:
    """The scheduler's timer fired."""


@dataclass(frozen=True)
class ProbesDone:
    """The signals and preflight of one wake have all ended."""

    role: str
    results: list[ProbeResult] = field(compare=False)
    forced: str | None = None
    manual: bool = False
    reply: asyncio.Future[Any] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Job:
    """A timed job: at ``rule`` a memo with ``text`` goes into ``role``'s inbox (``register_job``)."""

    role: str
    name: str
    rule: rules.Rule
    text: str
    subject: str
    tags: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"job:{self.name}"


@dataclass(frozen=True)
class Due:
    """A task of a role with the moment it is (or becomes) due."""

    name: str
    text: str
    priority: int
    in_quiet_hours: bool
    due_at: datetime | None


class Wakes:
    """Heartbeats, due tasks, wake memos and timed jobs of one supervisor."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup
        self.config = sup.config
        self.clock = sup.clock
        self.console = sup.console
        self.db = sup.store.db
        self.tz = zone(self.config.timezone)
        self.timer: Timer | None = None
        self.started = False
        self.next_tick: dict[str, datetime] = {}
        self.not_before: dict[str, datetime] = {}
        self.probing: set[str] = set()
        self.jobs: dict[str, Job] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        # the one boundary the replay tests replace: running the signal and preflight commands
        self.probe_runner: Callable[[list[Probe], Path], Any] = run_probes
        self._post: Callable[[Any], None] = sup.handle  # events of this module's own, through the loop
        sup.handlers[WakeDue] = self._on_due
        sup.handlers[ProbesDone] = self._on_probes_done
        sup.handlers[WakeRequested] = self._on_wake_requested
        sup.handlers[ScheduleChanged] = self._on_schedule_changed
        sup.lc.listeners.append(self.run_finished)
        sup.launcher.sections.append(self.section)
        self.told: set[str] = set()  # roles whose notify role was told of a held wake, to be told of the recovery
        self.preflight = PreflightGate(sup, self)  # the preflight before every run, not only wakes

    # ------------------------------------------------------------------ public API
    def register_job(
        self,
        role: str,
        name: str,
        rule: dict[str, Any],
        text: str,
        subject: str | None = None,
        tags: tuple[str, ...] = (),
    ) -> Job:
        """Write a memo with ``text`` into ``role``'s inbox whenever ``rule`` (``{"weekly": "sun 23:00"}``,
        ``{"daily": "00:30"}``, ``{"every": "6h"}``, ``{"once": ISO}``) comes due; done only when its run succeeds.

        The memo has ``id: job-<name>-...``, ``tags: [job, <name>, *tags]``; call before or after ``start``.
        """
        if role not in self.config.roles:
            raise ValueError(f"register_job: unknown role {role!r}")
        settings = TaskSettings.model_validate({**rule, "text": text})
        job = Job(role, name, settings.rule(self.tz), text, subject or f"Job: {name}", tags)
        self.jobs[job.key] = job
        if self.started:
            self.arm()
        return job

    def start(self) -> None:
        """Begin: heartbeats missed while the orchestrator was down tick once now, never as a backlog."""
        self.started = True
        now = self.clock.now()
        for name, role in self.config.roles.items():
            if role.wake is not None and role.wake.every:
                last = records.when(records.state(self.db, name)["last_tick"])
                self.next_tick[name] = rules.next_tick(last, role.wake.every, now)
        self.arm()

    def snapshot(self) -> dict[str, Any]:
        """For ``status``: per scheduled role, the next tick and the last wake's outcome or skip reason."""
        out: dict[str, Any] = {}
        for name in self.scheduled_roles():
            state = records.state(self.db, name)
            tick = self.next_tick.get(name)
            out[name] = {
                "next_tick": iso(tick) if tick else None,
                "last": state["last_event"],
                "last_reason": state["last_reason"],
                "last_at": state["last_at"],
                "skips": records.skips(self.db, name),
            }
        return out

    def scheduled_roles(self) -> list[str]:
        ledger_roles = {row["role"] for row in records.ledger(self.db, open_only=True)}
        job_roles = {job.role for job in self.jobs.values()}
        return [
            name
            for name, role in self.config.roles.items()
            if role.wake is not None or role.tasks or name in ledger_roles or name in job_roles
        ]

    # ------------------------------------------------------------------ the one timer
    def arm(self) -> None:
        """Set the one timer for the earliest next tick or due time (at most ``MAX_SLEEP`` ahead)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not self.started or self.sup.ending:
            return
        now = self.clock.now()
        moments = [m for m in (self._next_moment(name, now) for name in self.scheduled_roles()) if m is not None]
        moments += [m for m in (self._job_due(job, now) for job in self.jobs.values()) if m is not None]
        if not moments:
            return
        delay = max(0.0, min((min(moments) - now).total_seconds(), MAX_SLEEP))
        self.timer = self.clock.call_later(delay, self._fire)

    def _fire(self) -> None:
        self.timer = None
        self._post(WakeDue())

    def _next_moment(self, name: str, now: datetime) -> datetime | None:
        role = self.config.roles[name]
        if name in self.next_tick:
            return self.next_tick[name]
        if name in self.probing or self._pending(name):
            return None  # re-armed when that wake ends
        eligible = [self._eligible_at(role, due) for due in self.due_tasks(name, now) if due.due_at is not None]
        if not eligible:
            return None
        return max(min(eligible), self.not_before.get(name, now))

    def _eligible_at(self, role: Role, due: Due) -> datetime:
        assert due.due_at is not None
        windows = role.wake.windows if role.wake is not None else []
        return due.due_at if due.in_quiet_hours or not windows else rules.window_end(due.due_at, windows, self.tz)

    def _job_due(self, job: Job, now: datetime) -> datetime | None:
        if any(job.key in w["tasks"] for w in self._pending(job.role)):
            return None
        done = records.done(self.db, job.role).get(job.key, {})
        anchor = records.first_seen(self.db, job.role, job.key, now)
        return rules.due_at(job.rule, records.when(done.get("done_at")), anchor, self.tz)

    def _on_due(self, _event: WakeDue) -> None:
        now = self.clock.now()
        for name in self.scheduled_roles():
            role = self.config.roles[name]
            if name in self.next_tick:
                assert role.wake is not None and role.wake.every
                # a wall clock that went back (NTP, a restored snapshot) must not stall the heartbeat: the next
                # tick is never further off than one period, as ``rules.next_tick`` has it at start-up
                self.next_tick[name] = min(self.next_tick[name], now + timedelta(seconds=role.wake.every))
                if self.next_tick[name] <= now:
                    records.set_tick(self.db, name, now)
                    self.next_tick[name] = now + timedelta(seconds=role.wake.every)
                    self.tick(name, "heartbeat")
            else:
                moment = self._next_moment(name, now)
                if moment is not None and moment <= now:
                    self.tick(name, "due")
        for job in list(self.jobs.values()):
            due = self._job_due(job, now)
            if due is not None and due <= now:
                self._write_job(job, now)
        self.arm()

    # ------------------------------------------------------------------ what is due
    def due_tasks(self, name: str, now: datetime, write: bool = True) -> list[Due]:
        """Every task of the role (its rules and its open ledger tasks) with when it is due."""
        role = self.config.roles[name]
        done = records.done(self.db, name)
        out = []
        for task, settings in role.tasks.items():
            anchor = records.first_seen(self.db, name, task, now) if write else now
            last = records.when(done.get(task, {}).get("done_at"))
            due = rules.due_at(settings.rule(self.tz), last, anchor, self.tz)
            out.append(Due(task, settings.text, settings.rank, settings.in_quiet_hours, due))
        for row in records.ledger(self.db, name, open_only=True):
            out.append(Due(row["id"], row["text"], row["priority"], False, records.when(row["due_at"])))
        return out

    def pick(self, name: str, now: datetime, forced: str | None = None) -> rules.Picked:
        """The tasks a wake of the role carries now: due, not carried by another wake, within the rules."""
        role = self.config.roles[name]
        busy = {task for wake in self._pending(name) for task in wake["tasks"]}
        every = self.due_tasks(name, now)
        if forced is not None:
            chosen = [d for d in every if d.name == forced]
            if not chosen:
                raise UsageError(f"role {name} has no task {forced!r}; its tasks: {', '.join(d.name for d in every)}")
            if forced in busy:
                raise ControlError(f"task {forced} of {name} is already carried by a wake that is queued or running")
            d = chosen[0]
            return rules.Picked([rules.Candidate(d.name, d.text, d.priority, d.in_quiet_hours)], [], [])
        due = [
            rules.Candidate(d.name, d.text, d.priority, d.in_quiet_hours)
            for d in every
            if d.due_at is not None and d.due_at <= now and d.name not in busy
        ]
        windows = role.wake.windows if role.wake is not None else []
        quiet = bool(windows) and rules.in_window(now, windows, self.tz)
        return rules.pick(due, role.wake.max_tasks if role.wake is not None else 2, quiet)

    def _pending(self, name: str) -> list[dict[str, Any]]:
        """The role's wakes whose run may still happen; one whose memo is gone (deleted, lost) is let go."""
        out = []
        folder = self.config.role_dir(name)
        live = {m.memo_id for run in self.sup.lc.runs.values() for m in run.memos if run.role.name == name}
        for wake in records.pending_wakes(self.db, name):
            if (
                wake["memo_id"] in live
                or (folder / INBOX / wake["name"]).exists()
                or (folder / ACTIVE / wake["name"]).exists()
            ):
                out.append(wake)
            else:
                records.end_wake(self.db, wake["memo_id"], "gone", self.clock.now(), None, None)
        return out

    # ------------------------------------------------------------------ a wake
    def tick(
        self,
        name: str,
        why: str,
        forced: str | None = None,
        manual: bool = False,
        reply: asyncio.Future[Any] | None = None,
    ) -> None:
        """One wake of the role, unless it must be skipped; the probes run first when the role has any."""
        now = self.clock.now()
        role = self.config.roles[name]
        skip: str | None = None
        if self.sup.ending:
            skip = "ending: the orchestrator is ending"
        elif name in self.probing or self._pending(name):
            skip = "coalesced: the previous wake is still queued or running"
        elif not manual and name in self.sup.budgets.blocked():
            why_blocked = self.sup.budgets.current.get(name) or self.sup.budgets.current.get("*", "")
            skip = f"budget: {why_blocked}"
        if skip is not None:
            self._skip(name, skip, reply)
            return
        picked = self.pick(name, now, forced)
        if not self._worth_probing(role, picked, manual):
            self._skip(name, self._idle_reason(picked), reply)
            return
        probes = self._probes(role)
        if not probes:
            self._write_wake(name, picked, [], why, reply)
            return
        self.probing.add(name)
        task = asyncio.ensure_future(self._run_probes(name, probes, forced, manual, reply))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _worth_probing(self, role: Role, picked: rules.Picked, manual: bool) -> bool:
        idle_skips = role.wake is None or role.wake.skip_when_idle
        return manual or bool(picked.tasks) or bool(role.signals) or not idle_skips

    @staticmethod
    def _idle_reason(picked: rules.Picked) -> str:
        if picked.quiet_skipped:
            return f"quiet hours: {', '.join(c.name for c in picked.quiet_skipped)} wait until they end"
        return "idle: no task due and no signal with news"

    def _probes(self, role: Role) -> list[Probe]:
        out = [Probe("signal", name, tuple(s.command), s.timeout) for name, s in role.signals.items()]
        return out + preflight_probes(role)

    async def _run_probes(
        self, name: str, probes: list[Probe], forced: str | None, manual: bool, reply: asyncio.Future[Any] | None
    ) -> None:
        try:
            results = list(await self.probe_runner(probes, self.config.root))
        except Exception as exc:  # noqa: BLE001 - reported as a failed probe, never lost
            self.console.error(f"internal error running the probes of {name}:\n{traceback.format_exc()}")
            results = [ProbeResult(probes[0], False, problem=f"internal error: {exc}")]
        self._post(ProbesDone(name, results, forced, manual, reply))

    def _on_probes_done(self, event: ProbesDone) -> None:
        name = event.role
        self.probing.discard(name)
        self.preflight.observed(name, event.results)
        failures = [r for r in event.results if not r.ok]
        if failures:
            self._held(name, failures[0].describe)
            self._skip(name, f"held: {failures[0].describe}", event.reply)
            self.arm()
            return
        self._released(name)
        now = self.clock.now()
        if self.sup.ending:
            self._skip(name, "ending: the orchestrator is ending", event.reply)
            return
        news = [(r.probe.name, r.output) for r in event.results if r.probe.kind == "signal" and r.output]
        role = self.config.roles[name]
        picked = self.pick(name, now, event.forced)
        idle_skips = role.wake is None or role.wake.skip_when_idle
        if not event.manual and not picked.tasks and not news and idle_skips:
            self._skip(name, self._idle_reason(picked), event.reply)
        else:
            self._write_wake(name, picked, news, "signals" if news and not picked.tasks else "tasks", event.reply)
        self.arm()

    def _skip(self, name: str, reason: str, reply: asyncio.Future[Any] | None) -> None:
        now = self.clock.now()
        records.count_skip(self.db, name, reason.split(":", 1)[0])
        records.set_event(self.db, name, "skip", reason, now)
        if name not in self.next_tick and not reason.startswith(("idle", "quiet", "coalesced")):
            self.not_before[name] = now + timedelta(seconds=RECHECK)
        if reply is not None and not reply.done():
            reply.set_exception(ControlError(f"no wake of {name}: {reason}"))

    def _write_wake(
        self,
        name: str,
        picked: rules.Picked,
        news: list[tuple[str, str]],
        why: str,
        reply: asyncio.Future[Any] | None,
    ) -> None:
        now = self.clock.now()
        tasks = [c.name for c in picked.tasks]
        tasks_text = "\n".join(f"- **{c.name}**: {c.text}" for c in picked.tasks)
        signals_text = "\n\n".join(f"### {signal}\n\n{output}" for signal, output in news)
        body = ["## Tasks", "", tasks_text or "(no task is due)"]
        if news:
            body += ["", "## Signals", "", signals_text]
        subject = "Wake: " + (
            ", ".join(tasks) if tasks else "signals: " + ", ".join(s for s, _ in news) if news else "no task"
        )
        path = self._write_memo(
            name, "wake", subject, ["wake"], tasks, tasks, (tasks_text, signals_text), "\n".join(body)
        )
        if path is None:
            if reply is not None and not reply.done():
                reply.set_exception(ControlError(f"the wake memo of {name} could not be written; see the log"))
            return
        deferred = f"; deferred: {', '.join(c.name for c in picked.deferred)}" if picked.deferred else ""
        self.console.line(f"wake ({why}): {path.name} carries {', '.join(tasks) or 'no task'}{deferred}", role=name)
        records.set_event(self.db, name, "wake", f"wrote {path.name} ({', '.join(tasks) or 'signals'})", now)
        if reply is not None and not reply.done():
            reply.set_result({"role": name, "memo": path.name, "tasks": tasks, "signals": [s for s, _ in news]})

    def _write_job(self, job: Job, now: datetime) -> None:
        path = self._write_memo(
            job.role, "job", job.subject, ["job", job.name, *job.tags], [job.name], [job.key], ("", ""), job.text
        )
        if path is not None:
            self.console.line(f"job {job.name}: wrote {path.name}", role=job.role)

    def _write_memo(
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
        now = self.clock.now()
        stem = f"{kind}-{slug(name, 60)}-{new_memo_id()}"
        while records.wake(self.db, stem) is not None:
            stem += "x"
        path = self.config.role_dir(name) / INBOX / f"{stem}.md"
        front = {
            "id": stem,
            "subject": subject,
            "from": "orchestrator",
            "to": name,
            "tags": tags,
            "tasks": shown,
            "created_at": iso(now),
        }
        records.add_wake(self.db, stem, name, path.name, keys, texts, now)
        try:
            write_atomically(path, render_memo(front, body))
        except OSError as exc:
            records.drop_wake(self.db, stem)
            self.console.error(f"internal error: cannot write {path}: {exc}")
            return None
        self.sup.intake.seen(MemoSeen(name, path, complete=True))
        return path

    # ------------------------------------------------------------------ holds
    def _held(self, name: str, reason: str) -> None:
        if self.sup.holds.hold(name, HOLD_SOURCE, reason):
            self.console.line(f"wake held: {reason}", role=name)
            if reason.startswith("preflight ") and name in self.preflight.told:
                return  # the notify role was told of this preflight failure already, for the role's runs
            self.told.add(name)
            self._notify(
                name,
                f"Held: wakes of {name}",
                f"The wakes of role **{name}** are held: {reason}\n"
                "No wake memo is written and no task is marked until the command succeeds again.",
            )

    def _released(self, name: str) -> None:
        if self.sup.holds.release(name, HOLD_SOURCE) and name in self.told:
            self.told.discard(name)
            self._notify(
                name,
                f"Recovered: wakes of {name}",
                f"The signals and preflight of role **{name}** succeed again; its wakes go on.",
            )

    def preflight_recovered(self, name: str) -> None:
        """The role's preflight passed (before a run): a wake hold that a failing preflight set is lifted too."""
        if self.sup.holds.current.get(name, {}).get(HOLD_SOURCE, "").startswith("preflight "):
            self._released(name)

    def _notify(self, name: str, subject: str, body: str) -> None:
        notify = self.config.notify
        if notify is None or notify == name:
            return
        memo_id = new_memo_id()
        front = {
            "id": memo_id,
            "subject": subject,
            "from": "orchestrator",
            "to": notify,
            "tags": ["wake-hold"],
            "created_at": iso(self.clock.now()),
        }
        path = self.config.role_dir(notify) / INBOX / f"{memo_id}-{slug(subject)}.md"
        try:
            write_atomically(path, render_memo(front, body))
        except OSError as exc:
            self.console.error(f"cannot write the notice {path}: {exc}")
            return
        self.sup.intake.seen(MemoSeen(notify, path, complete=True))

    # ------------------------------------------------------------------ the end of a wake
    def run_finished(self, event: RunFinished) -> None:
        """Done means the run succeeded: its wake's tasks are marked done then, and only then."""
        run: Run = event.run
        changed = False
        for memo in run.memos:
            wake = records.wake(self.db, memo.memo_id) if memo.memo_id else None
            if wake is None or wake["outcome"] is not None or event.state is RunState.RETURNED:
                continue
            now, name = self.clock.now(), run.role.name
            changed = True
            if event.state is RunState.SUCCEEDED:
                for task in wake["tasks"]:
                    records.mark_done(self.db, name, task, now, run.run_id, run.seq)
                records.end_wake(self.db, wake["memo_id"], "succeeded", now, run.run_id, run.seq)
                records.set_event(self.db, name, "succeeded", f"run {run.seq}: done {', '.join(wake['tasks'])}", now)
            else:
                records.end_wake(self.db, wake["memo_id"], event.state.value, now, run.run_id, run.seq)
                records.set_event(
                    self.db,
                    name,
                    event.state.value,
                    f"run {run.seq}: {event.reason or event.state.value}; its tasks stay due",
                    now,
                )
                if name not in self.next_tick:
                    self.not_before[name] = now + timedelta(seconds=AFTER_FAILURE)
        if changed:
            self.arm()

    # ------------------------------------------------------------------ prompts
    def section(self, run: Run) -> dict[str, str]:
        """``$tasks`` and ``$signals`` of a wake (empty for other memos) and ``$time`` in the team's zone."""
        out = {"time": self.clock.now().astimezone(self.tz).strftime("%H:%M")}
        for memo in run.memos:
            wake = records.wake(self.db, memo.memo_id) if memo.memo_id else None
            if wake is not None:
                out["tasks"], out["signals"] = wake["tasks_text"], wake["signals_text"]
                break
        return out

    # ------------------------------------------------------------------ requests
    def _on_wake_requested(self, event: WakeRequested) -> None:
        if event.role not in self.config.roles:
            raise UsageError(f"unknown role {event.role!r}; roles: {', '.join(self.config.roles)}")
        self.tick(event.role, f"asked by {event.who}", forced=event.task, manual=True, reply=event.reply)
        self.arm()

    def _on_schedule_changed(self, event: ScheduleChanged) -> None:
        self.arm()
        event.reply.set_result({"ok": True})
