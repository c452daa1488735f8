"""Concurrency limits: how many agents run, per role and in all, and which waiting work goes next.

Pure bookkeeping with no I/O, so it is unit-tested on its own. The lifecycle
takes a slot when a run enters a live state and gives it back when it leaves
one; the scheduler asks ``pick`` what may start.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class SlotError(RuntimeError):
    """A bug: a slot given back that was never taken, or taken past a limit."""


class Slots:
    """Running agents per role and in all, against their limits."""

    def __init__(self, limits: dict[str, int], total: int) -> None:
        self.limits = dict(limits)
        self.total = total
        self.running: dict[str, int] = {name: 0 for name in limits}

    @property
    def in_use(self) -> int:
        return sum(self.running.values())

    def free(self, role: str) -> bool:
        """May one more agent of ``role`` start now?"""
        return self.in_use < self.total and self.running[role] < self.limits[role]

    def adopt(self, role: str) -> None:
        """Know a role that is not configured (a run of it recovered from the records); it never starts new work."""
        self.limits.setdefault(role, 0)
        self.running.setdefault(role, 0)

    def take(self, role: str) -> None:
        self.running[role] += 1

    def release(self, role: str) -> None:
        if self.running[role] <= 0:
            raise SlotError(f"role {role} gave back a slot it did not hold")
        self.running[role] -= 1


@dataclass(frozen=True)
class Waiting:
    """The oldest waiting work of one role: a retry that is due, or its queue's first memo."""

    role: str
    arrival: int
    retry: bool


def pick(candidates: Iterable[Waiting], slots: Slots, blocked: Iterable[str] = ()) -> Waiting | None:
    """The oldest candidate (by arrival, across roles) whose role has a free slot and is not blocked."""
    skip = set(blocked)
    best: Waiting | None = None
    for item in candidates:
        if item.role in skip or not slots.free(item.role):
            continue
        if best is None or (item.arrival, item.role) < (best.arrival, best.role):
            best = item
    return best
