"""Following an sdk runner's session: the figures it reported so far, and its controls, whatever carries them.

``SdkFollow`` is the same locally and on Ray, so budgets, cost accounting, ``status`` and the live view read the same
figures either way; only its ``Carrier`` differs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from orchestrator.agents import claude_stream
from orchestrator.agents.sdk.protocol import (
    EXIT_INTERRUPTED,
    EXIT_SIGNALLED,
    ActivityEvent,
    AnyControl,
    AnyEvent,
    CostEvent,
    DoneEvent,
    FailureEvent,
    Interrupt,
    ProtocolError,
    ResultEvent,
    SessionEvent,
    Tell,
    TellsEvent,
    WarningEvent,
    parse_event,
)
from orchestrator.core.agent import LastWords, UsageLimit
from orchestrator.core.errors import ControlError


class Carrier(Protocol):
    """What carries a session's controls to its runner (and, at its end, what the runner left): the runner's socket
    locally, the wrapper actor's mailbox on Ray."""

    async def send(self, follow: SdkFollow, message: AnyControl, what: str) -> None:
        """Deliver one control (the session is not ``follow.closing``); ``ControlError`` (one line) when it cannot
        reach the session."""
        ...

    async def settle(self, follow: SdkFollow) -> None:
        """The runner has ended: refuse controls from now on, and apply what it left that did not arrive."""
        ...


class SdkFollow:
    """The figures of one session of run ``run_id``, updated by ``apply``; controls go through ``carrier``."""

    def __init__(self, run_id: int, transcript: Path, log_path: Path, carrier: Carrier) -> None:
        self.run_id = run_id
        self.transcript = transcript
        self.log_path = log_path
        self.carrier = carrier
        self.activity: str | None = None
        self.cost_usd: float | None = None
        self.result: dict[str, Any] = {}
        self.failure_reason: str | None = None
        self.session_id: str | None = None
        self.budget_exceeded = False
        self.interrupted = False
        self.closing = False  # the runner said ``done``: no more turns, so no more controls
        self._doing: str | None = None  # the last activity the runner reported
        self.tells_pending = 0  # tells written into the session that the model has not answered yet
        self.permanent_failure = False  # the failure is one no retry can help (not logged in, key rejected, ...)
        self.usage_limit: UsageLimit | None = None  # the failure was the account's usage or rate limit
        self.warnings: list[str] = []  # lines for a person about a session that succeeded
        self.last_event_at: float | None = None  # when the last event came (epoch seconds), for the stall check

    def ended_line(self, what: str) -> str:
        """The refusal of a control that came after the session's end."""
        return f"run {self.run_id}'s agent session has already ended; nothing to {what}"

    async def _send(self, message: AnyControl, what: str) -> None:
        if self.closing:  # the runner said ``done``: whatever carries it, the session takes no more turns
            raise ControlError(self.ended_line(what))
        await self.carrier.send(self, message, what)

    async def interrupt(self, keep: bool = False) -> None:
        """Stop the current turn; with ``keep`` the session then waits for a ``tell`` instead of ending."""
        await self._send(Interrupt(keep=keep), "interrupt")
        self.interrupted = True

    async def tell(self, text: str) -> None:
        """A follow-up message into the session; Claude Code takes it into the running turn (or a turn of its own)."""
        try:
            message = Tell(text=text)
        except ValidationError:  # the control layer refuses blank text first; this only keeps a traceback out
            raise ControlError("nothing to tell: the text is empty") from None
        await self._send(message, "tell")
        self.interrupted = False

    async def settle(self) -> None:
        await self.carrier.settle(self)

    def unexplained(self, code: int) -> str | None:
        """The reason for an exit ``code`` the runner did not explain, pointing at the run's log; None when the code
        is no failure (0, an interrupt, a signal)."""
        if code > 0 and code not in (EXIT_INTERRUPTED, EXIT_SIGNALLED):
            return f"the sdk runner exited with status {code} without saying why; see {self.log_path}"
        return None

    def last_words(self) -> LastWords | None:
        """What the session last did and said, from the tail of its transcript (blocking: a worker thread's)."""
        try:
            return claude_stream.last_words(claude_stream.read_end(self.transcript))
        except OSError:
            return LastWords()

    def _activity(self) -> str | None:
        """What the session does, and the tells it has not answered yet (``status`` and the live view show it)."""
        if not self.tells_pending:
            return self._doing
        tells = f"{self.tells_pending} tell{'s' if self.tells_pending > 1 else ''} pending"
        return f"{self._doing} ({tells})" if self._doing else tells

    def restore(self, events: Iterable[AnyEvent]) -> None:
        """Apply events the runner left on disk."""
        for event in events:
            self.apply(event)

    def apply_line(self, line: str | bytes) -> None:
        """One line the runner sent: applied, unless it is no runner event (skipped, like a line over the limit)."""
        try:
            event = parse_event(line)
        except ProtocolError:
            return
        self.apply(event)

    def apply(self, event: AnyEvent) -> None:
        """Update the figures from one runner event."""
        self.last_event_at = time.time()
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
            case WarningEvent(text=text):
                self.warnings.append(text)
            case FailureEvent(reason=reason, budget=budget, permanent=permanent):
                self.failure_reason = reason or "the agent failed"
                if event.limit_kind:
                    self.usage_limit = UsageLimit(event.limit_kind, event.resets_at, self.failure_reason)
                self.budget_exceeded = self.budget_exceeded or budget
                self.permanent_failure = self.permanent_failure or permanent
