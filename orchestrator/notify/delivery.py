"""Delivery off the loop: per channel a bounded queue and one worker thread, retries with backoff and dedupe.

``Deliveries`` is the logic (no thread, no real time: its sleeper is given, so tests drive it directly);
``ChannelWorker`` runs one on a daemon thread fed by a bounded queue, so a channel that hangs or is down delays
nothing but its own later notifications. The worker thread alone touches a ``Deliveries``. When a question is told
again (``remind:``) is the loop's to say, on its clock (``notify/reminders.py``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.notify.channels import DeliveryError

QUEUE_MAX = 100  # events waiting for one channel; past it a new one is dropped with a line
BACKOFF = (2.0, 10.0, 30.0)  # seconds before each retry: four tries in all
SENT_KEPT = 10_000  # (event, memo, question) remembered against sending twice


def memo_key(role: str | None, memo: str) -> str:
    """A memo as notifications tell one from another: its role and name (two roles may hold one name)."""
    return f"{role or ''}/{memo}"


@dataclass(frozen=True)
class Deliver:
    """Send ``body`` (the payload) unless this event was sent for this memo already."""

    body: dict[str, Any]

    @property
    def key(self) -> tuple[str, str, str] | None:
        """What makes it the same event again: its kind and memo (and question), until the memo runs again or ends
        (``Settle``); a ``stopped`` once; None: always sent (a pause, a budget: each one is news; a reminder)."""
        memo = self.body.get("memo")
        if self.body.get("reminder"):
            return None
        if memo:
            return (
                self.body["event"],
                memo_key(self.body.get("role"), str(memo)),
                str(self.body.get("question") or ""),
            )
        return ("stopped", "", "") if self.body["event"] == "stopped" else None


@dataclass(frozen=True)
class Settle:
    """The memos run again or their runs ended: what was sent of them is news again (the same question asked again
    after its answer, a later memo of the same name that fails), each as ``memo_key`` gives it."""

    memos: tuple[str, ...]


@dataclass
class Deliveries:
    """One channel's deliveries. ``send(body) -> answer`` raises ``DeliveryError``; ``log`` takes one line for
    people (no secret in it: the caller scrubs)."""

    label: str
    send: Callable[[dict[str, Any]], str]
    log: Callable[[str], None]
    sleep: Callable[[float], None] = time.sleep
    backoff: tuple[float, ...] = BACKOFF
    sent: OrderedDict[tuple[str, str, str], None] = field(default_factory=OrderedDict)

    def take(self, item: Deliver | Settle) -> None:
        if isinstance(item, Settle):
            for said in [said for said in self.sent if said[1] in item.memos]:
                del self.sent[said]
            return
        key = item.key
        if key is not None:
            if key in self.sent:
                return
            self.sent[key] = None
            if len(self.sent) > SENT_KEPT:
                self.sent.popitem(last=False)
        self.deliver(item.body)

    def deliver(self, body: dict[str, Any]) -> bool:
        """Send with retries; one line either way."""
        what = f"{body['event']}" + (f" {body['memo']}" if body.get("memo") else "")
        tries = len(self.backoff) + 1
        for attempt in range(1, tries + 1):
            try:
                answer = self.send(body)
            except DeliveryError as exc:
                if attempt == tries:
                    self.log(f"{self.label}: {what} not delivered after {tries} tries: {exc}")
                    return False
                self.sleep(self.backoff[attempt - 1])
            else:
                self.log(f"{self.label}: told of {what} ({answer})")
                return True
        return False


_STOP = object()


class ChannelWorker:
    """A ``Deliveries`` on a daemon thread, fed through a bounded queue; ``submit`` never blocks."""

    def __init__(self, deliveries: Deliveries, maxsize: int = QUEUE_MAX) -> None:
        self.deliveries = deliveries
        self.queue: queue.Queue[object] = queue.Queue(maxsize)
        self.thread = threading.Thread(target=self._run, name=f"notify {deliveries.label}", daemon=True)
        self.dropped = 0

    def start(self) -> None:
        self.thread.start()

    def submit(self, item: Deliver | Settle) -> None:
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                self.deliveries.log(
                    f"{self.deliveries.label}: {self.dropped} notification(s) dropped: {QUEUE_MAX} wait already "
                    "(the channel is slow or down)"
                )

    def stop(self) -> None:
        """Ask the thread to end once what is queued is sent (it is a daemon: the process never waits for it)."""
        try:
            self.queue.put_nowait(_STOP)
        except queue.Full:
            pass

    def join(self, timeout: float) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is _STOP:
                return
            try:
                if isinstance(item, Deliver | Settle):
                    self.deliveries.take(item)
            except Exception as exc:  # noqa: BLE001 (a bug here must not end the channel's thread)
                self.deliveries.log(f"{self.deliveries.label}: internal error: {type(exc).__name__}: {exc}")
