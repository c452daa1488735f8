"""What the core tells people about the team as a whole: one typed event for a failure, a pause, a held memo, ...

The places that write a notice or print such a line (the usage-limit pauses, the loop breaker, the budgets, the
stall check, a crash loop, an ending with an error) hand a ``TeamEvent`` to ``TeamEvents``; the features that
listen (notifications) get it through the ``on_team_event`` hook. Nothing here knows who listens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, get_args

# what a person may ask to hear of (a channel's ``events``); ``test`` is only sent by ``orchestrator notify test``
NotifiableKind = Literal[
    "needs_input", "failed", "paused", "resumed", "held", "budget", "stalled", "crash_loop", "stopped"
]
TeamEventKind = Literal[NotifiableKind, "test"]
TEAM_EVENT_KINDS: tuple[str, ...] = get_args(NotifiableKind)


@dataclass(frozen=True)
class TeamEvent:
    """One thing a person may want to hear of: its ``kind``, and the role, memo and subject it is about when it
    is about one (a pause is about an account, a stop about the whole team); ``reason`` is the one line said
    (the question, for ``needs_input``)."""

    kind: TeamEventKind
    role: str | None = None
    memo: str | None = None
    subject: str | None = None
    reason: str = ""


@dataclass
class TeamEvents:
    """The fan-out: every listener hears every event, in the order they were added (called on the loop)."""

    listeners: list[Callable[[TeamEvent], None]] = field(default_factory=list)

    def __call__(self, event: TeamEvent) -> None:
        for listener in self.listeners:
            listener(event)
