"""The daily retention pass of ``up``: the same pass as ``orchestrator gc``, once a day, off the loop's thread.

One timer on the supervisor's clock: the first pass ``START_DELAY`` after start-up (never in the way of the
first agents), then ``EVERY`` after the last one began (on record, so a restart does not bring it forward).
When it fires, the loop reads the time and hands the pass to a worker thread with its own database
connection (``sweep.collect``: removing thousands of files and rows must not hold up a claim); its
outcome comes back as a ``RetentionDone`` event and is logged in one line. The first pass of a project
whose memo index was never built builds it. An ending orchestrator stops a pass between two chunks.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from orchestrator.core.clock import Timer, iso
from orchestrator.intake import memo_index
from orchestrator.retention import sweep

if TYPE_CHECKING:
    from orchestrator.supervisor.loop import Supervisor

START_DELAY = 300.0  # seconds from start-up to the first pass
EVERY = 86400.0
LAST_PASS = "retention_last_pass"  # the ``meta`` key: when the last pass began


@dataclass(frozen=True)
class RetentionDue:
    """The daily pass's timer fired."""


@dataclass(frozen=True)
class RetentionDone:
    """A pass ended: its report, or why it did not finish."""

    result: dict[str, Any] | None = field(default=None, compare=False)
    problem: str | None = None


class DailyPass:
    """The daily pass of one supervisor."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup
        self.timer: Timer | None = None
        self.running: asyncio.Task[None] | None = None  # the pass (on its thread), while it runs
        self.stopping = threading.Event()
        self._post: Callable[[Any], None] = sup.post  # this module's own events, through the loop
        sup.handlers[RetentionDue] = self._due
        sup.handlers[RetentionDone] = self._done

    def start(self) -> None:
        """Set the timer for the first pass: ``START_DELAY`` from now, or a day after the last pass if later."""
        delay = START_DELAY
        last = self.sup.store.meta(LAST_PASS)
        if last:
            try:
                delay = max(
                    delay, (datetime.fromisoformat(last) + timedelta(seconds=EVERY) - self._now()).total_seconds()
                )
            except (ValueError, TypeError):
                pass
        self._arm(delay)

    def stop(self) -> None:
        """The orchestrator is ending: no next pass, and a running one stops at its next chunk."""
        self.stopping.set()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _now(self) -> datetime:
        return self.sup.clock.now()

    def _arm(self, delay: float) -> None:
        self.timer = self.sup.clock.call_later(delay, self._post, RetentionDue())

    def _due(self, _event: RetentionDue) -> None:
        self.timer = None
        if self.sup.ending or self.stopping.is_set() or self.running is not None:
            return
        now = self._now()
        reindex = not memo_index.is_complete(self.sup.store.db)
        self.sup.store.set_meta(LAST_PASS, iso(now))
        self.sup.store.checkpoint()  # on record before the pass's own connection looks
        self.running = asyncio.ensure_future(self._pass(now, reindex))

    async def _pass(self, now: datetime, reindex: bool) -> None:
        done = await asyncio.get_running_loop().run_in_executor(None, self._work, now, reindex)
        self._post(done)

    def _work(self, now: datetime, reindex: bool) -> RetentionDone:
        """On the worker thread: the pass, and how it went."""
        config = self.sup.config
        try:
            result = sweep.collect(config.root, config.retention, now, reindex=reindex, stop=self.stopping)
            done = RetentionDone(result)
        except sweep.Stopped:
            done = RetentionDone(problem="stopped: the orchestrator is ending; the next pass goes on from there")
        except (sqlite3.Error, OSError) as exc:
            done = RetentionDone(problem=f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a bug: loud in the log, and the orchestrator goes on
            done = RetentionDone(problem=f"internal error: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        return done

    def _done(self, event: RetentionDone) -> None:
        self.running = None
        if event.problem is not None:
            say = self.sup.console.error if event.problem.startswith("internal error") else self.sup.console.line
            say(f"retention: the daily pass did not finish ({event.problem}); `orchestrator gc` runs one now")
        elif event.result is not None:
            self.sup.console.line(summary(event.result))
        if not self.sup.ending and not self.stopping.is_set():
            self._arm(EVERY)


def summary(result: dict[str, Any]) -> str:
    """One line for the log: what a pass removed."""
    parts = []
    for kind in ("logs", "transcripts", "memos"):
        part = result[kind]
        if part["count"]:
            parts.append(f"{part['count']} {kind[:-1]}(s) ({sweep.human_bytes(part['bytes'])})")
    if result["runs"]["count"]:
        parts.append(f"{result['runs']['count']} run record(s)")
    indexed = f"; memo index built ({result['reindexed']} memos)" if result.get("reindexed") is not None else ""
    removed = "removed " + ", ".join(parts) if parts else "nothing to remove"
    return f"retention: {removed}{indexed}; next pass in 24h (`orchestrator gc --dry-run` shows what is due)"
