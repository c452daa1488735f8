"""One run in memory: its memos, its state, its current agent and what it is waiting for.

Every field is changed only by the ``Lifecycle`` (``orchestrator.supervisor.lifecycle``), the
state only by its ``transition``, which checks it against ``states.ALLOWED``; everyone else reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from orchestrator.core.agent import AgentHandle, KillReport
from orchestrator.core.states import RunState

if TYPE_CHECKING:
    import asyncio  # its handles are only annotations here; config, which names Run, need not load it


class RoleLike(Protocol):
    """What core itself reads of a run's role. The supervisor's runs hold ``config.Role`` (``Run[Role]``); core
    names only this, so it imports nothing above it."""

    @property
    def name(self) -> str: ...

    @property
    def backend(self) -> str: ...


RoleT = TypeVar("RoleT", bound=RoleLike)


@dataclass
class MemoRef:
    """A claimed memo: where it is now, what its front matter says, and when it was first seen in its inbox."""

    name: str
    path: Path
    memo_id: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    sender: str | None = None
    tasks: tuple[str, ...] | None = None  # a wake's ``tasks:``, read at the claim; None for a run rebuilt at restart
    created_at: str | None = None  # as its front matter says, read at the claim
    seen_ts: float | None = None  # epoch seconds on the supervisor's clock; None when not claimed from a queue

    @property
    def label(self) -> str:
        return self.memo_id or self.name.removesuffix(".md")


@dataclass(frozen=True)
class CancelOrder:
    """Who asked to stop a run and why; ``previous`` is the state it was in when asked, ``was`` what a person calls it
    when that is no run state (``waiting``: its memo waited for a person, its run over)."""

    who: str
    reason: str
    previous: RunState
    was: str | None = None

    @property
    def found(self) -> str:
        """What the cancel found, as its receipt, its record and its notice say it."""
        return self.was or self.previous.value

    @property
    def line(self) -> str:
        return f"cancelled by {self.who}" + (f": {self.reason}" if self.reason else "")


@dataclass
class Run(Generic[RoleT]):
    """A unit of work for one role: one memo, or every pending memo of a batch role."""

    run_id: int
    role: RoleT
    memos: list[MemoRef]
    arrival: int  # orders waiting work across roles (the oldest starts first)
    attempt: int
    state: RunState = RunState.QUEUED
    seq: int | None = None  # the role's run number, given when its memos are claimed for an agent
    agent: AgentHandle | None = None  # the current attempt's agent once it is started (or adopted)
    log_path: Path | None = None
    started_mono: float | None = None
    started_at: str | None = None
    next_attempt_at: str | None = None
    retry_due: bool = False  # its retry's time has come (RETRY_WAIT): what holds it now is its role's, not its timer
    exit_codes: list[int] = field(default_factory=list)
    timers: dict[str, asyncio.TimerHandle | Any] = field(default_factory=dict)
    session_id: str | None = None
    resumed_from: str | None = None
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)  # latest figures of each SDK session
    last_ran: float | None = None  # seconds the last ended attempt ran
    # the monotonic time its attempt's agent ended, when that came before its end was handled: an exit its keeper
    # recorded while the orchestrator was down (its run's time and end are the agent's, not the restart's)
    ended_mono: float | None = None
    cancel: CancelOrder | None = None  # given with the move into CANCELLING or INTERRUPTING, or a cancelled end
    stop_report: KillReport | None = None  # the last stop task's report
    stalled: str | None = None  # why the attempt being stopped as TIMING_OUT was stalled (no output), not timed out
    waiters: list[asyncio.Future[Any]] = field(default_factory=list)  # replies due when the run ends
    settling: str | None = None  # the end it is settling into (a feature's awaited work before its memos move)

    @property
    def label(self) -> str:
        first = self.memos[0].label if self.memos else "?"
        return first if len(self.memos) == 1 else f"{first} (+{len(self.memos) - 1})"

    @property
    def subject(self) -> str:
        return self.memos[0].subject or self.memos[0].name if self.memos else ""

    @property
    def pid(self) -> int | None:
        return self.agent.pid if self.agent is not None else None

    def elapsed(self, now: float) -> float:
        """Seconds the current attempt has run, by the monotonic clock reading ``now`` (up to its agent's end)."""
        end = now if self.ended_mono is None else min(now, self.ended_mono)
        return max(0.0, end - self.started_mono) if self.started_mono is not None else 0.0

    def cancel_timers(self, *names: str) -> None:
        for name in names or list(self.timers):
            handle = self.timers.pop(name, None)
            if handle is not None:
                handle.cancel()
