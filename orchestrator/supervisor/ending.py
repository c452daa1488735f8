"""How ``orchestrator up`` ends: the decision (graceful or force, why, with what exit status), the signals and the
stop requests that ask for it, and the last steps once nothing runs.

Graceful: nothing new starts and the running agents finish. Force: every agent is stopped and its memos go back to
the inbox. A force ending overrides a graceful one, never the other way round; the signal handlers only record
(a posted ``SignalReceived``), and three Ctrl-C presses within a second escalate.
"""

from __future__ import annotations

import asyncio
import signal
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.core import events as ev
from orchestrator.core.states import Ending, RunState
from orchestrator.core.team_events import TeamEvent
from orchestrator.supervisor.outcomes import FORCED

if TYPE_CHECKING:
    from orchestrator.console import Console
    from orchestrator.core.clock import Clock
    from orchestrator.supervisor.agent_stops import AgentStops
    from orchestrator.supervisor.lifecycle import Lifecycle

FORCE_PRESSES = 3  # Ctrl-C presses within FORCE_WINDOW that kill every agent
FORCE_WINDOW = 1.0
# the states a force ending stops (a run already being stopped keeps its own reason and end, ``STOP_ENDS``)
FORCE_STOPS = frozenset({RunState.STARTING, RunState.RUNNING, RunState.INTERRUPTING, RunState.TIMING_OUT})


class Endings:
    """The one decision of how the orchestrator ends; ``mode`` is None while it is not ending."""

    def __init__(self, lifecycle: Lifecycle, agent_stops: AgentStops, console: Console) -> None:
        self.lc = lifecycle
        self.agent_stops = agent_stops
        self.console = console
        self.mode: Ending | None = None
        self.exit_code = 0
        self.sigints: deque[float] = deque(maxlen=FORCE_PRESSES)
        self.stopped_told = False  # the one ``stopped`` team event of this exit has been announced

    def begin(self, mode: Ending, why: str, exit_code: int | None = None) -> None:
        """End gracefully or by force, for ``why``; ``exit_code``: the status ``up`` exits with (the first one set)."""
        if exit_code is not None and self.exit_code == 0:
            self.exit_code = exit_code
        if (exit_code or mode is Ending.FORCE) and not self.stopped_told:
            self.stopped_told = True  # one exit, one notice: a crash loop and a stop_on_failure may both ask
            self.lc.team_events(TeamEvent("stopped", reason=why))
        if self.mode is mode or self.mode is Ending.FORCE:
            return
        self.mode = mode
        running = self.lc.slots.in_use
        if mode is Ending.GRACEFUL:
            self.console.line(f"ending: {why}; waiting for {running} running agent(s); nothing new starts")
        else:
            self.exit_code = self.exit_code or 1
            self.console.line(f"ending now: {why}; stopping {running} agent(s) and returning their memos")
        for run in list(self.lc.runs.values()):
            if run.settling is not None:
                continue  # its agent is gone; its end is under way
            if run.state is RunState.RETRY_WAIT:
                self.lc.finish(run, RunState.RETURNED, reason="the orchestrator ended before the retry")
            elif mode is Ending.FORCE and run.state in FORCE_STOPS:
                self.lc.transition(run, RunState.STOPPING, reason=FORCED)
                if run.agent is not None:  # else its start (or failure) brings the stop
                    self.agent_stops.stop(run, 0.0)

    def on_signal(self, event: ev.SignalReceived) -> None:
        if event.signum == signal.SIGINT:
            self.sigints.append(event.at)
            if len(self.sigints) == FORCE_PRESSES and self.sigints[-1] - self.sigints[0] <= FORCE_WINDOW:
                self.begin(Ending.FORCE, f"Ctrl-C pressed {FORCE_PRESSES} times")
                return
            self.begin(Ending.GRACEFUL, "Ctrl-C (press it 3 times within a second to kill the agents)")
        else:
            self.begin(Ending.GRACEFUL, f"signal {signal.Signals(event.signum).name}")

    def on_stop(self, event: ev.StopRequested) -> None:
        flag = " --force" if event.force else ""
        self.begin(Ending.FORCE if event.force else Ending.GRACEFUL, f"`orchestrator stop{flag}` from {event.who}")
        event.reply.set_result({"ending": self.mode.value if self.mode else None})


def install_signals(loop: asyncio.AbstractEventLoop, post: Callable[[object], None], clock: Clock) -> None:
    """SIGINT and SIGTERM post a ``SignalReceived`` (the handler only records; the loop decides what it means);
    SIGHUP and SIGPIPE are ignored."""

    def record(signum: int) -> None:
        post(ev.SignalReceived(signum, clock.monotonic()))

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, record, signum)
    loop.add_signal_handler(signal.SIGHUP, lambda: None)
    loop.add_signal_handler(signal.SIGPIPE, lambda: None)
