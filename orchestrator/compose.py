"""The composition root: the one place that says which features ``orchestrator up`` runs with.

The supervisor knows only the ``Extension`` port; each feature is made here from the ``Host`` it is handed.
The order is the order their hooks are called in: the loop breaker checks a memo before anything else, the
journal is written before a run's node is recorded, prompt sections fill in this order.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from orchestrator.agents.spawner import Spawner
from orchestrator.config import Config
from orchestrator.console import Console
from orchestrator.continuity.hooks import Continuity
from orchestrator.core.clock import Clock
from orchestrator.memory.curator import MemoryCurator
from orchestrator.notify.extension import Notifier
from orchestrator.retention.daily import DailyPass
from orchestrator.schedule.wakes import Wakes
from orchestrator.supervisor.breaker import Breaker
from orchestrator.supervisor.extension import ExtensionFactory
from orchestrator.supervisor.loop import Supervisor
from orchestrator.supervisor.nodes import NodeRecords

FEATURES: Sequence[ExtensionFactory] = (Breaker, Continuity, NodeRecords, Wakes, MemoryCurator, DailyPass)


def features(config: Config) -> Sequence[ExtensionFactory]:
    """The features of ``config``: every team's, and the dashboard with the spans per run when asked for
    (``web:`` / ``up --web``, or an OpenTelemetry collector named in ``OTEL_EXPORTER_OTLP_ENDPOINT``), and the
    notifications when a channel is named (``notifications:``)."""
    chosen = (*FEATURES, Notifier) if config.notifications else FEATURES
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
) -> Supervisor:
    """The supervisor of ``config`` with every feature plugged in."""
    return Supervisor(config, console, until_idle=until_idle, clock=clock, spawner=spawner, extensions=features(config))
