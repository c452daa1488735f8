"""An agent process on this machine as an ``Agent``'s transport: its end read by an ``EndReader``, its tree
stopped by the kill ladder (``procs``).

Under a keeper the end is the keeper's exit record, which outlives us; without one (only ``recovery: restart``
allows that) it is our child's wait status, which dies with us.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

from orchestrator.agents import keeper, procs
from orchestrator.agents.handle import UNKNOWN_EXIT, Agent, Ending, end_turn_first
from orchestrator.agents.posix_child import PosixChild, process_ended
from orchestrator.agents.spec import LaunchSpec
from orchestrator.core.agent import KillReport, Log

EXIT_WAIT = 5.0  # after the ladder, how long to wait for the agent's exit status to be read


def record_path(spec: LaunchSpec) -> Path:
    """Where the keeper of this attempt leaves its agent's exit status."""
    return keeper.exit_path(spec.root / ".orchestrator", spec.run_id, spec.attempt)


class EndReader(Protocol):
    """Waits for an agent's end and says its exit status (negative: the signal that ended it)."""

    async def wait(self) -> int: ...


class KeeperRecord:
    """The agent's end as its keeper recorded it in ``record``.

    ``keeper`` is the keeper: our child (its status is collected too), or the pid of one found alive at a
    restart, or None when none is left (then the agent's own end is waited for); ``agent`` is the agent."""

    def __init__(self, record: Path, keeper: PosixChild | procs.ProcRef | None, agent: procs.ProcRef | None) -> None:
        self.record = record
        self.keeper = keeper
        self.agent = agent

    async def wait(self) -> int:
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


class LocalProcess:
    """The agent ``pid`` of ``spec``'s attempt (``ref``: with its create time, when it was seen alive)."""

    def __init__(self, spec: LaunchSpec, pid: int | None, ref: procs.ProcRef | None, end: EndReader) -> None:
        self.spec = spec
        self.ref = ref
        self.end = end
        self.pid = pid
        self.create_time = ref.create_time if ref is not None else None
        self.node: str | None = None
        self.stop_slack = 0.0

    @classmethod
    def adopted(cls, spec: LaunchSpec, ref: procs.ProcRef, keeper_pid: int | None) -> LocalProcess:
        """A live agent of an orchestrator that died (``keeper_pid``: its keeper, None when none is left)."""
        keeper_ref = procs.ProcRef.of(keeper_pid) if keeper_pid is not None else None
        return cls(spec, ref.pid, ref, KeeperRecord(record_path(spec), keeper_ref, ref))

    @classmethod
    def recorded(cls, spec: LaunchSpec, pid: int | None) -> LocalProcess:
        """An agent that ended while the orchestrator was down (``pid``: its group, when a sweep may look there):
        what its keeper recorded."""
        return cls(spec, pid, None, KeeperRecord(record_path(spec), None, None))

    async def ended(self) -> Ending:
        return Ending(await self.end.wait())

    async def stop(self, agent: Agent, grace: float, log: Log, interrupt_first: bool) -> KillReport:
        """The agent's whole tree, stopped (an SDK agent's turn first, when asked): what was ended."""
        started = time.monotonic()
        target = procs.Target(self.ref, self.pid, self.spec.run_id, str(self.spec.root))
        # looked up first: an interrupted SDK session exits by itself (its CLI, and the tool processes in their
        # own sessions with it) before the ladder looks, and the report must still name them
        before = await procs.look(target)  # off the loop, one reading of /proc shared with other stops
        if interrupt_first and agent.capabilities.interrupt:
            await end_turn_first(agent, grace, log)
            report = await procs.stop_tree(target, grace, log)  # looked up again: the turn's end took its time
        else:
            report = await procs.stop_tree(target, grace, log, found=before)
        await agent.wait_done(EXIT_WAIT)
        survivors = await procs.wait_gone(before, EXIT_WAIT)
        report.pids = sorted(set(report.pids) | set(before))
        report.survivors = sorted(set(report.survivors) | set(survivors))
        report.seconds = time.monotonic() - started
        return report

    def left_behind(self) -> bool:
        return procs.group_has_members(self.pid)

    async def sweep(self, grace: float) -> KillReport:
        target = procs.Target(None, self.pid, self.spec.run_id, str(self.spec.root), attempt=self.spec.attempt)
        return await procs.stop_tree(target, grace)
