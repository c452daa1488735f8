"""Usage limits pause an account; they do not fail its memos.

A run whose verdict says the account hit a usage or rate limit (a Claude plan's
5-hour or weekly limit, an API organisation's 429) never got to work: it ends
``returned``, its memos go back to the front of the inbox with the attempts they
had, and its **account** (``Role.account``; the team by default) is paused: no
new run of any role on it starts. With the limit's reset time known, the pause
lasts until then. Without one, a single probe run may start after
``usage_limits.probe``; a probe that meets the limit again waits twice as long
(up to ``max_probe``), and one that ends any other way ends the pause (the API
answered: whatever else went wrong is the role's own). Runs already going keep
going. A pause and its end are one log line each and one notice each for the
``notify`` role. All timing is on the supervisor's clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.config import Config, RoleRun
from orchestrator.console import Console
from orchestrator.core.agent import UsageLimit
from orchestrator.core.clock import Clock, Timer, iso
from orchestrator.core.events import Event, RunFinished
from orchestrator.core.states import RunState
from orchestrator.core.team_events import TeamEvent
from orchestrator.intake import notices
from orchestrator.intake.queue import Intake
from orchestrator.supervisor.lifecycle import Lifecycle


@dataclass(frozen=True)
class PauseDue:
    """An account's pause has reached its reset time, or the time of its next probe."""

    account: str


@dataclass
class Pause:
    """One paused account: why, until when (epoch seconds), or when its next probe may start."""

    account: str
    limit: UsageLimit
    until: float | None = None  # the limit's reset, when known: no run starts before it
    probe_wait: float = 0.0  # seconds from the last limit to the next probe (no reset known)
    probe_at: float | None = None  # epoch seconds when the next probe may start
    probe_open: bool = False  # the probe's time has come: the next run of the account to start is the probe
    probe_run: int | None = None  # the run id of the probe under way
    timer: Timer | None = field(default=None, repr=False)


class Pauses:
    """The paused accounts; consulted where starts are picked, told of each start, each limit and each end."""

    def __init__(
        self,
        config: Config,
        lifecycle: Lifecycle,
        intake: Intake,
        console: Console,
        clock: Clock,
        post: Callable[[Event], None],
    ) -> None:
        self.config = config
        self.lc = lifecycle
        self.intake = intake
        self.console = console
        self.clock = clock
        self.post = post
        self.current: dict[str, Pause] = {}
        lifecycle.listeners.append(self.run_finished)

    def account_roles(self, account: str) -> list[str]:
        return [name for name, role in self.config.roles.items() if role.account == account]

    # ------------------------------------------------------------ what may start
    def blocked(self) -> list[str]:
        """The roles that start nothing now: every role of a paused account, but for the one probe when due."""
        out: list[str] = []
        for account, pause in self.current.items():
            if not (pause.probe_open and pause.probe_run is None):
                out += self.account_roles(account)
        return out

    def paused_role(self, role: str) -> Pause | None:
        """The pause of the account ``role`` runs on, if it is paused."""
        return self.current.get(self.config.roles[role].account)

    def why_paused(self, role: str) -> str | None:
        """Why ``role``'s account is paused by a usage limit, in a few words, or None."""
        pause = self.paused_role(role)
        return None if pause is None else f"usage limit ({pause.limit.kind}) on account {pause.account}"

    def starting(self, run: RoleRun) -> None:
        """A run is starting: when its account's probe was due, this run is the probe."""
        pause = self.current.get(run.role.account)
        if pause is not None and pause.probe_open and pause.probe_run is None:
            pause.probe_run = run.run_id
            self.console.line(f"account {pause.account}: run {run.run_id} probes the usage limit", role=run.role.name)

    # ------------------------------------------------------------ what an attempt's end says
    def limited(self, run: RoleRun, limit: UsageLimit, exit_code: int | None) -> None:
        """The run met its account's usage limit: memos back to the inbox, attempts unchanged; the account paused."""
        role = run.role
        pause = self.current.get(role.account)
        was_probe = pause is not None and pause.probe_run == run.run_id
        reason = f"usage limit ({limit.kind}): {limit.detail}"
        self.lc.end_attempt(run, "usage_limit", reason, exit_code)

        def back(moved: list[Path]) -> None:
            self.intake.put_back(role.name, moved, run.arrival)
            self.console.line(
                f"run {run.run_id} met the usage limit ({limit.kind}); "
                f"{notices.name_list([p.name for p in moved]) or 'its memos'} went back to the inbox, no attempt used",
                role=role.name,
            )

        self.lc.finish(
            run,
            RunState.RETURNED,
            reason=reason,
            exit_code=exit_code,
            attempts_used=run.attempt - 1,  # the limit, not the work, ended it: the memos keep every retry
            announce=False,
            then=back,
        )
        self._pause(role.account, limit, was_probe)

    def ran(self, run: RoleRun) -> None:
        """The run's attempt ended without a usage limit: when it was its account's probe, the pause is over."""
        pause = self.current.get(run.role.account)
        if pause is not None and pause.probe_run == run.run_id:
            self._resume(pause, f"probe run {run.run_id} got through")

    def run_finished(self, event: RunFinished) -> None:
        """A probe that ended before its agent could say anything (cancelled, not started): the next start probes."""
        run = event.run
        pause = self.current.get(run.role.account)
        if pause is not None and pause.probe_run == run.run_id:
            pause.probe_run = None

    # ------------------------------------------------------------ the pause itself
    def _pause(self, account: str, limit: UsageLimit, was_probe: bool) -> None:
        now = self.clock.now().timestamp()
        usage = self.config.usage_limits
        pause = self.current.get(account)
        fresh = pause is None
        if pause is None:
            pause = self.current[account] = Pause(account, limit)
        pause.limit = limit
        if limit.resets_at is not None and limit.resets_at > now:
            pause.until = max(pause.until or 0.0, limit.resets_at)
            pause.probe_at, pause.probe_open, pause.probe_run = None, False, None
            self._arm(pause, pause.until - now)
        elif pause.until is None and (fresh or was_probe):
            # no reset known: probe after a wait that doubles each time the probe meets the limit again
            pause.probe_wait = usage.probe if fresh else min(pause.probe_wait * 2, usage.max_probe)
            pause.probe_at = now + pause.probe_wait
            pause.probe_open, pause.probe_run = False, None
            self._arm(pause, pause.probe_wait)
        if fresh:
            line = f"paused: usage limit ({limit.kind}) {self._when(pause)}: {limit.detail}"
            self.console.line(f"account {account} {line}; its roles start nothing new, runs going keep going")
            self._notice(account, f"Paused: usage limit ({limit.kind})", line)
            self.lc.team_events(TeamEvent("paused", reason=f"account {account} {line}"))
        elif pause.probe_at is not None and pause.until is None:
            self.console.line(f"account {account}: the probe met the usage limit again; next probe {self._when(pause)}")

    def _arm(self, pause: Pause, delay: float) -> None:
        if pause.timer is not None:
            pause.timer.cancel()
        pause.timer = self.clock.call_later(max(0.0, delay), self.post, PauseDue(pause.account))

    def due(self, event: PauseDue) -> None:
        """The reset time has come (the pause ends), or the probe's (one run may start)."""
        pause = self.current.get(event.account)
        if pause is None:
            return
        pause.timer = None
        if pause.until is not None:
            self._resume(pause, f"its reset time {self._clock_time(pause.until)} has come")
        else:
            pause.probe_open = True
            self.console.line(f"account {pause.account}: the next run to start probes the usage limit")

    def _resume(self, pause: Pause, why: str) -> None:
        if pause.timer is not None:
            pause.timer.cancel()
        del self.current[pause.account]
        line = f"resumed after the usage limit ({pause.limit.kind}): {why}"
        self.console.line(f"account {pause.account} {line}; new work starts again")
        self._notice(pause.account, f"Resumed after the usage limit ({pause.limit.kind})", line)
        self.lc.team_events(TeamEvent("resumed", reason=f"account {pause.account} {line}"))

    def _when(self, pause: Pause) -> str:
        if pause.until is not None:
            return f"until {self._clock_time(pause.until)}"
        if pause.probe_at is not None:
            return f"until a probe run gets through (first at {self._clock_time(pause.probe_at)})"
        return "until a probe run gets through"

    def _clock_time(self, epoch: float) -> str:
        moment = datetime.fromtimestamp(epoch, self.clock.now().tzinfo)
        same_day = moment.date() == self.clock.now().date()
        return moment.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M")

    def _notice(self, account: str, subject: str, line: str) -> None:
        notify = self.config.notify
        if notify is None:
            return
        roles = self.account_roles(account)
        try:
            notices.write_pause_notice(self.config, notify, account, roles, subject, line, self.clock.now())
        except OSError as exc:
            self.console.error(f"cannot write the usage-limit notice for {notify}: {exc}")

    # ------------------------------------------------------------ status
    def snapshot(self) -> dict[str, Any]:
        """For ``status --json``: ``{ACCOUNT: {until, reason, probe_at, roles}}`` (times in ISO 8601)."""

        def when(epoch: float | None) -> str | None:
            return None if epoch is None else iso(datetime.fromtimestamp(epoch, self.clock.now().tzinfo))

        return {
            account: {
                "until": when(pause.until),
                "reason": f"usage limit ({pause.limit.kind})",
                "kind": pause.limit.kind,
                "detail": pause.limit.detail,
                "probe_at": when(pause.probe_at),
                "probing": pause.probe_run,
                "roles": self.account_roles(account),
            }
            for account, pause in self.current.items()
        }
