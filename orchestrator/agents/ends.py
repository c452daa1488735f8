"""How a local agent's end is read: the one strategy in which a kept agent and an agent without a keeper differ.

``KeeperRecord`` (every agent when the keeper binary is there): the keeper's
exit record, read once the keeper has ended, whether the keeper is our child
(started now) or not (found alive at a restart); a pidfd wakes us. ``WaitStatus``
(no keeper binary, which only ``recovery: restart`` allows): the agent is our
child and its end is its wait status, which dies with us.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Protocol

from orchestrator.agents import keeper, procs
from orchestrator.agents.posix_child import PosixChild, process_ended
from orchestrator.agents.spec import LaunchSpec

UNKNOWN_EXIT = -signal.SIGKILL  # no record and no keeper's status: it was most likely killed with its keeper


def record_path(spec: LaunchSpec) -> Path:
    """Where the keeper of this attempt leaves its agent's exit status."""
    return keeper.exit_path(spec.root / ".orchestrator", spec.run_id, spec.attempt)


class EndReader(Protocol):
    """Waits for an agent's end and says its exit status (negative: the signal that ended it)."""

    async def status(self) -> int: ...


class KeeperRecord:
    """The agent's end as its keeper recorded it in ``record``.

    ``keeper`` is the keeper: our child (its status is collected too), or the pid of one found alive at a
    restart, or None when none is left (then the agent's own end is waited for); ``agent`` is the agent."""

    def __init__(self, record: Path, keeper: PosixChild | procs.ProcRef | None, agent: procs.ProcRef | None) -> None:
        self.record = record
        self.keeper = keeper
        self.agent = agent

    async def status(self) -> int:
        fallback = UNKNOWN_EXIT
        if isinstance(self.keeper, PosixChild):
            fallback = await self.keeper.wait()
        elif self.keeper is not None:
            await process_ended(self.keeper)
        found = keeper.read_exit(self.record)
        if found is None and self.agent is not None and self.agent.process() is not None:
            # no keeper is left (it was killed on its own): the agent lives on, and its end counts
            await process_ended(self.agent)
            found = keeper.read_exit(self.record)
        return found.returncode if found is not None else fallback


class WaitStatus:
    """The end of an agent started without a keeper: its wait status, as our child."""

    def __init__(self, child: PosixChild) -> None:
        self.child = child

    async def status(self) -> int:
        return await self.child.wait()
