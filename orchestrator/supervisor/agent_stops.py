"""Agent stops: the loop starts them, they stop an agent's tree, and their outcome comes back as ``StopDone``.

A task touches no run: it is given the agent and what to do, and posts its
``KillReport``. One task per attempt; a second request for the same attempt
shares the first. Sweeps of what an exited agent left behind are kept too, so
the orchestrator never exits before they end.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Callable
from typing import Any

from orchestrator.agents.spawner import Spawner
from orchestrator.config import RoleRun
from orchestrator.console import Console
from orchestrator.core.agent import AgentHandle, KillReport
from orchestrator.core.events import Event, StopDone


class AgentStops:
    """Starts and keeps the tasks that stop agents' trees (the kill ladder) and sweep what exited ones left.

    Not to be confused with ``RunState.STOPPING`` (a run returned because the orchestrator is force-ending)
    or with the orchestrator's own ``Ending``: this is only the machinery that stops processes.
    """

    def __init__(self, spawner: Spawner, console: Console, post: Callable[[Event], None]) -> None:
        self.spawner = spawner
        self.console = console
        self.post = post
        self.tasks: dict[tuple[int, int], asyncio.Task[Any]] = {}
        self.sweeps: set[asyncio.Task[Any]] = set()

    def stop(self, run: RoleRun, grace: float, interrupt_first: bool = False) -> None:
        """Start the stop task for the run's current attempt, once."""
        key = (run.run_id, run.attempt)
        if key in self.tasks:
            return
        agent, role = run.agent, run.role.name

        def log(text: str) -> None:
            self.console.line(f"run {run.run_id}: {text}", role=role)

        async def stop() -> None:
            try:
                report = KillReport() if agent is None else await self.spawner.stop(agent, grace, log, interrupt_first)
            except Exception:  # noqa: BLE001 - the run must still end: its outcome is reported, never lost
                self.console.error(f"internal error: stopping run {run.run_id} failed:\n{traceback.format_exc()}")
                report = KillReport()
            self.post(StopDone(run.run_id, key[1], report))

        task = asyncio.ensure_future(stop())
        self.tasks[key] = task
        task.add_done_callback(lambda _t: self.tasks.pop(key, None))

    def orphan(self, agent: AgentHandle, run_id: int) -> None:
        """Stop an agent whose run is gone, at once; nothing waits for the outcome."""

        def log(text: str) -> None:
            self.console.line(f"run {run_id}: {text}")

        task = asyncio.ensure_future(self.spawner.stop(agent, 0.0, log, False))
        self.sweeps.add(task)
        task.add_done_callback(self.sweeps.discard)

    def sweep(self, run: RoleRun) -> None:
        """Stop what an exited attempt left in its process group."""
        agent = run.agent
        if agent is None or not self.spawner.left_behind(agent):
            return
        self.console.line(
            f"run {run.run_id}: processes left in its group after exit; stopping them", role=run.role.name
        )
        task = asyncio.ensure_future(self.spawner.sweep(agent, run.role.grace))
        self.sweeps.add(task)
        task.add_done_callback(self.sweeps.discard)

    async def drain(self, timeout: float) -> None:
        """At exit: wait for every sweep still under way (an agent's leftovers must not outlive us)."""
        pending = [t for t in self.sweeps if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
