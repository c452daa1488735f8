"""The supervisor: one asyncio loop, the one owner of all run state.

Start-up (folders, recovery, watcher, control channel, first scan), then one
event at a time until told to end, then shutdown. The inbox watcher, the
agents' exit watchers, spawn and stop tasks, timers, signals and the control
channel only post typed events (``orchestrator.core.events``); ``handle``
dispatches each to the module that owns the decision, and every change of a
run goes through the lifecycle. A broken invariant is never swallowed: it is
logged with its traceback and the run it concerns ends as failed with reason
"internal error: ...", its memo in ``failed/``.

Life of a memo: seen in ``inbox/`` -> queued (FIFO) -> claimed by an atomic
rename into ``active/`` when its agent starts -> ``archive/`` on exit 0, or
retried, or ``failed/`` / ``cancelled/``. Work is started the moment it is
seen complete and the limits allow: there is no debounce delay.
"""

from __future__ import annotations

import asyncio
import os
import signal
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from orchestrator.agents import children, keeper, procs
from orchestrator.agents.spawner import Spawner, choose_spawner
from orchestrator.config import Config
from orchestrator.console import Console
from orchestrator.continuity import hooks as continuity
from orchestrator.control import protocol
from orchestrator.control.channel import Peer
from orchestrator.core import events as ev
from orchestrator.core.clock import Clock, SystemClock, iso
from orchestrator.core.errors import OrchestratorError
from orchestrator.core.run import Run
from orchestrator.core.states import RunState
from orchestrator.intake.memo import FOLDERS
from orchestrator.intake.queue import Intake
from orchestrator.memory import keeper as memory_keeper
from orchestrator.prompts import load_template
from orchestrator.retention.daily import DailyPass
from orchestrator.schedule.wakes import Wakes
from orchestrator.store import Store
from orchestrator.supervisor import nodes, snapshot
from orchestrator.supervisor.breaker import Breaker
from orchestrator.supervisor.budgets import Budgets
from orchestrator.supervisor.endings import Endings
from orchestrator.supervisor.gate import Gate
from orchestrator.supervisor.holds import Holds
from orchestrator.supervisor.launch import Launcher
from orchestrator.supervisor.lifecycle import Lifecycle
from orchestrator.supervisor.outcomes import FORCED, Outcomes
from orchestrator.supervisor.pauses import PauseDue, Pauses
from orchestrator.supervisor.requests import Requests
from orchestrator.supervisor.slots import Slots
from orchestrator.supervisor.start_faults import StartFaults, StartsResume
from orchestrator.supervisor.stopping import Stopper

FORCE_PRESSES = 3  # Ctrl-C presses within FORCE_WINDOW that kill every agent
FORCE_WINDOW = 1.0
IDLE_EXIT_AFTER = 1.5
INTERNAL_ERROR_ANSWER = "internal error; see .orchestrator/orchestrator.log"


class Supervisor:
    """Runs one project root until told to end; ``serve`` returns the exit status."""

    def __init__(
        self,
        config: Config,
        console: Console,
        *,
        until_idle: bool = False,
        clock: Clock | None = None,
        spawner: Spawner | None = None,
    ) -> None:
        self.config = config
        self.root = config.root
        self.console = console
        self.until_idle = until_idle
        self.clock: Clock = clock or SystemClock()
        self.store = Store(config.state_dir / "state.db")
        templates = {name: load_template(self.root / role.prompt) for name, role in config.roles.items()}
        self.intake = Intake(
            list(config.roles),
            config.role_dir,
            console,
            self.store,
            lambda delay, callback: self.clock.call_later(delay, callback),
            self._after_event,
            lambda: self.clock.now().timestamp(),
        )
        slots = Slots({name: role.limit for name, role in config.roles.items()}, config.max_concurrent)
        self.lc = Lifecycle(
            config, self.store, console, self.clock, slots, Endings(config, self.store, console, self.clock)
        )
        self.stopper = Stopper(spawner or choose_spawner(config, console.line, self.clock), console, self.post)
        self.budgets = Budgets(config, self.store, console)
        self.holds = Holds(console)
        self.launcher = Launcher(
            config, self.store, console, self.clock, self.lc, self.intake, self.stopper.spawner, templates, self.handle
        )
        self.launcher.memo_checks.append(Breaker(config, self.store, console, self.clock).check)
        self.start_faults = StartFaults(self.lc, self.intake, self.holds, console, self.clock, self.handle)
        self.outcomes = Outcomes(
            self.lc,
            self.stopper,
            self.store,
            console,
            self.handle,
            lambda: self.ending,
            self.begin_ending,
            self._refresh_budgets,
            self.start_faults,
        )
        self.pauses = Pauses(config, self.lc, self.intake, console, self.clock, self.handle)
        self.outcomes.pauses = self.pauses
        self.launcher.gates.append(self.pauses.blocked)
        self.launcher.on_start.append(self.pauses.starting)
        self.requests = Requests(self.lc, self.intake, self.stopper, self.store, console, self.handle)
        self.gate = Gate(config, self.store, console, self.clock, lambda: self.lc.runs.values(), self.requests.find)
        self.continuity = continuity.install(self)
        nodes.install(self)
        self.handlers: dict[type, Callable[[Any], None]] = {
            ev.MemoSeen: self.intake.seen,
            ev.MemoGone: self.intake.gone,
            ev.RescanNeeded: self._on_rescan,
            ev.AgentStarted: self.outcomes.started,
            ev.AgentStartFailed: self.outcomes.start_failed,
            ev.RunExited: self.outcomes.exited,
            ev.StopDone: self.outcomes.stopped,
            ev.TimeoutFired: self.outcomes.timed_out,
            ev.StallCheck: self.outcomes.stall_check,
            ev.RetryDue: self.outcomes.retry_due,
            StartsResume: self.start_faults.resume,
            PauseDue: self.pauses.due,
            ev.InterruptRefused: self.requests.interrupt_refused,
            ev.SignalReceived: self._on_signal,
            ev.Tick: self._on_tick,
            ev.StatusRequested: lambda e: e.reply.set_result(self.snapshot()),
            ev.StopRequested: self._on_stop,
            ev.CancelRequested: self.requests.cancel,
            ev.InterruptRequested: self.requests.interrupt,
            ev.TellRequested: self.requests.tell,
        }
        self.wakes = Wakes(self)  # registers its own events, a finish listener and a prompt section
        self.ending: str | None = None  # None, "graceful" or "force"
        self.exit_code = 0
        self.sigints: deque[float] = deque(maxlen=FORCE_PRESSES)
        self.done = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.watcher: Any = None
        self.adopter: Any = None  # recovery's adopter; it keeps spent exit records to remove in batches
        self.control: Any = None
        self.web: Any = None  # the dashboard (orchestrator/web), when `web:` or `up --web` asks for it
        self.tracing: Any = None  # OpenTelemetry spans per run (orchestrator/web/otel.py), when a collector is named
        self.recovery: keeper.RecoveryMode | None = None  # what a crash costs, found at start-up (status says it)
        self._idle_since: float | None = None
        self.started_at = iso(self.clock.now())
        self.memory = memory_keeper.attach(self)
        self.retention = DailyPass(self)  # registers its own events; its timer starts with ``serve``

    @property
    def runs(self) -> dict[int, Run]:
        return self.lc.runs

    # ------------------------------------------------------------------ events
    def post(self, event: ev.Event) -> None:
        """Thread-safe: hand an event to the loop."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.handle, event)

    def handle(self, event: ev.Event) -> None:
        """Dispatch one event to its owner, then start what may start; nothing here is ever swallowed."""
        # one transaction per event: its records land together (an agent's start: with the next event's)
        with self.store.batch(lazy=isinstance(event, ev.AgentStarted)):
            try:
                handler = self.handlers.get(type(event))
                if handler is None:
                    raise TypeError(f"no handler for event {event!r}")
                handler(event)
            except OrchestratorError as exc:  # a refusal, for the person who asked
                reply = getattr(event, "reply", None)
                if reply is None or reply.done():
                    self.internal_error(event, exc)
                else:
                    reply.set_exception(exc)
            except Exception as exc:  # noqa: BLE001 - a bug: loud, and the run it concerns ends as failed
                self.internal_error(event, exc)
            self._after_event()

    def internal_error(self, event: Any, exc: BaseException) -> None:
        """A broken invariant: logged with its traceback; the run it concerns ends as failed, its memo kept."""
        detail = "".join(traceback.format_exception(exc))
        self.console.error(f"internal error while handling {type(event).__name__}: {exc}\n{detail}")
        reply = getattr(event, "reply", None)
        if reply is not None and not reply.done():
            from orchestrator.core.errors import ControlError

            reply.set_exception(ControlError(INTERNAL_ERROR_ANSWER))
        run = self.lc.runs.get(getattr(event, "run_id", -1))
        if run is not None:
            self.fail_internal(run, f"internal error: {type(exc).__name__}: {exc}")

    def fail_internal(self, run: Run, reason: str) -> None:
        """End a run that a bug left in an unknown condition: its agent stopped, its memo to failed/."""
        if run.agent is not None and run.state.live:
            self.stopper.orphan(run.agent, run.run_id)
        try:
            self.lc.finish(
                run, RunState.FAILED, reason=reason, exit_code=run.exit_codes[-1] if run.exit_codes else None
            )
        except Exception as again:  # noqa: BLE001 - the last resort: the run must leave the table
            self.console.error(
                f"internal error: run {run.run_id} could not be ended ({again}); dropping it\n"
                + "".join(traceback.format_exception(again))
            )
            self.lc.drop(run)

    def _after_event(self) -> None:
        try:
            if not self.ending:
                self.launcher.schedule(self.budgets.blocked() + self.holds.held_roles())
        except Exception as exc:  # noqa: BLE001
            self.internal_error(ev.Tick(), exc)
        if self.ending and not self.lc.runs:
            self.done.set()

    # ------------------------------------------------------------------ life
    async def serve(self) -> int:
        from orchestrator.control.channel import ControlServer, socket_path
        from orchestrator.intake.inotify import make_watcher
        from orchestrator.supervisor.adoption import Adopter
        from orchestrator.supervisor.recovery import recover

        self.loop = asyncio.get_running_loop()
        procs.become_subreaper()
        children.use_pidfd_watcher()
        self.store.for_the_loop()
        for role in self.config.roles:
            # every folder now, so each is under the watch before a memo moves into it: a move into a folder
            # made a moment earlier is seen as half a move, which watchdog holds 0.5 s, stalling every event
            for folder in FOLDERS:
                (self.config.role_dir(role) / folder).mkdir(parents=True, exist_ok=True)
        self.recovery = keeper.recovery_mode(self.config.recovery, self.config.executor.kind)
        self.adopter = Adopter(*self._recovery_parts())
        await recover(self.config, self.store, self.console, self.lc, self.adopter)
        self.memory.start()
        self._refresh_budgets()
        self._install_signals()
        # the watcher starts before the first scan, so a memo written meanwhile is seen by one or both;
        # the claim rename makes sure it runs once either way
        self.watcher = make_watcher({r: self.config.role_dir(r) for r in self.config.roles}, self.post, self.handle)
        self.watcher.start()
        if self.watcher.patch_problem:
            self.console.line(self.watcher.patch_problem)
        self.control = ControlServer(socket_path(self.root), self.answer, self.console.error, log=self.console.line)
        await self.control.start()
        self.web, self.tracing = await _start_observers(self)
        self.console.line(
            f"orchestrator up: {len(self.config.roles)} roles, max_concurrent {self.config.max_concurrent}, "
            f"root {self.root} (pid {os.getpid()}); {self.recovery.line}"
        )
        self.intake.rescan(initial=True)
        self.wakes.start()
        self.retention.start()
        self._after_event()
        ticker = asyncio.ensure_future(self._tick())
        self.console.start_live(self)
        try:
            await self.done.wait()
        finally:
            ticker.cancel()
            self.retention.stop()
            self.console.stop_live()
            self.watcher.stop()
            self.adopter.flush_records()
            await self.control.close()
            if self.web is not None:
                await self.web.stop()
            if self.tracing is not None:
                self.tracing.shutdown()
            await self.stopper.drain(max(r.grace for r in self.config.roles.values()) + 6)
            for task in [*self.launcher.tasks, *self.requests.tasks, *self.wakes.tasks]:
                task.cancel()
            self.store.close()
        return self.exit_code

    def _recovery_parts(self) -> tuple[Any, ...]:
        return (self.config, self.store, self.console, self.lc, self.handle, self.post)

    def _install_signals(self) -> None:
        assert self.loop is not None
        for signum in (signal.SIGINT, signal.SIGTERM):
            # the handler only records; the loop decides what it means
            self.loop.add_signal_handler(signum, self._record_signal, signum)
        self.loop.add_signal_handler(signal.SIGHUP, lambda: None)
        self.loop.add_signal_handler(signal.SIGPIPE, lambda: None)

    def _record_signal(self, signum: int) -> None:
        self.handle(ev.SignalReceived(signum, self.clock.monotonic()))

    async def _tick(self) -> None:
        interval = max(0.05, self.config.rescan_interval)
        while True:
            await asyncio.sleep(min(interval, 0.5) if self.until_idle else interval)
            self.handle(ev.Tick())

    def _on_tick(self, _event: ev.Tick) -> None:
        """The safety net: watcher health, budgets, periodic rescan, orphan reaping, idle exit."""
        problem = self.watcher.healthy() if self.watcher is not None else None
        if problem:
            self.console.line(f"watcher: {problem}; restarting it and rescanning the inboxes")
            self.watcher.restart()
        self._refresh_budgets()
        self.intake.rescan()
        procs.reap_orphans()
        self._check_idle()

    def _check_idle(self) -> None:
        if not self.until_idle or self.ending:
            return
        now = self.clock.monotonic()
        if self.lc.runs or self.intake.busy:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now
        elif now - self._idle_since >= IDLE_EXIT_AFTER:
            self.begin_ending("graceful", "all work is done")

    def _on_rescan(self, event: ev.RescanNeeded) -> None:
        self.console.line(f"rescan: {event.reason}")
        self.intake.rescan()

    def _refresh_budgets(self) -> None:
        self.budgets.refresh(self.clock.now(), self.lc.runs.values())

    # ------------------------------------------------------------------ ending
    def _on_signal(self, event: ev.SignalReceived) -> None:
        if event.signum == signal.SIGINT:
            self.sigints.append(event.at)
            if len(self.sigints) == FORCE_PRESSES and self.sigints[-1] - self.sigints[0] <= FORCE_WINDOW:
                self.begin_ending("force", f"Ctrl-C pressed {FORCE_PRESSES} times")
                return
            self.begin_ending("graceful", "Ctrl-C (press it 3 times within a second to kill the agents)")
        else:
            self.begin_ending("graceful", f"signal {signal.Signals(event.signum).name}")

    def _on_stop(self, event: ev.StopRequested) -> None:
        flag = " --force" if event.force else ""
        self.begin_ending("force" if event.force else "graceful", f"`orchestrator stop{flag}` from {event.who}")
        event.reply.set_result({"ending": self.ending})

    def begin_ending(self, mode: str, why: str, exit_code: int | None = None) -> None:
        """Graceful: nothing new starts, running agents finish. Force: kill every agent, memos back to inbox."""
        if exit_code is not None and self.exit_code == 0:
            self.exit_code = exit_code
        if self.ending == mode or self.ending == "force":
            return
        self.ending = mode
        running = self.lc.slots.in_use
        if mode == "graceful":
            self.console.line(f"ending: {why}; waiting for {running} running agent(s); nothing new starts")
        else:
            self.exit_code = self.exit_code or 1
            self.console.line(f"ending now: {why}; stopping {running} agent(s) and returning their memos")
        for run in list(self.lc.runs.values()):
            if run.state is RunState.RETRY_WAIT:
                self.lc.finish(run, RunState.RETURNED, reason="the orchestrator ended before the retry")
            elif mode == "force" and run.state in (
                RunState.STARTING,
                RunState.RUNNING,
                RunState.INTERRUPTING,
                RunState.TIMING_OUT,
            ):
                self.lc.transition(run, RunState.STOPPING, reason=FORCED)
                if run.agent is not None:  # else its start (or failure) brings the stop
                    self.stopper.stop(run, 0.0)

    # ------------------------------------------------------------------ status
    async def answer(self, request: protocol.Request, peer: Peer) -> dict[str, Any]:
        """A control-channel request, posted to the loop as a typed event once the gate has let its caller through
        (the gate answers ``authorize`` itself); its answer comes back on a future."""
        if isinstance(request, protocol.AuthorizeRequest):
            return self.gate.authorize(request, peer.pid)
        request = self.gate.admit(request, peer.pid)
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.handle(protocol.to_event(request, reply))
        return dict(await reply)

    def snapshot(self) -> dict[str, Any]:
        """Live state for ``status``: the light view plus recent finished runs from the database."""
        return snapshot.full(self)

    def snapshot_light(self) -> dict[str, Any]:
        """Live state without touching the database (redrawn several times a second)."""
        return snapshot.light(self)


async def _start_observers(supervisor: Supervisor) -> tuple[Any, Any]:
    """The dashboard (``web:``) and the spans per run (``OTEL_EXPORTER_OTLP_ENDPOINT``), through their one
    adapter; the web packages are imported only when one of them is asked for."""
    if supervisor.config.web is None and not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return None, None
    from orchestrator import console
    from orchestrator.web import attach, otel, server

    adapter = attach.attach(supervisor)
    web = None
    if supervisor.config.web is not None:
        terminal = supervisor.console.stream  # the token goes to the terminal only, never to the log or `status`
        web = await server.start(
            adapter, supervisor.config.web, supervisor.console.line, lambda text: console.say(text, terminal)
        )
    return web, otel.start(adapter, supervisor.console.line)
