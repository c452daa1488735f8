"""What ``status`` and the live view show of a running supervisor: read-only, built from its parts."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from orchestrator.core.view import RunView

if TYPE_CHECKING:
    from orchestrator.supervisor.loop import Supervisor


def full(sup: Supervisor) -> dict[str, Any]:
    """The light view plus the recent finished runs from the database."""
    return {
        **light(sup),
        "recent": [RunView.from_row(row).to_json() for row in sup.store.recent_runs(20)],
        "wakes": sup.wakes.snapshot(),
        "memory": sup.memory.snapshot(),
        # the longest a graceful ending can take, for `stop --wait`: a run may go on to its timeout, then the ladder
        "longest_stop": max((r.timeout + r.grace for r in sup.config.roles.values()), default=0.0),
    }


def light(sup: Supervisor) -> dict[str, Any]:
    """Live state without touching the database (redrawn several times a second)."""
    now = sup.clock.monotonic()
    runs = sorted(sup.lc.runs.values(), key=lambda r: r.run_id)
    queues = sup.intake.queues
    return {
        "running": True,
        "pid": os.getpid(),
        "root": str(sup.root),
        "started_at": sup.started_at,
        "ending": sup.ending,
        "recovery": sup.recovery.to_json() if sup.recovery is not None else None,
        "runs": [RunView.from_run(r, now).to_json() for r in runs],
        # where each run's agent is, for agents that run elsewhere (executor: ray): run id -> node
        "nodes": {str(r.run_id): r.agent.node for r in runs if r.agent is not None and r.agent.node},
        "queued": {role: len(q) for role, q in queues.items()},
        "queued_memos": {role: [p.name for p in list(q)[:20]] for role, q in queues.items() if q},
        "pending": len(sup.intake.pending),
        "limits": {"max_concurrent": sup.config.max_concurrent, "running": sup.lc.slots.in_use},
        "crash_counts": dict(sup.outcomes.crashes.counts),
        "budget_blocks": dict(sup.budgets.current),
        "holds": sup.holds.snapshot(),
        "paused": sup.pauses.snapshot(),
        "journal_problems": dict(sup.continuity.problems),
        "events": list(sup.console.recent),
    }
