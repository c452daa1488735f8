"""The composition root: the one place that says what ``orchestrator up`` is made of.

The core's parts (``core_parts``: the lifecycle, the intake, the launcher, the outcomes, ...) are made here and
handed to the loop, which owns the run state through them; the features, which the supervisor knows only through
the ``Extension`` port, are made here from the ``Host`` they are handed. Their order is the order their hooks are
called in: the loop breaker checks a memo before anything else, the journal is written before a run's node is
recorded, prompt sections fill in this order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from orchestrator.agents.spawner import Spawner, choose_spawner
from orchestrator.asks.extension import Asks
from orchestrator.config import Config
from orchestrator.console import Console
from orchestrator.continuity.hooks import Continuity
from orchestrator.core import events as ev
from orchestrator.core.clock import Clock
from orchestrator.core.run import MemoRef
from orchestrator.core.states import RunState
from orchestrator.intake.queue import Intake, SettleDue, WritersFound
from orchestrator.memory.curator import MemoryCurator
from orchestrator.notify.extension import Notifier
from orchestrator.prompts import load_template
from orchestrator.retention.daily import DailyPass
from orchestrator.schedule.wakes import Wakes
from orchestrator.store import Store
from orchestrator.supervisor.agent_stops import AgentStops
from orchestrator.supervisor.announce import Announcer
from orchestrator.supervisor.breaker import Breaker
from orchestrator.supervisor.budgets import Budgets
from orchestrator.supervisor.ending import Endings
from orchestrator.supervisor.extension import ExtensionFactory, Host
from orchestrator.supervisor.gate import Gate
from orchestrator.supervisor.holds import Holds
from orchestrator.supervisor.internal import InternalErrors
from orchestrator.supervisor.launch import Launcher
from orchestrator.supervisor.lifecycle import Lifecycle
from orchestrator.supervisor.loop import Supervisor
from orchestrator.supervisor.nodes import NodeRecords
from orchestrator.supervisor.outcomes import Outcomes
from orchestrator.supervisor.parts import Parts
from orchestrator.supervisor.pauses import PauseDue, Pauses
from orchestrator.supervisor.requests import Requests
from orchestrator.supervisor.slots import Slots
from orchestrator.supervisor.snapshot import Snapshotter
from orchestrator.supervisor.start_faults import StartFaults, StartsResume
from orchestrator.tools.index_build import IndexBuild
from orchestrator.workspaces.extension import Workspaces

FEATURES: Sequence[ExtensionFactory] = (
    Breaker,
    Continuity,
    NodeRecords,
    Wakes,
    MemoryCurator,
    DailyPass,
    IndexBuild,
    Asks,
)


def features(config: Config) -> Sequence[ExtensionFactory]:
    """The features of ``config``: every team's, and the dashboard with the spans per run when asked for
    (``web:`` / ``up --web``, or an OpenTelemetry collector named in ``OTEL_EXPORTER_OTLP_ENDPOINT``), and the
    notifications when a channel is named (``notifications:``), and the workspaces when a role works in worktrees."""
    chosen: Sequence[ExtensionFactory] = (*FEATURES, Notifier) if config.notifications else FEATURES
    if any(role.workspace.isolated for role in config.roles.values()):
        chosen = (*chosen, Workspaces)
    if config.web is not None or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        # the server's packages (starlette, uvicorn, prometheus-client) load only for a team that asks for them;
        # `up` has checked they are installed (app.check_web) before it gets here
        from orchestrator.web.extension import Dashboard

        return (*chosen, Dashboard)
    return chosen


def build_supervisor(
    config: Config,
    console: Console,
    *,
    until_idle: bool = False,
    clock: Clock | None = None,
    spawner: Spawner | None = None,
    more: Sequence[ExtensionFactory] = (),
) -> Supervisor:
    """The supervisor of ``config`` with every feature plugged in; ``more``: features plugged in after them (the
    seam through which a test composes its own extension, as a new feature would be added to ``FEATURES``)."""
    supervisor = Supervisor(config, console, until_idle=until_idle, clock=clock)
    supervisor.attach(core_parts(supervisor, spawner))
    for make in (*features(config), *more):
        supervisor.plug(make(supervisor.host))
    return supervisor


def _fail_memo(lc: Lifecycle, config: Config, role: str, path: Path, why: str) -> None:
    """A memo outside any run (set aside by a feature) ended in ``failed/``, with a run on record saying ``why``."""
    run = lc.open(config.roles[role], [MemoRef(path.name, path)], arrival=0, attempt=0)
    lc.finish(run, RunState.FAILED, reason=why, reason_text=why + "\n")


def core_parts(sup: Supervisor, spawner: Spawner | None) -> Parts:
    """The core's parts of ``sup``, wired to one another and to its loop (``post``, the clock, its ending)."""
    config, console, clock, post = sup.config, sup.console, sup.clock, sup.post
    store = Store(config.state_dir / "state.db")
    templates = {name: load_template(config.root / role.prompt) for name, role in config.roles.items()}
    intake = Intake(list(config.roles), config.role_dir, console, store, clock, post)
    slots = Slots({name: role.limit for name, role in config.roles.items()}, config.max_concurrent)
    lc = Lifecycle(config, store, console, clock, slots, Announcer(config, store, console, clock), post=post)
    agent_stops = AgentStops(spawner or choose_spawner(config, console.line, clock), console, post)
    budgets = Budgets(config, store, console, lc.team_events)
    holds = Holds(console)
    launcher = Launcher(config, store, console, clock, lc, intake, agent_stops.spawner, templates, post)
    start_faults = StartFaults(lc, intake, holds, console, clock, post)
    endings = Endings(lc, agent_stops, console)
    outcomes = Outcomes(
        lc,
        agent_stops,
        store,
        console,
        post,
        lambda: endings.mode,
        endings.begin,
        lambda: budgets.refresh(clock.now(), lc.runs.values()),
        start_faults,
    )
    pauses = Pauses(config, lc, intake, console, clock, post)
    outcomes.pauses = pauses
    launcher.gates.append(pauses.blocked)
    launcher.gates.append(lambda: list(holds.current))  # a hold a start put on (its workspace taken), in its pass
    batch_roles = [name for name, role in config.roles.items() if role.batch]
    if batch_roles:
        launcher.gates.append(lambda: intake.settling(batch_roles))
    launcher.on_start.append(pauses.starting)
    requests = Requests(lc, intake, agent_stops, store, console, post)
    gate = Gate(config, store, console, clock, lambda: lc.runs.values(), requests.find)
    host = Host(
        config=config,
        clock=clock,
        console=console,
        holds=holds,
        store=store,
        post=post,
        runs=lambda: MappingProxyType(lc.runs),
        queues=lambda: MappingProxyType(intake.queues),
        ending=lambda: endings.mode is not None,
        retry_waiting=lambda role: bool(lc.retry_ready[role]),
        slot_free=lc.slots.free,
        paused=pauses.why_paused,
        over_budget=budgets.why_over,
        offer_memo=lambda role, path: intake.seen(ev.MemoSeen(role, path, complete=True)),
        put_back=lambda role, paths: intake.put_back(role, paths, 0),
        fail_memo=lambda role, path, why: _fail_memo(lc, config, role, path, why),
        started_at=sup.started_at,
        snapshot=lambda full: sup.view(full).to_json(),
        identify=lambda pid: gate.identify(pid),
        admit=lambda request, caller: gate.admit_caller(request, caller),
        require=lambda caller, command, own: gate.require(caller, command, own),
        tell=lc.team_events,
        feature_requests=lambda: MappingProxyType(gate.features.models),
    )
    snapshots = Snapshotter(
        config,
        store,
        console,
        clock,
        lc,
        intake,
        holds,
        pauses,
        budgets,
        lambda: outcomes.crashes.counts,
        lambda: endings.mode,
        lambda: sup.recovery.to_json() if sup.recovery is not None else None,
        sup.started_at,
        sup.extensions,
    )
    handlers: dict[type, Callable[[Any], None]] = {
        ev.MemoSeen: intake.seen,
        ev.MemoGone: intake.gone,
        SettleDue: intake.settle_due,
        WritersFound: intake.writers_found,
        ev.AgentStarted: outcomes.started,
        ev.AgentStartFailed: outcomes.start_failed,
        ev.RunExited: outcomes.exited,
        ev.StopDone: outcomes.stopped,
        ev.TimeoutFired: outcomes.timed_out,
        ev.StallCheck: outcomes.stall_check,
        ev.RetryDue: outcomes.retry_due,
        StartsResume: start_faults.resume,
        PauseDue: pauses.due,
        ev.InterruptRefused: requests.interrupt_refused,
        ev.CancelRequested: requests.cancel,
        ev.InterruptRequested: requests.interrupt,
        ev.TellRequested: requests.tell,
        ev.FeatureRequested: gate.features.handle,
    }
    return Parts(
        store=store,
        intake=intake,
        lc=lc,
        agent_stops=agent_stops,
        budgets=budgets,
        holds=holds,
        launcher=launcher,
        start_faults=start_faults,
        outcomes=outcomes,
        pauses=pauses,
        requests=requests,
        errors=InternalErrors(lc, agent_stops, console),
        gate=gate,
        endings=endings,
        host=host,
        snapshots=snapshots,
        handlers=handlers,
    )
