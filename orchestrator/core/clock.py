"""Time as a parameter: the wall clock, the monotonic clock and timers, behind one small interface.

The supervisor reads every time it decides by (retry backoff, timeouts, crash
windows, budgets' days, idle exit, record timestamps) from a ``Clock``; the
replay tests pass a ``ManualClock`` and step it, so no real time passes.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from datetime import datetime, timedelta, tzinfo
from typing import Any, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the supervisor needs of time."""

    def now(self) -> datetime:
        """The local wall-clock time, with its UTC offset."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (durations, windows)."""
        ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
        """Run ``callback(*args)`` in the loop after ``delay`` seconds."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` without holding up the loop: a wait inside the supervisor awaits this, never
        ``time.sleep``."""
        ...


def iso(moment: datetime) -> str:
    """ISO 8601 with milliseconds and the UTC offset, as every record stores it."""
    return moment.isoformat(timespec="milliseconds")


def wall_at(clock: Clock, mono: float | None) -> datetime:
    """The time at ``clock``'s monotonic reading ``mono`` (a run's ``ended_mono``); now when it is None."""
    return clock.now() - timedelta(seconds=clock.monotonic() - mono if mono is not None else 0.0)


def mono_at(clock: Clock, stamp: str | float | None) -> float:
    """``clock``'s monotonic reading at ``stamp`` (ISO 8601 text, or epoch seconds): a recorded time (a run's start,
    an exit a keeper recorded) on the clock that times runs; never after now, and now for no readable stamp."""
    try:
        at = datetime.fromisoformat(stamp).timestamp() if isinstance(stamp, str) else stamp
    except ValueError:
        return clock.monotonic()
    if at is None:
        return clock.monotonic()
    return clock.monotonic() - max(0.0, clock.now().timestamp() - at)


class SystemClock:
    """The real clocks, with timers on the running asyncio loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._minute = -1
        self._zone: tzinfo | None = None

    def now(self) -> datetime:
        """``datetime.now().astimezone()``, with the local zone's offset looked up once a minute (offsets change
        only on whole minutes): the lookup was most of the cost of the many times a run asks the time."""
        stamp = time.time()
        minute = int(stamp // 60)
        if minute != self._minute or self._zone is None:
            self._zone = datetime.fromtimestamp(stamp).astimezone().tzinfo
            self._minute = minute
        return datetime.fromtimestamp(stamp, self._zone)

    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
        loop = self._loop or asyncio.get_running_loop()
        return loop.call_later(delay, callback, *args)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _ManualTimer:
    def __init__(self, clock: ManualClock, due: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.due, self.callback, self.args = due, callback, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when told to (``advance``); its timers fire in due order as it passes them."""

    def __init__(self, start: datetime | None = None) -> None:
        self._wall = start or datetime(2026, 11, 30, 9, 0, 0).astimezone()
        self._mono = 1000.0
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._order = itertools.count()

    def now(self) -> datetime:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
        timer = _ManualTimer(self, self._mono + max(0.0, delay), callback, args)
        heapq.heappush(self._timers, (timer.due, next(self._order), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock is advanced past ``seconds`` from now (a zero wait only yields to the loop)."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, _wake, woken)
        try:
            await woken
        finally:
            timer.cancel()

    def pending(self) -> list[float]:
        """Seconds from now until each timer that has not fired or been cancelled."""
        return sorted(t.due - self._mono for _, _, t in self._timers if not t.cancelled)

    def advance(self, seconds: float) -> None:
        """Move both clocks forward, firing each timer at its due time (in order, callbacks may add timers)."""
        end = self._mono + seconds
        while self._timers and self._timers[0][0] <= end:
            due, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._step_to(due)
            timer.callback(*timer.args)
        self._step_to(end)

    def _step_to(self, mono: float) -> None:
        if mono > self._mono:
            self._wall += timedelta(seconds=mono - self._mono)
            self._mono = mono


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():  # a sleeper cancelled meanwhile
        woken.set_result(None)
