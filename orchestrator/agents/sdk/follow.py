"""Following an sdk runner's events: the figures a session reported so far, whatever carried the events.

``SdkFollow`` is the part of an SDK agent that does not depend on where the
runner runs: the local agent (``backend.SdkAgent``, events on the runner's
stdout) and the Ray agent (``ray.sdk_agent.RaySdkAgent``, events streamed back by the
wrapper on a worker) both apply each ``protocol`` event here, so budgets, cost
accounting, ``status`` and the live view read the same attributes either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.agents.sdk.protocol import (
    ActivityEvent,
    AnyEvent,
    CostEvent,
    DoneEvent,
    End,
    FailureEvent,
    Interrupt,
    ResultEvent,
    SessionEvent,
    Tell,
    TellsEvent,
)
from orchestrator.core.errors import ControlError


class SdkFollow:
    """The figures of one session, updated by ``_apply``; a host class also has ``activity``, ``cost_usd``,
    ``result`` and ``failure_reason`` (``command.Agent``'s attributes)."""

    activity: str | None
    cost_usd: float | None
    result: dict[str, Any]
    failure_reason: str | None

    def _follow(self, transcript: Path) -> None:
        """Set the figures to a session's start; the host's ``__init__`` calls it."""
        self.transcript = transcript
        self.session_id: str | None = None
        self.budget_exceeded = False
        self.interrupted = False
        self.closing = False  # the runner said ``done``: no more turns, so no more controls
        self._doing: str | None = None  # the last activity the runner reported
        self.tells_pending = 0  # tells written into the session that the model has not answered yet
        self.permanent_failure = False  # the failure is one no retry can help (not logged in, key rejected, ...)
        self.on_update: Callable[[Any, dict[str, Any]], None] | None = None  # gets each event's JSON object

    async def _control(self, message: Interrupt | Tell | End, what: str) -> None:
        raise NotImplementedError  # the host carries controls: the runner's stdin or socket, or the stop board

    async def interrupt(self, keep: bool = False) -> None:
        """Stop the current turn; with ``keep`` the session then waits for a ``tell`` instead of ending."""
        await self._control(Interrupt(keep=keep), "interrupt")
        self.interrupted = True

    async def tell(self, text: str) -> None:
        """A follow-up message into the session; Claude Code takes it into the running turn (or a turn of its own)."""
        try:
            message = Tell(text=text)
        except ValidationError:  # the control layer refuses blank text first; this only keeps a traceback out
            raise ControlError("nothing to tell: the text is empty") from None
        await self._control(message, "tell")
        self.interrupted = False

    async def end(self) -> None:
        """Finish once the current turn ends, answering no queued tell."""
        await self._control(End(), "end")

    def _activity(self) -> str | None:
        """What the session does, and the tells it has not answered yet (``status`` and the live view show it)."""
        if not self.tells_pending:
            return self._doing
        tells = f"{self.tells_pending} tell{'s' if self.tells_pending > 1 else ''} pending"
        return f"{self._doing} ({tells})" if self._doing else tells

    def _apply(self, event: AnyEvent) -> None:
        """Update the figures from one runner event, then tell ``on_update``."""
        match event:
            case ActivityEvent(text=text):
                self._doing = text
                self.activity = self._activity()
            case CostEvent(usd=usd):
                self.cost_usd = usd
            case SessionEvent(session_id=session_id):
                self.session_id = session_id
            case ResultEvent():
                self.result = event.figures()
                self.cost_usd = event.cost_usd
                self.session_id = event.session_id or self.session_id
            case DoneEvent():
                self.closing = True
            case TellsEvent(pending=pending):
                self.tells_pending = pending
                self.activity = self._activity()
            case FailureEvent(reason=reason, budget=budget, permanent=permanent):
                self.failure_reason = reason or "the agent failed"
                self.budget_exceeded = self.budget_exceeded or budget
                self.permanent_failure = self.permanent_failure or permanent
        if self.on_update is not None:
            try:
                self.on_update(self, event.wire())
            except Exception as exc:  # noqa: BLE001 - a view that fails must not stop the figures from arriving
                asyncio.get_running_loop().call_exception_handler(
                    {"message": "SdkAgent.on_update failed", "exception": exc}
                )
