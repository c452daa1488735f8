"""A run's end that waits for its features: a ``before_finish`` hook may return an awaitable (a workspace's commit
or set-aside, git work that must not run on the loop), and the memos move only once it is done.

While a run settles it keeps its slot and its place in the run table (``status`` shows it, a graceful end waits
for it, its workspace stays busy), its ``settling`` names the end it is settling into, and nothing else may end or
stop it: a second ``finish`` is ignored, a cancel waits for this end, a force ending leaves it be. When every
awaitable is done (a failed one is a bug, logged; the end goes on) ``RunSettled`` is posted and the rest of the
end runs in its handling, in the loop's one transaction per event, followed by the scheduling pass.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from orchestrator.config import RoleRun
from orchestrator.console import Console
from orchestrator.core.events import RunSettled


class Settling:
    """The runs whose end waits for their features' work, and what ends each once it is done."""

    def __init__(self, console: Console, post: Callable[[object], None]) -> None:
        self.console = console
        self.post = post
        self.rest: dict[int, Callable[[], Any]] = {}  # run id -> the rest of its end
        self.tasks: set[asyncio.Future[None]] = set()

    def defer(self, run: RoleRun, waits: list[Awaitable[Any]], rest: Callable[[], Any]) -> None:
        """End ``run`` (its ``settling`` set by the lifecycle) with ``rest`` once every one of ``waits`` is done."""
        self.rest[run.run_id] = rest
        task = asyncio.ensure_future(self._wait(run.run_id, waits))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _wait(self, run_id: int, waits: list[Awaitable[Any]]) -> None:
        for wait in waits:
            try:
                await wait
            except Exception:  # noqa: BLE001 - the end goes on; the bug is loud in the log and on the terminal
                self.console.error(f"internal error while run {run_id} was ending:\n{traceback.format_exc()}")
        self.post(RunSettled(run_id))

    async def drained(self) -> None:
        """Until every end under way has settled (recovery, before it empties the active/ folders)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    def settled(self, event: RunSettled) -> None:
        rest = self.rest.pop(event.run_id, None)
        if rest is not None:
            rest()
