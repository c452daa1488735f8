"""One run in memory: its memos, its state, its current agent, and the one method that changes its state."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchestrator.config import Role
from orchestrator.agents.command import Agent
from orchestrator.core.states import RunState, check_transition


@dataclass
class MemoRef:
    """A claimed memo: where it is now and what its front matter says."""

    name: str
    path: Path
    memo_id: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    sender: str | None = None

    @property
    def label(self) -> str:
        return self.memo_id or self.name.removesuffix(".md")


@dataclass
class Run:
    """A unit of work for one role: one memo, or every pending memo of a batch role."""

    run_id: int
    role: Role
    memos: list[MemoRef]
    seq: int
    attempt: int
    state: RunState = RunState.QUEUED
    agent: Agent | None = None
    log_path: Path | None = None
    started_mono: float | None = None
    started_at: str | None = None
    next_attempt_at: str | None = None
    exit_codes: list[int] = field(default_factory=list)
    timers: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    stopping: asyncio.Future[Any] | None = None
    stop_result: dict[str, Any] | None = None
    session_id: str | None = None
    resumed_from: str | None = None
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)  # latest figures of each SDK session
    last_ran: float | None = None  # seconds the last ended attempt ran
    holds_slot: bool = False
    launched: asyncio.Future[Agent | None] | None = None
    interrupt_request: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        first = self.memos[0].label if self.memos else "?"
        return first if len(self.memos) == 1 else f"{first} (+{len(self.memos) - 1})"

    @property
    def subject(self) -> str:
        return self.memos[0].subject or self.memos[0].name if self.memos else ""

    @property
    def pid(self) -> int | None:
        return self.agent.pid if self.agent else None

    def elapsed(self) -> float:
        return time.monotonic() - self.started_mono if self.started_mono is not None else 0.0

    def cancel_timers(self, *names: str) -> None:
        for name in names or list(self.timers):
            handle = self.timers.pop(name, None)
            if handle is not None:
                handle.cancel()

    def move_to(self, new: RunState, emit: Callable[[Run, RunState, RunState], None]) -> None:
        """Every state change passes here: checked against the table, then announced."""
        old = self.state
        check_transition(old, new)
        self.state = new
        emit(self, old, new)

    def describe(self) -> dict[str, Any]:
        """The run as ``status --json`` shows it."""
        first = self.memos[0] if self.memos else None
        return {
            "run_id": self.run_id,
            "role": self.role.name,
            "memo": first.name if first else None,
            "memo_id": first.memo_id if first else None,
            "memos": [m.name for m in self.memos],
            "subject": self.subject,
            "state": self.state.value,
            "pid": self.pid,
            "attempt": self.attempt,
            "started_at": self.started_at,
            "elapsed": round(self.elapsed(), 3) if self.state.live else None,
            "next_attempt_at": self.next_attempt_at if self.state is RunState.RETRY_WAIT else None,
            "backend": self.role.backend,
            "activity": self.agent.activity if self.agent else None,
            "cost_usd": self.agent.cost_usd if self.agent and self.agent.cost_usd is not None else None,
            "log": str(self.log_path) if self.log_path else None,
        }
