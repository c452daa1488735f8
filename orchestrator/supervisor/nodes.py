"""Which node ran a run: recorded when the run ends, for ``history``; ``status`` reads it from the live agent.

Only agents that run elsewhere (``executor: ray``) have a ``node``; local runs record none.
"""

from __future__ import annotations

from orchestrator.config import RoleRun
from orchestrator.core.states import RunState
from orchestrator.supervisor.extension import Extension, Host


class NodeRecords(Extension):
    """Records each finished run's node on the run's row, before the run leaves the table."""

    def __init__(self, host: Host) -> None:
        self.store = host.store

    def before_finish(self, run: RoleRun, state: RunState, reason: str | None) -> None:
        node = run.agent.node if run.agent is not None else None
        if node:
            self.store.update_run(run.run_id, node=node)
