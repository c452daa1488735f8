"""Running agents on a Ray cluster: the same spawner boundary as local processes, one Ray actor per attempt.

Ray itself is imported only when ``executor: {kind: ray}`` asks for it, never for a local configuration.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

INSTALL_HINT = "pip install 'orchestrator[ray]'"


def ray_installed() -> bool:
    """Whether the ``ray`` package can be imported, without importing it."""
    return importlib.util.find_spec("ray") is not None


def first_line(exc: BaseException) -> str:
    """An error from Ray as one line for a person: its first line, else its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def pending(coro: Any) -> asyncio.Future[Any]:
    """A task whose error is always retrieved, even when nobody waits for it any more (a start given up): asyncio
    would otherwise print it with a traceback at exit."""
    task = asyncio.ensure_future(coro)
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    return task


def lost_reason(exc: BaseException, node: str | None) -> str:
    """A Ray error as a failed attempt's reason."""
    name = type(exc).__name__
    if "NodeDied" in name:
        return f"the Ray node {node} died"
    if "WorkerCrashed" in name or "ActorDied" in name or "OwnerDied" in name:
        return f"the Ray worker on {node} died (its agent is killed by the next wrapper on that node)"
    if "Cancelled" in name:
        return f"the Ray actor on {node} was cancelled"
    return f"Ray lost the task on {node}: {name}: {first_line(exc)}"
