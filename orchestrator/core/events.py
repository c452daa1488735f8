"""Typed events posted to the supervisor's loop, and the one it emits when a run ends.

Producers (the watcher thread, agents' exit watchers, spawn and stop tasks,
timers, signals and the control channel) only post these; the loop alone
changes the run table in answer. A request from outside carries a future for
its reply, which the loop resolves (or fails with an ``OrchestratorError``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.core.agent import AgentHandle, AttemptVerdict, KillReport


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
class AgentStarted:
    """The spawn task started the agent of this attempt."""

    run_id: int
    attempt: int
    agent: AgentHandle = field(compare=False)


@dataclass(frozen=True)
class AgentStartFailed:
    """The spawn task could not start the agent; ``unexpected`` when it was not a plain spawn error (a bug).

    ``internal``: for a reason of the orchestrator's making (a limit of its own, the machine out of a resource),
    not the role's: the memos go back to the inbox and the role waits a while, instead of a failed attempt."""

    run_id: int
    attempt: int
    reason: str
    unexpected: bool = False
    internal: bool = False


@dataclass(frozen=True)
class RunExited:
    """The agent of this attempt ended; ``verdict`` says how (its exit status, negative: killed by that signal)."""

    run_id: int
    attempt: int
    verdict: AttemptVerdict


@dataclass(frozen=True)
class StopDone:
    """A stop task (interrupt first, then the kill ladder) ended the agent's tree; ``report`` says what it did."""

    run_id: int
    attempt: int
    report: KillReport = field(compare=False)


@dataclass(frozen=True)
class InterruptRefused:
    """The SDK session of this attempt refused an interrupt (its session had ended)."""

    run_id: int
    attempt: int


@dataclass(frozen=True)
class TimeoutFired:
    run_id: int
    attempt: int


@dataclass(frozen=True)
class StallCheck:
    """Time to see whether the attempt has written anything since ``since`` (epoch seconds)."""

    run_id: int
    attempt: int
    since: float


@dataclass(frozen=True)
class RetryDue:
    run_id: int


@dataclass(frozen=True)
class RunSettled:
    """The features' awaited work at a run's end is done (``supervisor.settling``): its end goes on."""

    run_id: int


@dataclass(frozen=True)
class SignalReceived:
    signum: int
    at: float


@dataclass(frozen=True)
class Tick:
    """The periodic safety net: rescan, watcher health, budgets, orphan reaping, idle exit."""


# ------------------------------------------------------------------ requests (each with a future for its reply)
@dataclass(frozen=True)
class StatusRequested:
    reply: asyncio.Future[Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class StopRequested:
    force: bool
    who: str
    reply: asyncio.Future[Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class CancelRequested:
    memo: str | None
    role: str | None
    all: bool
    who: str
    reason: str
    reply: asyncio.Future[Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class InterruptRequested:
    memo: str
    keep: bool
    who: str
    reason: str
    reply: asyncio.Future[Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class TellRequested:
    memo: str
    text: str
    who: str
    reply: asyncio.Future[Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class WakeRequested:
    """``orchestrator wake ROLE [--task NAME]``: write a wake now (``task`` forces that one task)."""

    role: str
    task: str | None
    who: str
    reply: asyncio.Future[Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class ScheduleChanged:
    """The ledger changed under the running orchestrator (``orchestrator task add|drop``): look again."""

    reply: asyncio.Future[Any] = field(compare=False, repr=False)


@dataclass(frozen=True)
class FeatureRequested:
    """A request a feature registered (``control.protocol.FeatureRequest``), for the handler it registered."""

    request: Any
    reply: asyncio.Future[Any] = field(compare=False, repr=False)


Request = (
    StatusRequested
    | StopRequested
    | CancelRequested
    | InterruptRequested
    | TellRequested
    | WakeRequested
    | ScheduleChanged
    | FeatureRequested
)
Event = (
    MemoSeen
    | MemoGone
    | RescanNeeded
    | AgentStarted
    | AgentStartFailed
    | RunExited
    | StopDone
    | InterruptRefused
    | TimeoutFired
    | StallCheck
    | RetryDue
    | SignalReceived
    | Tick
    | Request
)


# ------------------------------------------------------------------ emitted
@dataclass(frozen=True)
class RunFinished:
    """Emitted once by the lifecycle when a run ends, whatever the way."""

    run: Any = field(compare=False)
    previous: Any
    state: Any
    reason: str | None
    moved: list[Path] = field(default_factory=list, compare=False)
    cancel: Any = field(default=None, compare=False)
    announce: bool = True
