"""A broken invariant, handled: logged once with its traceback, its asker answered, and every run its event touched
ended as failed, so that no run is left ``cancelling`` or ``stopping`` holding its slot.

The loop hands each event to its handler (and then the scheduling) through ``InternalErrors.handle``. The lifecycle
notes each run it opens or moves (``Lifecycle.touched``); when the handler raises what is not a refusal, every one
of those still in the table, and the run the event names (its ``run_id``), ends as failed with the reason
"internal error: ...": its agent stopped, its memo in ``failed/``. A refusal (``OrchestratorError``) is the answer
to the person who asked, and changes no run.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from orchestrator.config import RoleRun
from orchestrator.console import Console
from orchestrator.core.errors import ControlError, OrchestratorError
from orchestrator.core.states import RunState
from orchestrator.supervisor.agent_stops import AgentStops
from orchestrator.supervisor.lifecycle import Lifecycle

INTERNAL_ERROR_ANSWER = "internal error; see .orchestrator/orchestrator.log"


class InternalErrors:
    """Runs handlers so that a bug in one is loud once and ends the runs it left in an unknown condition."""

    def __init__(self, lifecycle: Lifecycle, agent_stops: AgentStops, console: Console) -> None:
        self.lc = lifecycle
        self.agent_stops = agent_stops
        self.console = console

    def handle(self, event: object, handler: Callable[[Any], None] | None) -> None:
        """Call ``handler`` with ``event``; a refusal answers its reply, anything else is ``report``ed."""
        self.lc.touched.clear()
        try:
            if handler is None:
                raise TypeError(f"no handler for event {event!r}")
            handler(event)
        except OrchestratorError as exc:  # a refusal, for the person who asked
            reply = getattr(event, "reply", None)
            if reply is None or reply.done():
                self.report(event, exc)
            else:
                reply.set_exception(exc)
        except Exception as exc:  # noqa: BLE001 - a bug: loud, and the runs it concerns end as failed
            self.report(event, exc)

    def report(self, event: object, exc: BaseException) -> None:
        """Log the bug with its traceback, answer the event's reply, fail the runs it touched and the one it names."""
        detail = "".join(traceback.format_exception(exc))
        self.console.error(f"internal error while handling {type(event).__name__}: {exc}\n{detail}")
        reply = getattr(event, "reply", None)
        if reply is not None and not reply.done():
            reply.set_exception(ControlError(INTERNAL_ERROR_ANSWER))
        concerned = dict(self.lc.touched)
        named = self.lc.runs.get(getattr(event, "run_id", -1))
        if named is not None:
            concerned[named.run_id] = named
        self.lc.touched.clear()
        reason = f"internal error: {type(exc).__name__}: {exc}"
        for run in concerned.values():
            if self.lc.runs.get(run.run_id) is run:  # still in the table: the bug left it there
                self.fail(run, reason)

    def fail(self, run: RoleRun, reason: str) -> None:
        """End a run that a bug left in an unknown condition: its agent stopped, its memo to failed/."""
        if run.agent is not None and run.state.live:
            self.agent_stops.orphan(run.agent, run.run_id)
        try:
            self.lc.finish(
                run, RunState.FAILED, reason=reason, exit_code=run.exit_codes[-1] if run.exit_codes else None
            )
        except Exception as again:  # noqa: BLE001 - the last resort: the run must leave the table
            self.console.error(
                f"internal error: run {run.run_id} could not be ended ({again}); dropping it\n"
                + "".join(traceback.format_exception(again))
            )
            self.lc.drop(run)
