"""Which node ran a run: recorded when the run ends, for ``history``; ``status`` reads it from the live agent.

Only agents that run elsewhere (``executor: ray``) have a ``node``; local runs record none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.core.run import Run
from orchestrator.core.states import RunState

if TYPE_CHECKING:
    from orchestrator.supervisor.loop import Supervisor


def install(sup: Supervisor) -> None:
    """Register the recording of each finished run's node in the lifecycle's ``before_finish``."""

    def record(run: Run, _state: RunState, _reason: str | None) -> None:
        node = run.agent.node if run.agent is not None else None
        if node:
            sup.store.update_run(run.run_id, node=node)

    sup.lc.before_finish.append(record)
