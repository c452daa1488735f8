"""The supervisor: one asyncio loop, the one owner of all run state.

Start-up (folders, recovery, watcher, control channel, first scan), then one
event at a time until told to end (``ending``), then shutdown. Its parts are made by the composition root
(``orchestrator.compose``) and handed over with ``attach``. The inbox watcher, the
agents' exit watchers, spawn and stop tasks, timers, signals and the control
channel only post typed events (``orchestrator.core.events``) and so do the
handlers themselves for what follows; ``post`` queues them and the loop handles
one at a time, each in its own transaction, never one inside another. Each is
dispatched to the module that owns the decision, and every change of a run goes
through the lifecycle. A broken invariant is never swallowed: it is
logged with its traceback and every run its event touched ends as failed with
reason "internal error: ...", its memo in ``failed/`` (``internal``).

Life of a memo: seen in ``inbox/`` -> queued (FIFO) -> claimed by an atomic
rename into ``active/`` when its agent starts -> ``archive/`` on exit 0, or
retried, or ``failed/`` / ``cancelled/``. Work is started the moment it is
seen complete and the limits allow: there is no debounce delay.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from orchestrator.agents import keeper, procs
from orchestrator.config import Config, RoleRun
from orchestrator.console import Console
from orchestrator.control import protocol
from orchestrator.control.channel import Peer
from orchestrator.core import events as ev
from orchestrator.core.clock import Clock, SystemClock, iso
from orchestrator.core.snapshot import Snapshot
from orchestrator.core.states import Ending
from orchestrator.intake.memo import FOLDERS
from orchestrator.supervisor.adoption import Adopter
from orchestrator.supervisor.ending import install_signals
from orchestrator.supervisor.extension import Extension, overrides
from orchestrator.supervisor.parts import Parts
from orchestrator.supervisor.shutdown import run_steps

IDLE_EXIT_AFTER = 1.5
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
        self, config: Config, console: Console, *, until_idle: bool = False, clock: Clock | None = None
    ) -> None:
        self.inbox: deque[object] = deque()  # events posted and not yet handled, oldest first
        self._handling = False  # an event is being handled: what is posted meanwhile waits in ``inbox``
        self.config = config
        self.root = config.root
        self.console = console
        self.until_idle = until_idle
        self.clock: Clock = clock or SystemClock()
        self.done = asyncio.Event()
        self.opened = asyncio.Event()  # every feature started: control requests are carried out from then on
        self.loop: asyncio.AbstractEventLoop | None = None
        self.watcher: Any = None
        self.adopter: Any = None  # recovery's adopter; it keeps spent exit records to remove in batches
        self.control: Any = None
        self.recovery: keeper.RecoveryMode | None = None  # what a crash costs, found at start-up (status says it)
        self._idle_since: float | None = None
        self.started_at = iso(self.clock.now())
        self.extensions: list[Extension] = []

    def attach(self, parts: Parts) -> None:
        """Take the parts the composition root made (``orchestrator.compose``), and handle the loop's own events."""
        self.store, self.intake, self.lc, self.agent_stops = parts.store, parts.intake, parts.lc, parts.agent_stops
        self.budgets, self.holds, self.launcher, self.pauses = parts.budgets, parts.holds, parts.launcher, parts.pauses
        self.start_faults, self.outcomes, self.requests = parts.start_faults, parts.outcomes, parts.requests
        self.errors, self.gate, self.endings, self.host = parts.errors, parts.gate, parts.endings, parts.host
        self.snapshots = parts.snapshots
        self.handlers = parts.handlers
        own: dict[type, Callable[[Any], None]] = {
            ev.RescanNeeded: self._on_rescan,
            Ready: lambda _e: None,  # handled like any event: what the first scan queued starts after it
            ev.Tick: self._on_tick,
            ev.StatusRequested: lambda e: e.reply.set_result(self.snapshot()),
            ev.SignalReceived: self.endings.on_signal,
            ev.StopRequested: self.endings.on_stop,
            ev.RunSettled: self.lc.settling.settled,
        }
        self.handlers.update(own)

    @property
    def ending(self) -> Ending | None:
        """How the orchestrator is ending; None while it is not."""
        return self.endings.mode

    @property
    def exit_code(self) -> int:
        return self.endings.exit_code

    def begin_ending(self, mode: Ending, why: str, exit_code: int | None = None) -> None:
        """Graceful: nothing new starts, running agents finish. Force: kill every agent, memos back to inbox."""
        self.endings.begin(mode, why, exit_code)

    def plug(self, extension: Extension) -> None:
        """Plug a feature in (the composition root does, in the order its hooks are called)."""
        self._plug(extension)

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
            "waits": self.launcher.waits,
            "before_finish": self.lc.before_finish,
            "on_finished": self.lc.listeners,
            "on_transition": self.lc.on_transition,
            "on_team_event": self.lc.team_events.listeners,
            "agent_env": self.launcher.env_hooks,
            "prepare": self.launcher.prepares,
            "decide_end": self.outcomes.end_hooks,
        }
        for hook, calls in wired.items():
            if overrides(extension, hook):
                calls.append(getattr(extension, hook))
        self.gate.features.add(type(extension).__name__, extension.requests())
        self.extensions.append(extension)

    def extension(self, kind: type[_E]) -> _E:
        """The plugged extension of ``kind`` (for tests and tools that drive one feature)."""
        for extension in self.extensions:
            if isinstance(extension, kind):
                return extension
        raise LookupError(f"no {kind.__name__} is plugged in")

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
            self.errors.handle(event, self.handlers.get(type(event)))
            self._after_event()

    def _after_event(self) -> None:
        """After every event: start what the limits now allow (nothing while ending); end once nothing runs."""
        if not self.ending:
            self.errors.handle(
                ev.Tick(), lambda _e: self.launcher.schedule(self.budgets.blocked() + self.holds.held_roles())
            )
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
        install_signals(self.loop, self.post, self.clock)
        # the watcher starts before the first scan, so a memo written meanwhile is seen by one or both;
        # the claim rename makes sure it runs once either way
        self.watcher = make_watcher({r: self.config.role_dir(r) for r in self.config.roles}, self.post)
        self.watcher.start()
        if self.watcher.patch_problem:
            self.console.line(self.watcher.patch_problem)
        where, more = socket_path(self.root), self.gate.features.models  # and the requests the extensions serve
        self.control = ControlServer(where, self.answer, self.console.error, log=self.console.line, more=more)
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
        self.opened.set()
        ticker = asyncio.ensure_future(self._tick())
        self.console.start_live(self.view)
        try:
            await self.done.wait()
        finally:  # every step, even after one raised (``shutdown``)
            ends = [(f"{type(e).__name__}.stop", e.stop) for e in reversed(self.extensions)]
            closes = [(f"{type(e).__name__}.close", e.close) for e in reversed(self.extensions)]
            await run_steps(
                [
                    ("the timer", ticker.cancel),
                    *ends,
                    ("the live view", self.console.stop_live),
                    ("the watcher", self.watcher.stop),
                    ("the spent exit records", self.adopter.flush_records),
                    ("the control socket", self.control.close),
                    ("the control socket's file", self.control.remove_file),
                    *closes,
                    (
                        "the sweeps",
                        lambda: self.agent_stops.drain(max(r.grace for r in self.config.roles.values()) + 6),
                    ),
                    ("the tasks", lambda: [t.cancel() for t in [*self.launcher.tasks, *self.requests.tasks]]),
                    ("the store", self.store.close),
                ],
                self.console.error,
            )
        return self.exit_code

    def make_adopter(self) -> Adopter:
        """Recovery's adopter, plugged in: each finished run's exit records are spent from then on."""
        adopter = Adopter(
            self.config, self.store, self.console, self.lc, self.post, self.launcher.prepares, self.agent_stops.spawner
        )
        self._plug(adopter)
        return adopter

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

    # ------------------------------------------------------------------ status
    async def answer(self, request: protocol.Request | protocol.FeatureRequest, peer: Peer) -> dict[str, Any]:
        """A control-channel request, posted to the loop as a typed event once the gate has let its caller through
        (the gate answers ``authorize`` itself); its answer comes back on a future.

        The socket listens before the features open (the dashboard's server opens then), and opening may take a
        while (a landing a kill interrupted is put back): a request sent meanwhile waits until every feature has
        started, so none is carried out before a feature has read back what a restart left half-done."""
        if isinstance(request, protocol.AuthorizeRequest):
            return self.gate.authorize(request, peer.pid)
        await self.opened.wait()
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
