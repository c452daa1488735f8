"""An agent process on this machine, as an ``Agent``'s transport: its end read by an ``EndReader``, its tree
stopped by the kill ladder (``procs``)."""

from __future__ import annotations

import time

from orchestrator.agents import procs
from orchestrator.agents.ends import EndReader, KeeperRecord, record_path
from orchestrator.agents.handle import Agent, Ending, end_turn_first
from orchestrator.agents.spec import LaunchSpec
from orchestrator.core.agent import KillReport, Log

EXIT_WAIT = 5.0  # after the ladder, how long to wait for the agent's exit status to be read


class LocalProcess:
    """The agent ``pid`` of ``spec``'s attempt (``ref``: with its create time, when it was seen alive)."""

    def __init__(self, spec: LaunchSpec, pid: int | None, ref: procs.ProcRef | None, end: EndReader) -> None:
        self.spec = spec
        self.ref = ref
        self.end = end
        self._pid = pid

    @classmethod
    def adopted(cls, spec: LaunchSpec, ref: procs.ProcRef, keeper_pid: int | None) -> LocalProcess:
        """A live agent of an orchestrator that died: its end is its keeper's record, once that keeper has
        ended (its own end, when no keeper is left)."""
        keeper = procs.ProcRef.of(keeper_pid) if keeper_pid is not None else None
        return cls(spec, ref.pid, ref, KeeperRecord(record_path(spec), keeper, ref))

    @classmethod
    def recorded(cls, spec: LaunchSpec, pid: int | None) -> LocalProcess:
        """An agent that ended while the orchestrator was down (``pid``: its group, when a sweep may look there):
        what its keeper recorded."""
        return cls(spec, pid, None, KeeperRecord(record_path(spec), None, None))

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def create_time(self) -> float | None:
        return self.ref.create_time if self.ref is not None else None

    @property
    def node(self) -> str | None:
        return None

    async def ended(self) -> Ending:
        return Ending(await self.end.status())

    async def stop(self, agent: Agent, grace: float, log: Log, interrupt_first: bool) -> KillReport:
        """The agent's whole tree, stopped (an SDK agent's turn first, when asked): what was ended."""
        started = time.monotonic()
        target = procs.Target(self.ref, self._pid, self.spec.run_id, str(self.spec.root))
        # what lives now is what this stop ends, whichever step ends it: an interrupted SDK session exits by
        # itself (its CLI and the tool processes in their own sessions with it), before the ladder looks
        before = procs.find_tree(target)
        if interrupt_first and agent.backend == "sdk":
            await end_turn_first(agent, grace, log)
        report = await procs.stop_tree(target, grace, log)
        await agent.wait_done(EXIT_WAIT)
        survivors = await procs.wait_gone(before, EXIT_WAIT)
        report.pids = sorted(set(report.pids) | set(before))
        report.survivors = sorted(set(report.survivors) | set(survivors))
        report.seconds = time.monotonic() - started
        return report

    def left_behind(self) -> bool:
        return procs.group_has_members(self._pid)

    async def sweep(self, grace: float) -> KillReport:
        target = procs.Target(None, self._pid, self.spec.run_id, str(self.spec.root), attempt=self.spec.attempt)
        return await procs.stop_tree(target, grace)
