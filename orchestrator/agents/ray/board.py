"""What the head puts into the cluster: one detached, named actor per attempt, which runs the wrapper and keeps its
word until a head takes it.

Detached, so the attempt outlives the orchestrator that started it (a Ray task dies with its driver); named from the
project (``names``), the run id and the attempt, so the next ``up`` finds it from the run's record alone and Ray's
own directory says whether it still lives. It keeps every message the wrapper said that no head has taken yet, the
``ended`` one included, and an sdk session's events whole, so a head that comes back rebuilds the session's figures.
With no head taking its messages for ``reconnect_within`` (or ``lost_after`` when that is 0) it kills its agent,
drops its end and leaves: the next ``up`` finds no actor and the attempt counts as failed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from orchestrator.agents.ray.wire import Payload

TAKE_WAIT = 1.0  # the longest one ``take`` waits for a new message: the head's long poll


class HeadGone(Exception):
    """No head has taken the wrapper's messages lately."""


class WrapperActor:
    """One attempt on a worker: the wrapper in a thread of its own, its messages kept in order until taken."""

    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = Payload.model_validate(payload)
        self.said: list[tuple[int, dict[str, Any]]] = []  # (sequence number, message) not yet taken
        self.events: list[dict[str, Any]] = []  # an sdk session's events, all of them: a new head replays them
        self.seq = 0
        self.first: dict[str, Any] | None = None  # the wrapper's first message: its agent started, or could not
        self.asked: float | None = None  # the grace of a stop request
        self.mail: list[dict[str, Any]] = []  # an sdk session's controls, not yet handed to the wrapper
        self.done = False  # the wrapper has said its last message
        self.head_seen = time.monotonic()
        self.taking = 0  # takes under way: a head waits on us
        self.quiet = max(1.0, self.payload.poll * 10) + TAKE_WAIT  # no take for this long: the head is gone
        self.keep = self.payload.reconnect_within or self.payload.lost_after
        self.started = False
        self.lock = threading.Condition()

    # ------------------------------------------------------------ the head's calls
    def start(self) -> None:
        """Start the wrapper (once) and the watch that lets the actor go when no head comes back."""
        with self.lock:
            if self.started:
                return
            self.started = True
        threading.Thread(target=self._run, daemon=True).start()
        threading.Thread(target=self._expire, daemon=True).start()

    def take(self, after: int, wait: float = TAKE_WAIT) -> list[tuple[int, dict[str, Any]]]:
        """The messages said after number ``after`` (those up to it are dropped: the head has them), waiting at
        most ``wait`` for one."""
        with self.lock:
            self.taking += 1
            try:
                self.said = [item for item in self.said if item[0] > after]
                if not self.said and not self.done:
                    self.lock.wait_for(lambda: bool(self.said) or self.done, timeout=wait)
                return list(self.said)
            finally:
                self.taking -= 1
                self.head_seen = time.monotonic()

    def resume(self) -> dict[str, Any]:
        """For a head that comes back: the lease, the first message, the sdk session's events so far, the other
        messages not yet taken, and the number of the last message said (the head takes on after it)."""
        with self.lock:
            self.head_seen = time.monotonic()
            skip = ("sdk_event", "started", "start_failed")
            return {
                "lease": self.payload.lease,
                "first": self.first,
                "events": list(self.events),
                "said": [item for item in self.said if item[1]["type"] not in skip],
                "last": self.seq,
            }

    def stop(self, grace: float) -> None:
        with self.lock:
            if self.asked is None:
                self.asked = grace

    def post(self, control: dict[str, Any]) -> None:
        with self.lock:
            self.mail.append(control)

    def halt(self, wait: float) -> bool:
        """Stop the agent's tree at once and wait at most ``wait`` for the wrapper's end; whether it ended."""
        self.stop(0.0)
        with self.lock:
            if not self.started:
                return True
            return self.lock.wait_for(lambda: self.done, timeout=wait)

    # ------------------------------------------------------------ the wrapper's side
    def _ask(self) -> float | None:
        with self.lock:
            if not self.taking and time.monotonic() - self.head_seen > self.quiet:
                raise HeadGone()
            return self.asked

    def _inbox(self) -> list[dict[str, Any]]:
        with self.lock:
            mail, self.mail = self.mail, []
            return mail

    def _say(self, data: dict[str, Any]) -> None:
        with self.lock:
            self.seq += 1
            if data["type"] == "sdk_event":
                self.events.append(data)
            elif self.first is None:
                self.first = data
            self.said.append((self.seq, data))
            self.lock.notify_all()

    def _run(self) -> None:
        import ray

        from orchestrator.agents.ray import wrapper

        context = ray.get_runtime_context()
        node = f"{ray.util.get_node_ip_address()}/{context.get_node_id()[:8]}"
        spec = self.payload
        try:
            for message in wrapper.run(spec, self._ask, node, self._inbox if spec.backend == "sdk" else None):
                data = message.model_dump()
                if data["type"] == "started":
                    data["node_id"] = context.get_node_id()
                self._say(data)
        finally:
            with self.lock:
                self.done = True
                self.lock.notify_all()

    def _expire(self) -> None:
        """Leave once no head has come for ``keep`` (the wrapper has killed its agent by then, for the same
        silence): the end is dropped, and the next head counts the attempt failed."""
        while True:
            time.sleep(self.payload.poll)
            with self.lock:
                gone = not self.taking and time.monotonic() - self.head_seen > self.keep + self.quiet
                if not (gone and self.done):
                    continue
            import ray

            ray.kill(ray.get_runtime_context().current_actor)
            return
