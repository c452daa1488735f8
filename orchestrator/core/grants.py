"""The grants a role's ``may:`` names, each one's default reach, and the check ``config`` makes of ``may:``.

Below ``config`` so a misspelt grant is a load-time error naming the key; what a grant lets a caller do is
decided in ``control.authority``.
"""

from __future__ import annotations

from enum import IntEnum


class Level(IntEnum):
    """How far a grant reaches."""

    NONE = 0
    OWN = 1  # the caller's own role's work
    ANY = 2  # every role's work


DEFAULTS: dict[str, Level] = {
    "send": Level.ANY,
    "memory": Level.OWN,
    "cancel": Level.OWN,
    "wake": Level.OWN,
    "task": Level.OWN,
    "handoff": Level.OWN,
    "stop": Level.NONE,
    "release": Level.NONE,
    "land": Level.NONE,
    "ask": Level.OWN,  # an agent asks a person about its own run
    "answer": Level.NONE,  # answering a question or approving a tool call is a person's
}
GRANTS = tuple(DEFAULTS)


def check_may(items: list[str]) -> list[str]:
    """``may:`` of a role: grant names, each raising it (``stop``) or lowering it (``-send``), once each."""
    seen: dict[str, str] = {}
    for item in items:
        name = item.removeprefix("-")
        if name not in DEFAULTS:
            raise ValueError(
                f"unknown grant {item!r}; known: {', '.join(GRANTS)} (each may be written -NAME to take it away)"
            )
        if name in seen:
            raise ValueError(f"{name!r} is named twice ({seen[name]!r} and {item!r}); name each grant once")
        seen[name] = item
    return items
