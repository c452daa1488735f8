"""Holding a role's wakes while one of its signal or preflight commands fails (``host.holds``, source
``wake``), with one notice to the ``notify`` role when the hold begins and one when it is lifted."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from orchestrator.schedule.context import ScheduleContext
    from orchestrator.schedule.writer import MemoWriter

HOLD_SOURCE = "wake"


class WakeHolds:
    """The wake holds of one supervisor's roles, and whom the ``notify`` role was told of."""

    def __init__(self, context: ScheduleContext, writer: MemoWriter, preflight_told: Callable[[str], bool]) -> None:
        self.wakes = context
        self.writer = writer
        self.preflight_told = preflight_told  # the preflight gate told the notify role of this role's failure
        self.told: set[str] = set()  # roles whose notify role was told of a held wake, to be told of the recovery

    def hold(self, name: str, reason: str) -> None:
        """Hold the role's wakes for ``reason``; the first time, tell the notify role."""
        wakes = self.wakes
        if wakes.host.holds.hold(name, HOLD_SOURCE, reason):
            wakes.console.line(f"wake held: {reason}", role=name)
            if reason.startswith("preflight ") and self.preflight_told(name):
                return  # the notify role was told of this preflight failure already, for the role's runs
            self.told.add(name)
            self.writer.notice(
                name,
                f"Held: wakes of {name}",
                f"The wakes of role **{name}** are held: {reason}\n"
                "No wake memo is written and no task is marked until the command succeeds again.",
            )

    def release(self, name: str) -> None:
        """Lift the role's wake hold; tell the notify role when it was told of the hold."""
        wakes = self.wakes
        if wakes.host.holds.release(name, HOLD_SOURCE) and name in self.told:
            self.told.discard(name)
            self.writer.notice(
                name,
                f"Recovered: wakes of {name}",
                f"The signals and preflight of role **{name}** succeed again; its wakes go on.",
            )

    def preflight_recovered(self, name: str) -> None:
        """The role's preflight passed (before a run): a wake hold that a failing preflight set is lifted too."""
        if self.wakes.host.holds.current.get(name, {}).get(HOLD_SOURCE, "").startswith("preflight "):
            self.release(name)
