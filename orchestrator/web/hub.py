"""The ``events`` stream's fan-out: each change is encoded once and queued for every connected page.

A page that falls ``QUEUE_MAX`` batches behind is dropped (its stream ends; the browser reconnects and reads the
state afresh) rather than holding memory or slowing the loop for the others. Besides the run changes the
attachment reports, ``watch_live`` looks at the live snapshot twice a second, while anyone listens, and says
when holds, pauses, queues or the notices (the log's recent lines) changed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

QUEUE_MAX = 1000  # batches
HEARTBEAT = 15.0  # seconds between comments that keep proxies and the browser from closing an idle stream
LIVE_EVERY = 0.5
RETRY_MS = 1000  # what the browser waits before reconnecting
FLUSH_EVERY = 0.1  # seconds from an event to its page: batches of changes, well inside the promised second


def encode(kind: str, data: Any) -> bytes:
    """One server-sent event."""
    return f"event: {kind}\ndata: {json.dumps(data, default=str, separators=(',', ':'))}\n\n".encode()


class Hub:
    """The connected pages' queues."""

    def __init__(self) -> None:
        self.queues: set[asyncio.Queue[bytes | None]] = set()
        self.dropped = 0
        self.pending: list[bytes] = []
        self._flush_due: asyncio.TimerHandle | None = None

    def publish(self, event: dict[str, Any]) -> None:
        """Queue ``event`` (``{"type": ..., ...}``) for every page; never blocks.

        Events are sent in batches, ``FLUSH_EVERY`` after the first of them: a memo's start is four state
        changes within milliseconds, and one write per page for all of them, after the start is done, keeps the
        pages off the loop while it starts agents (20 pages cost 70 % on the start latency unbatched)."""
        if not self.queues:
            return
        self.pending.append(encode(str(event.get("type", "message")), event))
        if self._flush_due is None:
            self._flush_due = asyncio.get_running_loop().call_later(FLUSH_EVERY, self._flush)

    def _flush(self) -> None:
        self._flush_due = None
        chunk, self.pending = b"".join(self.pending), []
        for queue in list(self.queues):
            try:
                queue.put_nowait(chunk)
            except asyncio.QueueFull:
                self.queues.discard(queue)
                self.dropped += 1  # its stream drains what it has, sees it is gone, and ends

    async def stream(self, first: bytes | None = None) -> AsyncIterator[bytes]:
        """One page's events (``first`` before them), with heartbeats, until it goes or the hub closes."""
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(QUEUE_MAX)
        self.queues.add(queue)
        try:
            yield f"retry: {RETRY_MS}\n\n".encode()
            if first is not None:
                yield first
            while queue in self.queues or not queue.empty():
                try:
                    chunk = await asyncio.wait_for(queue.get(), HEARTBEAT)
                except TimeoutError:
                    yield b": ping\n\n"
                    continue
                if chunk is None:
                    return
                yield chunk
        finally:
            self.queues.discard(queue)

    def close(self) -> None:
        """End every stream (the server stops)."""
        if self._flush_due is not None:
            self._flush_due.cancel()
            self._flush()
        for queue in list(self.queues):
            try:
                queue.put_nowait(None)
            except asyncio.QueueFull:
                pass
        self.queues.clear()

    async def watch_live(self, light: Callable[[], dict[str, Any]]) -> None:
        """Publish what changed of holds, pauses, queues and notices; looks only while a page listens."""
        last: dict[str, Any] = {}
        seen_notices: list[str] = []
        while True:
            await asyncio.sleep(LIVE_EVERY)
            if not self.queues:
                last = {}
                continue
            snap = light()
            for key in ("holds", "paused", "queued", "ending", "budget_blocks"):
                value = snap.get(key)
                if key in last and last[key] != value:
                    self.publish({"type": key, key: value})
                last[key] = value
            notices = list(snap.get("events") or [])
            fresh = notices[len(notices) - _new_count(seen_notices, notices) :] if seen_notices else []
            for line in fresh:
                self.publish({"type": "notice", "line": line})
            seen_notices = notices


def _new_count(old: list[str], new: list[str]) -> int:
    """How many lines at the end of ``new`` came after ``old`` (both windows of one growing log)."""
    if not old:
        return 0
    last = old[-1]
    for index in range(len(new) - 1, -1, -1):
        if new[index] == last:
            return len(new) - 1 - index
    return len(new)
