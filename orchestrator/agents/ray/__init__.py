"""Running agents on a Ray cluster: the same spawner boundary as local processes, one Ray task per attempt.

Its keys (``executor:``, ``resources:``) are ``config.ray``, which imports nothing heavy;
``wire`` is the typed messages between a wrapper and the head; ``wrapper`` is
what runs on a worker (``sdk_worker`` its part for an sdk runner); ``spawner`` is
the head's side and the only module that imports Ray (``agent`` the transport of
its agents, and an sdk role's mailbox). A configuration that does not ask for Ray never imports it.
"""

from __future__ import annotations

import importlib.util

INSTALL_HINT = "pip install 'orchestrator[ray]'"


def ray_installed() -> bool:
    """Whether the ``ray`` package can be imported, without importing it."""
    return importlib.util.find_spec("ray") is not None


def first_line(exc: BaseException) -> str:
    """An error from Ray as one line for a person: its first line, else its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
