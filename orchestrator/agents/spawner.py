"""The boundary between the supervisor and agent processes: start one, stop one, sweep what it left.

``ProcessSpawner`` is the real one (the ``command`` and ``sdk`` backends and the
kill ladder of ``procs``); the replay tests pass a stand-in with the same three
methods, so the supervisor's rules run with no process and no real time.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from orchestrator.agents import keeper, procs
from orchestrator.agents.command import Agent, LaunchSpec, start_command
from orchestrator.config import Config
from orchestrator.core.clock import Clock
from orchestrator.core.errors import ControlError

Log = Callable[[str], None]
EXIT_WAIT = 5.0  # after the ladder, how long to wait for the agent's exit status to be read


class Spawner(Protocol):
    async def start(self, spec: LaunchSpec, on_exit: Callable[[Any, int], None]) -> Any:
        """Start the attempt's agent; ``on_exit(agent, code)`` is called in the loop when it ends."""
        ...

    async def stop(self, agent: Any, run_id: int, grace: float, log: Log, interrupt_first: bool) -> procs.KillReport:
        """Stop the agent's whole tree (an SDK agent's turn first, when asked); return what was ended."""
        ...

    def left_behind(self, agent: Any) -> bool:
        """Whether the agent, now exited, left processes in its group."""
        ...

    async def sweep(self, agent: Any, run_id: int, attempt: int, grace: float) -> procs.KillReport:
        """Stop what one exited attempt left behind (only that attempt's: a retry must be spared)."""
        ...


def choose_spawner(config: Config, say: Log, clock: Clock | None = None) -> Spawner:
    """The spawner the configuration's ``executor`` asks for; Ray is imported only when it is asked for.

    ``clock`` is the supervisor's: the Ray spawner's rules on time (``start_timeout``, ``lost_after``) read it.
    """
    if config.executor.kind == "local":
        return ProcessSpawner(config.root)
    from orchestrator.agents.ray.spawner import RaySpawner

    return RaySpawner(config.root, config.executor, say, clock)


class ProcessSpawner:
    """Real agent processes under this project root."""

    def __init__(self, root: Path, use_keeper: bool | None = None) -> None:
        self.root = str(root)
        if use_keeper is None:  # ORCHESTRATOR_KEEPER=off: no keeper (the benchmark's comparison)
            use_keeper = os.environ.get("ORCHESTRATOR_KEEPER", "on") != "off"
        # every command agent runs under a keeper, so its exit status outlives us (None: none packaged, or it is off)
        self.keeper = keeper.locate() if use_keeper else None

    async def start(self, spec: LaunchSpec, on_exit: Callable[[Any, int], None]) -> Agent:
        if spec.role.backend == "sdk":
            from orchestrator.agents.sdk.backend import start_sdk

            return await start_sdk(spec, on_exit, self.keeper)  # under the keeper: it outlives us
        return await start_command(spec, on_exit, self.keeper)

    async def stop(self, agent: Any, run_id: int, grace: float, log: Log, interrupt_first: bool) -> procs.KillReport:
        if agent is None:
            return procs.KillReport()
        started = time.monotonic()
        target = procs.Target(agent.ref, agent.pid, run_id, self.root)
        # what lives now is what this stop ends, whichever step ends it: an interrupted SDK session exits by
        # itself (its CLI and the tool processes in their own sessions with it), before the ladder looks
        before = procs.find_tree(target)
        if interrupt_first and agent.backend == "sdk":
            await _interrupt_first(agent, grace, log)
        report = await procs.stop_tree(target, grace, log)
        if agent.waiter is not None:
            try:
                await asyncio.wait_for(asyncio.shield(agent.waiter), EXIT_WAIT)
            except TimeoutError:
                pass
        survivors = await procs.wait_gone(before, EXIT_WAIT)
        report.pids = sorted(set(report.pids) | set(before))
        report.survivors = sorted(set(report.survivors) | set(survivors))
        report.seconds = time.monotonic() - started
        return report

    def left_behind(self, agent: Any) -> bool:
        return procs.group_has_members(agent.pid)

    async def sweep(self, agent: Any, run_id: int, attempt: int, grace: float) -> procs.KillReport:
        target = procs.Target(None, agent.pid, run_id, self.root, attempt=attempt)
        return await procs.stop_tree(target, grace)


async def _interrupt_first(agent: Any, grace: float, log: Log) -> None:
    """End an SDK agent's turn cleanly; the kill ladder follows after ``grace`` if it has not ended."""
    try:
        await agent.interrupt()
    except ControlError:
        if not getattr(agent, "closing", False):
            return
        # its last turn is over and the CLI is saving the session: let it finish within the grace period
    if agent.waiter is not None:
        try:
            await asyncio.wait_for(asyncio.shield(agent.waiter), grace)
        except TimeoutError:
            log(f"no end of turn within {grace:g}s; using the kill ladder")
