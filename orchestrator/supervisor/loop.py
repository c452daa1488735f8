"""The supervisor: one asyncio loop, the one owner of all run state.

Start-up (folders, recovery, watcher, control channel, first scan), then one
event at a time until told to end, then shutdown. The inbox watcher, the
agents' exit watchers, spawn and stop tasks, timers, signals and the control
channel only post typed events (``orchestrator.core.events``) and so do the
handlers themselves for what follows; ``post`` queues them and the loop handles
one at a time, each in its own transaction, never one inside another. Each is
dispatched to the module that owns the decision, and every change of a run goes
through the lifecycle. A broken invariant is never swallowed: it is
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

from orchestrator.agents import keeper, procs
from orchestrator.agents.spawner import Spawner, choose_spawner
from orchestrator.config import Config, RoleRun
from orchestrator.console import Console
from orchestrator.control import protocol
from orchestrator.control.channel import Peer
from orchestrator.core import events as ev
from orchestrator.core.clock import Clock, SystemClock, iso
from orchestrator.core.errors import ControlError, OrchestratorError
from orchestrator.core.snapshot import Snapshot
from orchestrator.core.states import Ending, RunState
from orchestrator.core.team_events import TeamEvent
from orchestrator.intake.memo import FOLDERS
from orchestrator.intake.queue import Intake, SettleDue
from orchestrator.prompts import load_template
from orchestrator.store import Store
from orchestrator.supervisor.adoption import Adopter
from orchestrator.supervisor.agent_stops import AgentStops
from orchestrator.supervisor.announce import Announcer
from orchestrator.supervisor.budgets import Budgets
from orchestrator.supervisor.extension import Extension, ExtensionFactory, Host, overrides
from orchestrator.supervisor.gate import Gate
from orchestrator.supervisor.holds import Holds
from orchestrator.supervisor.launch import Launcher
from orchestrator.supervisor.lifecycle import Lifecycle
from orchestrator.supervisor.outcomes import FORCED, Outcomes
from orchestrator.supervisor.pauses import PauseDue, Pauses
from orchestrator.supervisor.requests import Requests
from orchestrator.supervisor.slots import Slots
from orchestrator.supervisor.snapshot import Snapshotter
from orchestrator.supervisor.start_faults import StartFaults, StartsResume

FORCE_PRESSES = 3  # Ctrl-C presses within FORCE_WINDOW that kill every agent
FORCE_WINDOW = 1.0
IDLE_EXIT_AFTER = 1.5
# the states a force ending stops (a run already being stopped keeps its own reason and end, ``STOP_ENDS``)
FORCE_STOPS = frozenset({RunState.STARTING, RunState.RUNNING, RunState.INTERRUPTING, RunState.TIMING_OUT})
INTERNAL_ERROR_ANSWER = "internal error; see .orchestrator/orchestrator.log"
_E = TypeVar("_E", bound=Extension)


@dataclass(frozen=True)
class Ready:
    """Start-up is over: the memos of the first scan may start."""


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # not on a thread running a loop: a watcher's thread, say
        return None


class Supervisor:
    """Runs one project root until told to end; ``serve`` returns the exit status.

    ``extensions``: the features, each made from the ``Host`` (``orchestrator.compose`` lists them); the
    supervisor wires the hooks each one overrides and knows nothing else of them.
    """

    def __init__(
        self,
        config: Config,
        console: Console,
        *,
        until_idle: bool = False,
        clock: Clock | None = None,
        spawner: Spawner | None = None,
        extensions: Sequence[ExtensionFactory] = (),
    ) -> None:
        self.inbox: deque[object] = deque()  # events posted and not yet handled, oldest first
        self._handling = False  # an event is being handled: what is posted meanwhile waits in ``inbox``
        self.config = config
        self.root = config.root
        self.console = console
        self.until_idle = until_idle
        self.clock: Clock = clock or SystemClock()
        self.store = Store(config.state_dir / "state.db")
        templates = {name: load_template(self.root / role.prompt) for name, role in config.roles.items()}
        self.intake = Intake(list(config.roles), config.role_dir, console, self.store, self.clock, self.post)
        slots = Slots({name: role.limit for name, role in config.roles.items()}, config.max_concurrent)
        self.lc = Lifecycle(
            config,
            self.store,
            console,
            self.clock,
            slots,
            Announcer(config, self.store, console, self.clock),
            post=self.post,
        )
        self.agent_stops = AgentStops(spawner or choose_spawner(config, console.line, self.clock), console, self.post)
        self.budgets = Budgets(config, self.store, console, self.lc.team_events)
        self.holds = Holds(console)
        self.launcher = Launcher(
            config,
            self.store,
            console,
            self.clock,
            self.lc,
            self.intake,
            self.agent_stops.spawner,
            templates,
            self.post,
        )
        self.start_faults = StartFaults(self.lc, self.intake, self.holds, console, self.clock, self.post)
        self.outcomes = Outcomes(
            self.lc,
            self.agent_stops,
            self.store,
            console,
            self.post,
            lambda: self.ending,
            self.begin_ending,
            self._refresh_budgets,
            self.start_faults,
        )
        self.pauses = Pauses(config, self.lc, self.intake, console, self.clock, self.post)
        self.outcomes.pauses = self.pauses
        self.launcher.gates.append(self.pauses.blocked)
        self.launcher.on_start.append(self.pauses.starting)
        self.requests = Requests(self.lc, self.intake, self.agent_stops, self.store, console, self.post)
        self.gate = Gate(config, self.store, console, self.clock, lambda: self.lc.runs.values(), self.requests.find)
        self.handlers: dict[type, Callable[[Any], None]] = {
            ev.MemoSeen: self.intake.seen,
            ev.MemoGone: self.intake.gone,
            ev.RescanNeeded: self._on_rescan,
            SettleDue: self.intake.settle_due,
            Ready: lambda _e: None,  # handled like any event: what the first scan queued starts after it
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
        self.ending: Ending | None = None  # None while the orchestrator is not ending
        self.exit_code = 0
        self.sigints: deque[float] = deque(maxlen=FORCE_PRESSES)
        self.done = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.watcher: Any = None
        self.adopter: Any = None  # recovery's adopter; it keeps spent exit records to remove in batches
        self.control: Any = None
        self.recovery: keeper.RecoveryMode | None = None  # what a crash costs, found at start-up (status says it)
        self._idle_since: float | None = None
        self.started_at = iso(self.clock.now())
        self.host = Host(
            config=config,
            clock=self.clock,
            console=console,
            holds=self.holds,
            store=self.store,
            post=self.post,
            runs=lambda: MappingProxyType(self.lc.runs),
            queues=lambda: MappingProxyType(self.intake.queues),
            ending=lambda: self.ending is not None,
            retry_waiting=lambda role: bool(self.lc.retry_ready[role]),
            slot_free=self.lc.slots.free,
            paused=self._paused,
            over_budget=self._over_budget,
            offer_memo=lambda role, path: self.intake.seen(ev.MemoSeen(role, path, complete=True)),
            started_at=self.started_at,
            snapshot=lambda full: self.view(full).to_json(),
            identify=lambda pid: self.gate.identify(pid),
            admit=lambda request, caller: self.gate.admit_caller(request, caller),
            require=lambda caller, command, own: self.gate.require(caller, command, own),
            tell=self.lc.team_events,
        )
        self.extensions: list[Extension] = []
        for make in extensions:
            self._plug(make(self.host))
        self.snapshots = Snapshotter(
            config,
            self.store,
            console,
            self.clock,
            self.lc,
            self.intake,
            self.holds,
            self.pauses,
            self.budgets,
            lambda: self.outcomes.crashes.counts,
            lambda: self.ending,
            lambda: self.recovery.to_json() if self.recovery is not None else None,
            self.started_at,
            self.extensions,
        )

    def _plug(self, extension: Extension) -> None:
        """Wire the hooks ``extension`` overrides into the parts that call them, in the order plugged."""
        for kind, handler in extension.handlers().items():
            if kind in self.handlers:
                raise ValueError(f"{type(extension).__name__}: the event {kind.__name__} already has a handler")
            self.handlers[kind] = handler
        wired: dict[str, list[Any]] = {  # each hook -> the one list of the core that calls it
            "sections": self.launcher.sections,
            "notes": self.launcher.notes,
            "check_memo": self.launcher.memo_checks,
            "check_holds": self.holds.checks,
            "before_finish": self.lc.before_finish,
            "on_finished": self.lc.listeners,
            "on_transition": self.lc.on_transition,
            "on_team_event": self.lc.team_events.listeners,
            "agent_env": self.launcher.env_hooks,
        }
        for hook, calls in wired.items():
            if overrides(extension, hook):
                calls.append(getattr(extension, hook))
        self.extensions.append(extension)

    def extension(self, kind: type[_E]) -> _E:
        """The plugged extension of ``kind`` (for tests and tools that drive one feature)."""
        for extension in self.extensions:
            if isinstance(extension, kind):
                return extension
        raise LookupError(f"no {kind.__name__} is plugged in")

    def _paused(self, role: str) -> str | None:
        pause = self.pauses.paused_role(role)
        return None if pause is None else f"usage limit ({pause.limit.kind}) on account {pause.account}"

    def _over_budget(self, role: str) -> str | None:
        if role not in self.budgets.blocked():
            return None
        return self.budgets.current.get(role) or self.budgets.current.get("*", "")

    @property
    def runs(self) -> dict[int, RoleRun]:
        return self.lc.runs

    # ------------------------------------------------------------------ events
    def post(self, event: object) -> None:
        """Hand an event to the loop, from any thread; events are handled one at a time, in the order posted.

        On the loop's thread an event posted while another is being handled (a handler's follow-up, a
        failed start) waits in ``inbox`` until that one is done, its transaction included, so handling is
        never re-entered; posted while the loop is idle (a timer, a task, a signal) it is handled at once.
        """
        loop = self.loop
        if loop is None or _running_loop() is loop:
            self.inbox.append(event)
            if not self._handling:
                self._drain()
        elif not loop.is_closed():
            loop.call_soon_threadsafe(self.post, event)

    def _drain(self) -> None:
        self._handling = True
        try:
            while self.inbox:
                self._handle(self.inbox.popleft())
        finally:
            self._handling = False

    def _handle(self, event: object) -> None:
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
            reply.set_exception(ControlError(INTERNAL_ERROR_ANSWER))
        run = self.lc.runs.get(getattr(event, "run_id", -1))
        if run is not None:
            self.fail_internal(run, f"internal error: {type(exc).__name__}: {exc}")

    def fail_internal(self, run: RoleRun, reason: str) -> None:
        """End a run that a bug left in an unknown condition: its agent stopped, its memo to failed/."""
        if run.agent is not None and run.state.live:
            self.agent_stops.orphan(run.agent, run.run_id)
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
        """After every event: start what the limits now allow (nothing while ending); end once nothing runs."""
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
        from orchestrator.supervisor.recovery import recover

        self.loop = asyncio.get_running_loop()
        procs.become_subreaper()
        self.store.for_the_loop()
        for role in self.config.roles:
            # every folder now, so each is under the watch before a memo moves into it: a move into a folder
            # made a moment earlier is seen as half a move, which watchdog holds 0.5 s, stalling every event
            for folder in FOLDERS:
                (self.config.role_dir(role) / folder).mkdir(parents=True, exist_ok=True)
        self.recovery = keeper.recovery_mode(self.config.recovery, self.config.executor.kind)
        self.adopter = self.make_adopter()
        await recover(self.config, self.store, self.console, self.lc, self.adopter)
        self._refresh_budgets()
        self._install_signals()
        # the watcher starts before the first scan, so a memo written meanwhile is seen by one or both;
        # the claim rename makes sure it runs once either way
        self.watcher = make_watcher({r: self.config.role_dir(r) for r in self.config.roles}, self.post)
        self.watcher.start()
        if self.watcher.patch_problem:
            self.console.line(self.watcher.patch_problem)
        self.control = ControlServer(socket_path(self.root), self.answer, self.console.error, log=self.console.line)
        await self.control.start()
        for extension in self.extensions:
            await extension.open()
        self.console.line(
            f"orchestrator up: {len(self.config.roles)} roles, max_concurrent {self.config.max_concurrent}, "
            f"root {self.root} (pid {os.getpid()}); {self.recovery.line}"
        )
        self.intake.rescan(initial=True)
        for extension in self.extensions:
            extension.start()
        self.post(Ready())
        ticker = asyncio.ensure_future(self._tick())
        self.console.start_live(self.view)
        try:
            await self.done.wait()
        finally:
            ticker.cancel()
            for extension in reversed(self.extensions):
                extension.stop()
            self.console.stop_live()
            self.watcher.stop()
            self.adopter.flush_records()
            await self.control.close()
            for extension in reversed(self.extensions):
                await extension.close()
            await self.agent_stops.drain(max(r.grace for r in self.config.roles.values()) + 6)
            for task in [*self.launcher.tasks, *self.requests.tasks]:
                task.cancel()
            self.store.close()
        return self.exit_code

    def make_adopter(self) -> Adopter:
        """Recovery's adopter, plugged in: each finished run's exit records are spent from then on."""
        adopter = Adopter(self.config, self.store, self.console, self.lc, self.post)
        self._plug(adopter)
        return adopter

    def _install_signals(self) -> None:
        assert self.loop is not None
        for signum in (signal.SIGINT, signal.SIGTERM):
            # the handler only records; the loop decides what it means
            self.loop.add_signal_handler(signum, self._record_signal, signum)
        self.loop.add_signal_handler(signal.SIGHUP, lambda: None)
        self.loop.add_signal_handler(signal.SIGPIPE, lambda: None)

    def _record_signal(self, signum: int) -> None:
        self.post(ev.SignalReceived(signum, self.clock.monotonic()))

    async def _tick(self) -> None:
        interval = max(0.05, self.config.rescan_interval)
        while True:
            await self.clock.sleep(min(interval, 0.5) if self.until_idle else interval)
            self.post(ev.Tick())

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
            self.begin_ending(Ending.GRACEFUL, "all work is done")

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
                self.begin_ending(Ending.FORCE, f"Ctrl-C pressed {FORCE_PRESSES} times")
                return
            self.begin_ending(Ending.GRACEFUL, "Ctrl-C (press it 3 times within a second to kill the agents)")
        else:
            self.begin_ending(Ending.GRACEFUL, f"signal {signal.Signals(event.signum).name}")

    def _on_stop(self, event: ev.StopRequested) -> None:
        flag = " --force" if event.force else ""
        self.begin_ending(
            Ending.FORCE if event.force else Ending.GRACEFUL, f"`orchestrator stop{flag}` from {event.who}"
        )
        event.reply.set_result({"ending": self.ending.value if self.ending else None})

    def begin_ending(self, mode: Ending, why: str, exit_code: int | None = None) -> None:
        """Graceful: nothing new starts, running agents finish. Force: kill every agent, memos back to inbox.

        A force ending overrides a graceful one, never the other way round.
        """
        if exit_code is not None and self.exit_code == 0:
            self.exit_code = exit_code
        if (exit_code or mode is Ending.FORCE) and self.ending is not Ending.FORCE:
            self.lc.team_events(TeamEvent("stopped", reason=why))
        if self.ending is mode or self.ending is Ending.FORCE:
            return
        self.ending = mode
        running = self.lc.slots.in_use
        if mode is Ending.GRACEFUL:
            self.console.line(f"ending: {why}; waiting for {running} running agent(s); nothing new starts")
        else:
            self.exit_code = self.exit_code or 1
            self.console.line(f"ending now: {why}; stopping {running} agent(s) and returning their memos")
        for run in list(self.lc.runs.values()):
            if run.state is RunState.RETRY_WAIT:
                self.lc.finish(run, RunState.RETURNED, reason="the orchestrator ended before the retry")
            elif mode is Ending.FORCE and run.state in FORCE_STOPS:
                self.lc.transition(run, RunState.STOPPING, reason=FORCED)
                if run.agent is not None:  # else its start (or failure) brings the stop
                    self.agent_stops.stop(run, 0.0)

    # ------------------------------------------------------------------ status
    async def answer(self, request: protocol.Request, peer: Peer) -> dict[str, Any]:
        """A control-channel request, posted to the loop as a typed event once the gate has let its caller through
        (the gate answers ``authorize`` itself); its answer comes back on a future."""
        if isinstance(request, protocol.AuthorizeRequest):
            return self.gate.authorize(request, peer.pid)
        request = self.gate.admit(request, peer.pid)
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.post(protocol.to_event(request, reply))
        return dict(await reply)

    def view(self, full: bool = False) -> Snapshot:
        """The typed snapshot: live state, and with ``full`` what the database adds (the recent runs)."""
        return self.snapshots.take(full)

    def snapshot(self) -> dict[str, Any]:
        """Live state for ``status``: the light view plus recent finished runs from the database."""
        return self.view(full=True).to_json()

    def snapshot_light(self) -> dict[str, Any]:
        """Live state without touching the database (redrawn several times a second)."""
        return self.view().to_json()
