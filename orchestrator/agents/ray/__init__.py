"""Running agents on a Ray cluster: the same spawner boundary as local processes, one Ray actor per attempt.

Ray itself is imported only when ``executor: {kind: ray}`` asks for it, never for a local configuration.
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
