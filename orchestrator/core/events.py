"""Typed events posted to the supervisor's loop by the watcher, the agents, timers and signals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MemoSeen:
    """A memo file appeared or changed in a role's inbox; ``complete`` when its writer is done."""

    role: str
    path: Path
    complete: bool


@dataclass(frozen=True)
class MemoGone:
    """A memo left an inbox (deleted, renamed, or claimed by us)."""

    role: str
    path: Path


@dataclass(frozen=True)
class RescanNeeded:
    """Events may have been missed; look at every inbox again."""

    reason: str


@dataclass(frozen=True)
class RunExited:
    run_id: int
    attempt: int
    returncode: int


@dataclass(frozen=True)
class TimeoutFired:
    run_id: int
    attempt: int


@dataclass(frozen=True)
class RetryDue:
    run_id: int


@dataclass(frozen=True)
class SignalReceived:
    signum: int
    at: float


Event = MemoSeen | MemoGone | RescanNeeded | RunExited | TimeoutFired | RetryDue | SignalReceived
