"""The questions a channel is reminded of (``remind:``), timed on the supervisor's clock.

A ``needs_input`` told to a channel with ``remind`` is told again every ``remind`` until its memo runs again or its
run ends. The timing lives on the loop, on the injected clock (so the replay harness moves it like every other
rule on time); the channel's thread only sends what it is handed, each reminder numbered (``"reminder": N``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from orchestrator.core.clock import Clock, Timer


@dataclass(frozen=True)
class RemindersDue:
    """Posted when the earliest reminder is due: the loop hands each due one to its channel."""


@dataclass
class Reminder:
    body: dict[str, Any]
    every: float  # seconds
    due: float  # on the clock's monotonic seconds
    count: int = 0


class Reminders:
    """Per channel and memo (its role and name: ``delivery.memo_key``), the question still waiting and when it is told
    again."""

    def __init__(self, clock: Clock, post: Callable[[object], None]) -> None:
        self.clock = clock
        self.post = post
        self.waiting: dict[tuple[int, str], Reminder] = {}  # (channel, memo) -> its next reminder
        self.timer: Timer | None = None

    def asked(self, channel: int, memo: str, body: dict[str, Any], every: float) -> None:
        """``body`` (a ``needs_input``) was handed to ``channel``: told again every ``every`` seconds. The same
        question told again before its memo settles (a restart's re-telling) keeps its first reminder's time."""
        if (channel, memo) not in self.waiting:
            self.waiting[(channel, memo)] = Reminder(body, every, self.clock.monotonic() + every)
            self._arm()

    def settled(self, channel: int, memos: Iterable[str]) -> None:
        """The memos ran again or their runs ended: no more reminders of them on ``channel``."""
        gone = [self.waiting.pop((channel, memo), None) for memo in memos]
        if any(gone):
            self._arm()

    def due(self) -> list[tuple[int, dict[str, Any]]]:
        """Every reminder due now, as (channel, body numbered), each set again ``every`` later."""
        self.timer = None
        now = self.clock.monotonic()
        out = []
        for (channel, _memo), reminder in self.waiting.items():
            if reminder.due <= now:
                reminder.count += 1
                reminder.due = now + reminder.every
                # a notification of its own: its own id, or a receiver that drops what it took already drops it
                out.append((channel, {**reminder.body, "id": uuid.uuid4().hex, "reminder": reminder.count}))
        self._arm()
        return out

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _arm(self) -> None:
        self.stop()
        if self.waiting:
            delay = max(0.0, min(r.due for r in self.waiting.values()) - self.clock.monotonic())
            self.timer = self.clock.call_later(delay, self.post, RemindersDue())
