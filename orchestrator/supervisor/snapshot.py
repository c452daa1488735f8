"""Assembling the typed ``Snapshot`` of a running supervisor: read-only, from its parts and its extensions."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.config import Config
from orchestrator.console import Console
from orchestrator.core.clock import Clock
from orchestrator.core.snapshot import Snapshot
from orchestrator.core.view import RunView
from orchestrator.intake.queue import Intake
from orchestrator.store import Store
from orchestrator.supervisor.budgets import Budgets
from orchestrator.supervisor.extension import Extension
from orchestrator.supervisor.holds import Holds
from orchestrator.supervisor.lifecycle import Lifecycle
from orchestrator.supervisor.pauses import Pauses

RECENT = 20  # finished runs in a full snapshot


@dataclass
class Snapshotter:
    """Takes snapshots of one supervisor; ``ending`` and ``recovery`` are read at each snapshot."""

    config: Config
    store: Store
    console: Console
    clock: Clock
    lc: Lifecycle
    intake: Intake
    holds: Holds
    pauses: Pauses
    budgets: Budgets
    crashes: Callable[[], dict[str, int]]
    ending: Callable[[], str | None]
    recovery: Callable[[], dict[str, Any] | None]
    started_at: str
    extensions: Sequence[Extension]

    def take(self, full: bool) -> Snapshot:
        """``full``: with the recent finished runs and what the extensions read from the database."""
        now = self.clock.monotonic()
        runs = sorted(self.lc.runs.values(), key=lambda r: r.run_id)
        queues = self.intake.queues
        features: dict[str, Any] = {}
        for extension in self.extensions:
            features.update(extension.snapshot(full))
        return Snapshot(
            pid=os.getpid(),
            root=str(self.config.root),
            started_at=self.started_at,
            ending=self.ending(),
            recovery=self.recovery(),
            runs=[RunView.from_run(r, now) for r in runs],
            nodes={str(r.run_id): r.agent.node for r in runs if r.agent is not None and r.agent.node},
            queued={role: len(q) for role, q in queues.items()},
            queued_memos={role: [p.name for p in list(q)[:20]] for role, q in queues.items() if q},
            pending=len(self.intake.pending),
            max_concurrent=self.config.max_concurrent,
            running=self.lc.slots.in_use,
            crash_counts=dict(self.crashes()),
            budget_blocks=dict(self.budgets.current),
            holds=self.holds.snapshot(),
            paused=self.pauses.snapshot(),
            events=list(self.console.recent),
            features=features,
            recent=[RunView.from_row(row) for row in self.store.recent_runs(RECENT)] if full else None,
            longest_stop=(
                # a run may go on to its timeout, then the ladder
                max((r.timeout + r.grace for r in self.config.roles.values()), default=0.0) if full else None
            ),
        )
