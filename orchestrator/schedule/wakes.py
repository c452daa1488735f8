"""The scheduler: heartbeats and due tasks become wake memos; a wake's tasks are done only when its run succeeds.

It is an extension of ``up`` (``orchestrator.supervisor.extension``) and owns one timer on the host's clock,
set for the earliest next tick or due time of any role (never more than ``MAX_SLEEP`` ahead, so a wall clock
that jumps is noticed within a minute; there is no polling per task). When it fires, each role that is due:

1. is skipped (no memo, no agent, no cost; counted by reason) when the orchestrator is ending, the role's
   previous wake is still queued or running (the tick is coalesced into it), its account is paused by a usage
   limit, or the role is over its budget;
2. runs its ``signals`` and ``preflight`` commands off the loop (``probes``); their outcome comes back as a
   ``ProbesDone`` event. A failing command holds the role (``host.holds``) and writes nothing;
3. picks at most ``max_tasks`` due tasks (``rules.pick``; quiet hours keep all but ``in_quiet_hours`` tasks
   out) and, unless nothing is due and no signal has news, writes one wake memo into the role's inbox.

From there the wake is an ordinary memo. ``on_finished`` marks its tasks done when
the run succeeded, and nothing otherwise.

This module is the wake itself: the timer, the skips, the probes and the end of the run. Beside it: what is due
(``due``), writing the memos (``writer``), and holding a role's wakes while a command fails
(``holds``).
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.config import RoleRun
from orchestrator.config.schedule import zone
from orchestrator.core.clock import Timer, iso
from orchestrator.core.errors import ControlError, UsageError
from orchestrator.core.events import RunFinished, ScheduleChanged, WakeRequested
from orchestrator.core.states import RunState
from orchestrator.schedule import records, rules
from orchestrator.schedule.context import ScheduleContext
from orchestrator.schedule.due import DueTasks
from orchestrator.schedule.holds import WakeHolds
from orchestrator.schedule.preflight import PreflightGate, preflight_probes
from orchestrator.schedule.probes import Probe, ProbeResult
from orchestrator.schedule.writer import MemoWriter, wake_text
from orchestrator.supervisor.extension import Extension, Handler, Host

if TYPE_CHECKING:
    from orchestrator.config import Role

MAX_SLEEP = 60.0  # the timer never sleeps longer: a wall clock that jumps (suspend, NTP) is seen within this
RECHECK = 60.0  # a due-driven role skipped (budget, held) is looked at again after this
AFTER_FAILURE = 600.0  # a role without a heartbeat is not woken again for tasks whose wake failed, for this long


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


class Wakes(Extension):
    """Heartbeats, due tasks and wake memos of one orchestrator."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.config = host.config
        self.clock = host.clock
        self.console = host.console
        self.db = host.store.db
        records.ensure_tables(self.db)
        # shared with the helpers: the wake ids on record (other memos cost no query), the roles probing now,
        # the commands under way, the zone and the probe runner (the one boundary the replay tests replace)
        self.context = ScheduleContext(host, zone(self.config.timezone), records.wake_ids(self.db))
        self.wake_ids = self.context.wake_ids
        self.probing = self.context.probing
        self.tasks = self.context.tasks
        self.timer: Timer | None = None
        self.started = False
        self.next_tick: dict[str, datetime] = {}
        self.not_before: dict[str, datetime] = {}
        self._post: Callable[[Any], None] = host.post  # events of this module's own, through the loop
        self.due = DueTasks(self.context)
        self.writer = MemoWriter(self.context)
        self.holding = WakeHolds(self.context, self.writer, lambda name: name in self.preflight.told)
        # the preflight before every run, not only wakes
        self.preflight = PreflightGate(self.context, self.writer, self.holding)

    @property
    def tz(self) -> tzinfo:
        return self.context.tz

    @tz.setter
    def tz(self, value: tzinfo) -> None:
        self.context.tz = value

    @property
    def probe_runner(self) -> Callable[[list[Probe], Path], Any]:
        return self.context.probe_runner

    @probe_runner.setter
    def probe_runner(self, value: Callable[[list[Probe], Path], Any]) -> None:
        self.context.probe_runner = value

    def handlers(self) -> Mapping[type, Handler]:
        return {
            WakeDue: self._on_due,
            ProbesDone: self._on_probes_done,
            WakeRequested: self._on_wake_requested,
            ScheduleChanged: self._on_schedule_changed,
            **self.preflight.handlers(),
        }

    def check_holds(self) -> None:
        self.preflight.check()

    def stop(self) -> None:
        """The orchestrator is ending: no next wake, and the commands under way are abandoned."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for task in list(self.tasks):
            task.cancel()

    def start(self) -> None:
        """Begin: heartbeats missed while the orchestrator was down tick once now, never as a backlog."""
        self.started = True
        now = self.clock.now()
        for name, role in self.config.roles.items():
            if role.wake is not None and role.wake.every:
                last = records.when(records.state(self.db, name)["last_tick"])
                self.next_tick[name] = rules.next_tick(last, role.wake.every, now)
        self.arm()

    def snapshot(self, full: bool) -> dict[str, Any]:
        return {"wakes": self.status()} if full else {}

    def status(self) -> dict[str, Any]:
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
        """The roles with a heartbeat, task rules, or open ledger tasks."""
        ledger_roles = {row["role"] for row in records.ledger(self.db, open_only=True)}
        return [
            name
            for name, role in self.config.roles.items()
            if role.wake is not None or role.tasks or name in ledger_roles
        ]

    # ------------------------------------------------------------------ the one timer
    def arm(self) -> None:
        """Set the one timer for the earliest next tick or due time (at most ``MAX_SLEEP`` ahead)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if not self.started or self.host.ending():
            return
        now = self.clock.now()
        moments = [m for m in (self._next_moment(name, now) for name in self.scheduled_roles()) if m is not None]
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
        if name in self.probing or self.due.pending(name):
            return None  # re-armed when that wake ends
        eligible = [self.due.eligible_at(role, due) for due in self.due.tasks(name, now) if due.due_at is not None]
        if not eligible:
            return None
        return max(min(eligible), self.not_before.get(name, now))

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
        self.arm()

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
        if self.host.ending():
            skip = "ending: the orchestrator is ending"
        elif not manual and (pause := self.host.paused(name)) is not None:  # said first: the wake that met the
            skip = f"paused: {pause}"  # limit waits in the inbox, so the tick would be coalesced into it too
        elif not manual and (over := self.host.over_budget(name)) is not None:
            skip = f"budget: {over}"
        elif name in self.probing or self.due.pending(name):
            skip = "coalesced: the previous wake is still queued or running"
        if skip is not None:
            self._skip(name, skip, reply)
            return
        picked = self.due.pick(name, now, forced)
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
            self.holding.hold(name, failures[0].describe)
            self._skip(name, f"held: {failures[0].describe}", event.reply)
            self.arm()
            return
        self.holding.release(name)
        now = self.clock.now()
        if self.host.ending():
            self._skip(name, "ending: the orchestrator is ending", event.reply)
            return
        news = [(r.probe.name, r.output) for r in event.results if r.probe.kind == "signal" and r.output]
        role = self.config.roles[name]
        picked = self.due.pick(name, now, event.forced)
        idle_skips = role.wake is None or role.wake.skip_when_idle
        if not event.manual and not picked.tasks and not news and idle_skips:
            self._skip(name, self._idle_reason(picked), event.reply)
        else:
            self._write_wake(name, picked, news, "signals" if news and not picked.tasks else "tasks", event.reply)
        self.arm()

    def _skip(self, name: str, reason: str, reply: asyncio.Future[Any] | None) -> None:
        if reply is not None:  # a person's wake, refused: answered, and no tick's skip
            if not reply.done():
                reply.set_exception(ControlError(f"no wake of {name}: {reason}"))
            return
        now = self.clock.now()
        records.count_skip(self.db, name, reason.split(":", 1)[0])
        records.set_event(self.db, name, "skip", reason, now)
        if name not in self.next_tick and not reason.startswith(("idle", "quiet", "coalesced")):
            self.not_before[name] = now + timedelta(seconds=RECHECK)

    def _write_wake(
        self,
        name: str,
        picked: rules.Picked,
        news: list[tuple[str, str]],
        why: str,
        reply: asyncio.Future[Any] | None,
    ) -> None:
        now = self.clock.now()
        text = wake_text(picked, news)
        tasks = text.tasks
        path = self.writer.write(
            name, "wake", text.subject, ["wake"], tasks, tasks, (text.tasks_text, text.signals_text), text.body
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

    # ------------------------------------------------------------------ the end of a wake
    def on_finished(self, event: RunFinished) -> None:
        """Done means the run succeeded: its wake's tasks are marked done then, and only then."""
        run: RoleRun = event.run
        changed = False
        for memo in run.memos:
            wake = records.wake(self.db, memo.memo_id) if memo.memo_id in self.wake_ids else None
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
    def sections(self, run: RoleRun) -> dict[str, str]:
        """``$tasks`` and ``$signals`` of a wake (empty for other memos) and ``$time`` in the team's zone."""
        out = {"time": self.clock.now().astimezone(self.tz).strftime("%H:%M")}
        for memo in run.memos:
            wake = records.wake(self.db, memo.memo_id) if memo.memo_id in self.wake_ids else None
            if wake is not None:
                out["tasks"], out["signals"] = wake["tasks_text"], wake["signals_text"]
                break
        return out

    # ------------------------------------------------------------------ requests
    def _on_wake_requested(self, event: WakeRequested) -> None:
        if event.role not in self.config.roles:
            raise UsageError(f"unknown role {event.role!r}; roles: {', '.join(self.config.roles)}")
        if event.task is not None:  # said first: a task that is none of the role's is no wake to coalesce
            self.due.known(event.role, event.task, self.clock.now())
        self.tick(event.role, f"asked by {event.who}", forced=event.task, manual=True, reply=event.reply)
        self.arm()

    def _on_schedule_changed(self, event: ScheduleChanged) -> None:
        self.arm()
        event.reply.set_result({"ok": True})
