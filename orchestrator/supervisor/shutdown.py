"""The orchestrator's last steps, each taken even when one before it raised.

Stopping the features, the watcher and the live view, closing the control socket (its file removed), draining
the sweeps and closing the store are independent: a feature whose ``stop`` raises must not leave the socket file
behind (the next client would be told an orchestrator runs) or the store's last writes uncommitted. A step that
raises is logged once, with its traceback, and the next one runs.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable, Sequence
from typing import Any

Step = tuple[str, Callable[[], Any]]  # what it does, in a few words; the call (an awaitable it returns is awaited)


async def run_steps(steps: Sequence[Step], log_error: Callable[[str], None]) -> int:
    """Take every step in order; each failure is one error line with its traceback. Returns how many failed."""
    failed = 0
    for what, step in steps:
        try:
            result = step()
            if inspect.isawaitable(result):
                await result
        except Exception as exc:  # noqa: BLE001 - every step runs; the failure is loud once, in the log
            failed += 1
            log_error(
                f"internal error while shutting down ({what}): {type(exc).__name__}: {exc}\n"
                + "".join(traceback.format_exception(exc))
            )
    return failed
