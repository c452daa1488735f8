"""Work left for the end of the loop's current turn: one flush or one commit for everything the turn did."""

from __future__ import annotations

import sys
from collections.abc import Callable


def at_turn_end(callback: Callable[[], None]) -> bool:
    """Call ``callback`` once the loop's current turn has run what it had (True), or now when no loop runs (False)."""
    # asyncio only if something imported it already: importing it here would cost every command 30 ms
    aio = sys.modules.get("asyncio")
    try:
        if aio is None:
            raise RuntimeError("no event loop")
        aio.get_running_loop().call_soon(callback)
        return True
    except RuntimeError:  # no loop: a command, or the loop's very end
        callback()
        return False
