"""The boundary between the supervisor and agent processes: start one, stop one, sweep what it left.

A protocol, so the replay tests can pass a stand-in and run the supervisor's rules with no process and no real time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from orchestrator.agents import keeper
from orchestrator.agents.backends import backend_for
from orchestrator.agents.handle import Agent, HandleStops
from orchestrator.agents.spec import LaunchSpec
from orchestrator.config import Config
from orchestrator.core.agent import AgentHandle, AttemptVerdict, KillReport, Log
from orchestrator.core.clock import Clock

OnExit = Callable[[AgentHandle, AttemptVerdict], None]


class Spawner(Protocol):
    async def start(self, spec: LaunchSpec, on_exit: OnExit) -> AgentHandle:
        """Start the attempt's agent; ``on_exit(agent, verdict)`` is called in the loop, once, when it ends.
        Raises ``SpawnError`` (one line) when it cannot be started."""
        ...

    async def stop(self, agent: AgentHandle, grace: float, log: Log, interrupt_first: bool) -> KillReport:
        """Stop the agent's whole tree (an SDK agent's turn first, when asked); return what was ended."""
        ...

    def left_behind(self, agent: AgentHandle) -> bool:
        """Whether the agent, now exited, left processes in its group."""
        ...

    async def sweep(self, agent: AgentHandle, grace: float) -> KillReport:
        """Stop what one exited attempt left behind (only that attempt's: a retry must be spared)."""
        ...


@runtime_checkable
class RemoteRuns(Protocol):
    """A spawner whose attempts outlive the orchestrator off this machine (Ray): at a restart, recovery takes each
    one back from the cluster, and has the attempts it did not take back halted before any memo runs again."""

    async def reattach(self, spec: LaunchSpec) -> Agent | None:
        """The attempt of ``spec`` (its run id and attempt) as the last orchestrator left it, alive or ended and
        kept; None when it is gone for good. Not yet watched: the caller calls ``watch``."""
        ...

    async def halt_others(self, kept: set[tuple[int, int]]) -> list[str]:
        """Stop every attempt of this project left on the cluster but those in ``kept`` (run id, attempt)."""
        ...


def choose_spawner(config: Config, say: Log, clock: Clock | None = None) -> Spawner:
    """The spawner the configuration's ``executor`` asks for; Ray is imported only when it is asked for.

    ``clock`` is the supervisor's: the Ray spawner's rules on time (``start_timeout``, ``lost_after``) read it.
    """
    if config.executor.kind == "local":
        return ProcessSpawner(config.root, keeper.locate())
    from orchestrator.agents.ray.spawner import RaySpawner

    return RaySpawner(config.root, config.state_dir, config.executor, say, clock)


class ProcessSpawner(HandleStops):
    """Real agent processes under this project root, each started by its role's backend under the ``keeper``
    binary (None: each by itself, which only ``recovery: restart`` accepts)."""

    def __init__(self, root: Path, keeper: Path | None) -> None:
        self.root = root
        self.keeper = keeper

    async def start(self, spec: LaunchSpec, on_exit: OnExit) -> Agent:
        return await backend_for(spec.role).start(spec, on_exit, self.keeper)
