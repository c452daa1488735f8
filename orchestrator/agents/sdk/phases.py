"""What a Claude session's loop is told (``Event``: a control line, the SDK's messages, its failure or end) and where
the session is (``Phase``), with the one table of the moves between phases (``NEXT``)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

# ---------------------------------------------------------------- what the loop is told


@dataclasses.dataclass(frozen=True)
class ControlLine:
    """A line from a connected orchestrator: a control message."""

    text: str


@dataclasses.dataclass(frozen=True)
class SdkMessage:
    """A parsed message from the CLI, through the SDK."""

    message: Any


@dataclasses.dataclass(frozen=True)
class SdkFailed:
    """The SDK's message stream raised: the CLI crashed, or wrote what it cannot read."""

    error: BaseException


@dataclasses.dataclass(frozen=True)
class SdkEnded:
    """The SDK's message stream ended: the CLI closed its stdout."""


Event = ControlLine | SdkMessage | SdkFailed | SdkEnded


# ---------------------------------------------------------------- where the session is


class Phase(enum.Enum):
    """Where the session is, and so what the end of the current turn leads to."""

    STARTING = "starting"
    """Connecting to the CLI; the prompt is not sent yet."""
    TURN = "turn"
    """A user message was sent and its result has not arrived. A tell is written to the CLI while a tool runs
    (the CLI takes it into the turn's next model call); otherwise it is held and sent as a turn of its own
    when this one ends. The session finishes once every message it wrote has been answered."""
    PAUSING = "pausing"
    """An interrupt with ``keep`` was sent: when the turn ends, the next queued tell is sent, else the session
    waits for one. The turn must end by the deadline."""
    INTERRUPTING = "interrupting"
    """An interrupt was sent and nothing follows: the session finishes (exit 3) when the turn ends, or at the
    deadline."""
    WAITING = "waiting"
    """Interrupted with ``keep``: the session is open until a ``tell`` or an interrupt without ``keep``."""
    DONE = "done"
    """The exit status is decided and ``done`` was sent; the loop stops."""


NEXT: dict[Phase, frozenset[Phase]] = {
    Phase.STARTING: frozenset({Phase.TURN, Phase.DONE}),  # the prompt is sent, or the CLI failed at once
    Phase.TURN: frozenset({Phase.TURN, Phase.PAUSING, Phase.INTERRUPTING, Phase.DONE}),
    Phase.PAUSING: frozenset({Phase.TURN, Phase.WAITING, Phase.INTERRUPTING, Phase.DONE}),
    Phase.INTERRUPTING: frozenset({Phase.DONE}),
    Phase.WAITING: frozenset({Phase.TURN, Phase.DONE}),
    Phase.DONE: frozenset(),
}
INTERRUPTED = frozenset({Phase.PAUSING, Phase.INTERRUPTING})  # an interrupt is in flight: the deadline applies
