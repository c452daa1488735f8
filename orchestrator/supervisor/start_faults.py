"""Agents that could not start for a reason of the orchestrator's own: no dead letters, and no hot loop.

A start that failed for a reason the orchestrator or the machine caused, not the role's
configuration or its memos (``SpawnError.internal``: ``Argument list too long``, no descriptors,
memory or processes left, the run's list of memos not writable), must not send a memo to
``failed/``. The run ends ``returned``: its memos go back to the inbox at the front of the
role's queue, and the attempt that never began is not counted. The role is then held (``status``
shows it) and tries again after a wait that doubles with each such failure in a row, from
``FIRST_WAIT`` up to ``LONGEST_WAIT``; its next agent that starts ends the row. The first failure
of a row is logged as an internal error, the next ones as one line each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import RoleRun
from orchestrator.console import Console
from orchestrator.core.clock import Clock, Timer
from orchestrator.core.events import Event
from orchestrator.core.states import RunState
from orchestrator.intake.notices import name_list
from orchestrator.intake.queue import Intake
from orchestrator.supervisor.holds import Holds
from orchestrator.supervisor.lifecycle import Lifecycle

SOURCE = "start"  # the name of these holds in ``status``
FIRST_WAIT = 5.0  # seconds a role waits after its first internal start failure in a row
LONGEST_WAIT = 600.0


@dataclass(frozen=True)
class StartsResume:
    """A role held after an internal start failure may start work again."""

    role: str


class StartFaults:
    """Returns the memos of a start that failed by our doing, and holds the role for a growing wait."""

    def __init__(
        self,
        lifecycle: Lifecycle,
        intake: Intake,
        holds: Holds,
        console: Console,
        clock: Clock,
        post: Callable[[Event], None],
    ) -> None:
        self.lc = lifecycle
        self.intake = intake
        self.holds = holds
        self.console = console
        self.clock = clock
        self.post = post
        self.in_a_row: dict[str, int] = {}
        self.timers: dict[str, Timer] = {}

    def wait_after(self, failures: int) -> float:
        """Seconds a role waits after ``failures`` internal start failures in a row."""
        return min(FIRST_WAIT * 2 ** (failures - 1), LONGEST_WAIT)

    def failed(self, run: RoleRun, reason: str) -> None:
        """The run's agent could not start by our doing: memos back to the inbox, the role held for a while."""
        role = run.role.name
        failures = self.in_a_row[role] = self.in_a_row.get(role, 0) + 1
        wait = self.wait_after(failures)
        self.lc.end_attempt(run, "not started", f"internal error: {reason}", None)

        def back(moved: list[Path]) -> None:
            self.intake.put_back(role, moved, run.arrival)
            what = (
                f"run {run.run_id} of {role} could not start its agent: {reason}; "
                f"{name_list([p.name for p in moved]) or 'its memos'} went back to the inbox (no fault of the role "
                f"or its memos); {role} starts nothing for {wait:g}s"
            )
            if failures == 1:
                self.console.error(f"internal error: {what}")
            else:
                self.console.line(f"again ({failures} in a row): {what}", role=role)

        self.lc.finish(
            run,
            RunState.RETURNED,
            reason=f"internal error: {reason}",
            attempts_used=run.attempt - 1,  # it never began: the memos keep every retry they had
            announce=False,
            then=back,
        )
        self.holds.hold(role, SOURCE, f"its agent could not start (internal error); next try in {wait:g}s", quiet=True)
        timer = self.timers.pop(role, None)
        if timer is not None:
            timer.cancel()
        self.timers[role] = self.clock.call_later(wait, self.post, StartsResume(role))

    def resume(self, event: StartsResume) -> None:
        """The wait is over: the role may start again (the next failure waits longer)."""
        self.timers.pop(event.role, None)
        self.holds.release(event.role, SOURCE, quiet=True)

    def started(self, role: str) -> None:
        """An agent of the role started: its row of failures is over."""
        if self.in_a_row.pop(role, None) is not None:
            self.console.line("its agent started again after an internal start failure", role=role)
