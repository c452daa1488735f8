"""``Notifier``: the extension that turns what the loop sees into notifications, one worker per channel.

It hears the core's ``TeamEvent`` (a pause, a held memo, a stall, a crash loop, a stop) and every run's end (a
failure), builds the payload on the loop (cheap) and hands it to each channel that wants that kind of event; the
sending happens on the channel's thread. A question is told again every ``remind`` (``Reminders``, on the loop's
clock) until its memo runs again or its run ends.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass

from orchestrator.config import RoleRun
from orchestrator.config.notify import channel_label
from orchestrator.core.events import RunFinished
from orchestrator.core.states import RunState
from orchestrator.core.team_events import TeamEvent
from orchestrator.notify.channels import AnyChannel, scrub, secrets_of, send
from orchestrator.notify.delivery import ChannelWorker, Deliver, Deliveries, Settle, memo_key
from orchestrator.notify.payload import payload
from orchestrator.notify.reminders import Reminders, RemindersDue
from orchestrator.supervisor.extension import Extension, Handler, Host

JOIN_AT_END = 5.0  # seconds the end waits for what is still queued (a `stopped` notice) before it goes


@dataclass(frozen=True)
class NotifyLine:
    """A line from a channel's thread, posted to the loop: the console is the loop's to write to."""

    text: str


class Notifier(Extension):
    """Notifications (``notifications:`` in roles.yaml)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.workers: list[tuple[AnyChannel, ChannelWorker]] = []
        self.named: dict[int, list[str]] = {}  # run -> its memos' names before its end moved them
        self.told: list[set[str]] = []  # per channel, the memos (``memo_key``) it was sent something about
        self.reminders = Reminders(host.clock, host.post)
        names = [getattr(c, key, None) for c in host.config.notifications for key in ("url_env", "secret_env")]
        self.secret_names = sorted({name for name in names if name})
        for index, channel in enumerate(host.config.notifications):
            self.workers.append((channel, ChannelWorker(self._deliveries(index, channel))))
            self.told.append(set())

    def _deliveries(self, index: int, channel: AnyChannel) -> Deliveries:
        secrets = secrets_of(channel, os.environ)
        root = self.host.config.root

        def log(text: str) -> None:
            self.host.post(NotifyLine(scrub(text, secrets)))

        return Deliveries(
            channel_label(index, channel),
            lambda body: send(channel, body, os.environ, root),
            log,
            backoff=tuple(channel.backoff),
        )

    def handlers(self) -> dict[type, Handler]:
        return {
            NotifyLine: lambda event: self.host.console.line(f"notify: {event.text}"),
            RemindersDue: self._remind,
        }

    def on_team_event(self, event: TeamEvent) -> None:
        body = payload(event, self.host.config, self.host.clock.now())
        for index, ((channel, worker), told) in enumerate(zip(self.workers, self.told, strict=True)):
            if event.kind in channel.events:
                worker.submit(Deliver(body))
                if event.memo:
                    key = memo_key(event.role, event.memo)
                    told.add(key)
                    if event.kind == "needs_input" and channel.remind is not None:
                        self.reminders.asked(index, key, body, channel.remind)

    def _remind(self, _event: RemindersDue) -> None:
        for index, body in self.reminders.due():
            self.workers[index][1].submit(Deliver(body))

    def before_finish(self, run: RoleRun, state: RunState, reason: str | None) -> None:
        self.named[run.run_id] = [memo.name for memo in run.memos]  # the move may rename them

    def on_finished(self, event: RunFinished) -> None:
        run: RoleRun = event.run
        before = self.named.pop(run.run_id, [])
        if event.state is not RunState.RETURNED:
            self._settle(run, before)
        if event.state in (RunState.FAILED, RunState.TIMED_OUT):
            first = run.memos[0]
            self.on_team_event(
                TeamEvent("failed", run.role.name, first.name, first.subject, event.reason or event.state.value)
            )

    def agent_env(self, run: RoleRun) -> dict[str, str]:
        """The channels' variables emptied in every agent's environment (unless its role sets one itself): an
        agent has no use for the team's webhook URL or HMAC key, and must not be able to leak them."""
        return {name: "" for name in self.secret_names if name not in run.role.env}

    def on_transition(self, run: RoleRun, old: RunState, new: RunState) -> None:
        if new is RunState.STARTING:  # a question answered runs its memo again
            self._settle(run)

    def _settle(self, run: RoleRun, before: list[str] | None = None) -> None:
        """Tell each channel that was sent something about the run's memos (under their names before its end moved
        them, or after) that it is over; the others are not queued anything, so a channel that is down fills its
        queue with nothing but news."""
        names = {memo_key(run.role.name, name) for name in (*(before or ()), *(memo.name for memo in run.memos))}
        for index, ((_channel, worker), told) in enumerate(zip(self.workers, self.told, strict=True)):
            self.reminders.settled(index, names)
            over = told & names
            if over:
                told -= over
                worker.submit(Settle(tuple(sorted(over))))

    def start(self) -> None:
        for _channel, worker in self.workers:
            worker.start()

    def stop(self) -> None:
        self.reminders.stop()

    async def close(self) -> None:
        for _channel, worker in self.workers:
            worker.stop()
        alive = [worker for _channel, worker in self.workers if worker.thread.is_alive()]
        await asyncio.gather(*(asyncio.to_thread(worker.join, JOIN_AT_END) for worker in alive))
