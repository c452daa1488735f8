"""The parts of the core the loop dispatches to, made together by the composition root (``orchestrator.compose``).

The loop owns the run state only through them: each event goes to the one part that decides it (``handlers``), and
the features reach them only through the ``Host``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.intake.queue import Intake
from orchestrator.store import Store
from orchestrator.supervisor.agent_stops import AgentStops
from orchestrator.supervisor.budgets import Budgets
from orchestrator.supervisor.ending import Endings
from orchestrator.supervisor.extension import Host
from orchestrator.supervisor.gate import Gate
from orchestrator.supervisor.holds import Holds
from orchestrator.supervisor.internal import InternalErrors
from orchestrator.supervisor.launch import Launcher
from orchestrator.supervisor.lifecycle import Lifecycle
from orchestrator.supervisor.outcomes import Outcomes
from orchestrator.supervisor.pauses import Pauses
from orchestrator.supervisor.requests import Requests
from orchestrator.supervisor.snapshot import Snapshotter
from orchestrator.supervisor.start_faults import StartFaults


@dataclass
class Parts:
    """Every part of one supervisor, and the table of which part handles which event."""

    store: Store
    intake: Intake
    lc: Lifecycle
    agent_stops: AgentStops
    budgets: Budgets
    holds: Holds
    launcher: Launcher
    start_faults: StartFaults
    outcomes: Outcomes
    pauses: Pauses
    requests: Requests
    errors: InternalErrors
    gate: Gate
    endings: Endings
    host: Host
    snapshots: Snapshotter
    handlers: dict[type, Callable[[Any], None]]
