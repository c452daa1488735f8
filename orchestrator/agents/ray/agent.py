"""An agent running under a wrapper on a Ray worker, as the supervisor sees it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from orchestrator.agents import procs
from orchestrator.agents.command import LaunchSpec
from orchestrator.core.errors import UnsupportedError


class RayAgent:
    """An agent running under a wrapper on a Ray worker, as the supervisor sees it (``ref`` None, ``pid`` remote)."""

    backend = "command"

    def __init__(self, spec: LaunchSpec, lease: str, gen: Any) -> None:
        self.spec = spec
        self.lease = lease
        self.gen = gen
        self.pid: int | None = None
        self.ref: procs.ProcRef | None = None
        self.node: str | None = None
        self.activity: str | None = None
        self.cost_usd: float | None = None
        self.result: dict[str, Any] = {}
        self.failure_reason: str | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.report: procs.KillReport | None = None  # set when the wrapper reports having stopped the tree
        self.ended = False
        self.lost: str | None = None  # why the head gave the attempt up, when it did (no report of the tree's end)
        self.exit_pids: list[int] = []  # what the wrapper swept after the agent exited by itself
        self.heard = 0.0  # the clock's monotonic time of the wrapper's last message
        self.watchdog: Any = None  # the lost_after timer
        self.on_exit: Callable[[Any, int], None] = lambda _agent, _code: None
        self.next: asyncio.Future[Any] | None = None

    async def interrupt(self, keep: bool = False) -> None:
        """End the current turn: the command backend cannot."""
        raise UnsupportedError(
            f"role {self.spec.role.name} uses the command backend, which cannot interrupt a turn; "
            "use `orchestrator cancel` to stop it"
        )

    async def tell(self, text: str) -> None:
        """Send a follow-up message: the command backend cannot."""
        raise UnsupportedError(
            f"role {self.spec.role.name} uses the command backend, which cannot take follow-up messages"
        )
