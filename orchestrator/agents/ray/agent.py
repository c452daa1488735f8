"""An attempt on a Ray worker as the head sees it: the transport of its ``Agent``, and an sdk attempt's controls.

Only Ray connects the head to a wrapper, so an sdk session's controls wait in a mailbox in the wrapper's actor,
which the wrapper polls, and its answers come back with its other messages.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from orchestrator.agents.handle import Agent, Ending
from orchestrator.agents.ray import first_line
from orchestrator.agents.sdk.follow import SdkFollow
from orchestrator.agents.sdk.protocol import Interrupt, Tell
from orchestrator.agents.spec import LaunchSpec
from orchestrator.core.agent import KillReport, Log
from orchestrator.core.errors import ControlError

LOST_EXIT = 255  # the exit status recorded for an attempt whose wrapper was lost

#: stops an attempt's tree: ``stopper(attempt, agent, grace, log, interrupt_first)``
Stopper = Callable[["RayAttempt", Agent, float, Log, bool], Awaitable[KillReport]]
#: lets the attempt's actor go once the head has its end: ``release(attempt)``
Release = Callable[["RayAttempt"], None]
#: leaves a control message in the attempt's mailbox: ``post(attempt, {"id", "what", "line"})``
Post = Callable[["RayAttempt", dict[str, Any]], Awaitable[None]]


class RayAttempt:
    """One attempt's Ray actor as the head sees it (its ``pid`` is on a remote node: ``create_time`` is None)."""

    def __init__(
        self, stopper: Stopper, release: Release, spec: LaunchSpec, lease: str, actor: Any, stop_slack: float
    ) -> None:
        """``stop_slack``: how long the stopper may wait for Ray beyond the ladder's own (``AgentHandle``)."""
        self.stopper = stopper
        self.stop_slack = stop_slack
        self.release = release
        self.spec = spec
        self.lease = lease
        self.actor = actor
        self.seq = 0  # the number of the last message taken from the actor
        self.backlog: list[tuple[int, dict[str, Any]]] = []  # messages a head that came back has yet to read
        self.floor = 0  # a head that came back: the number of the last message it had when it did
        self.pid: int | None = None
        self.create_time: float | None = None
        self.node: str | None = None  # where it runs, or the node that refused its start
        self.node_id: str | None = None  # Ray's id of the node it runs on (as its wrapper said)
        self.report: KillReport | None = None  # set when the wrapper reports having stopped the tree
        self.finished = False
        self.lost: str | None = None  # why the head gave the attempt up without a report of the tree's end
        self.given_up: str | None = None  # why ``lost_after`` gave it up: its end, once its agent is stopped
        self.exit_pids: list[int] = []  # what the wrapper swept after the agent exited by itself
        self.heard = 0.0  # the clock's monotonic time of the wrapper's last message
        self.watchdog: Any = None  # the lost_after timer
        self.pump: asyncio.Future[None] | None = None  # reads the wrapper's stream to its end
        self.follow: SdkFollow | None = None  # an sdk attempt's session
        self.board: BoardCarrier | None = None  # an sdk attempt's mailbox in its actor
        self._ending: asyncio.Future[Ending] = asyncio.get_running_loop().create_future()

    def end(self, code: int | None, reason: str | None, at: float | None = None) -> bool:
        """End the attempt once (``code`` None: the wrapper was lost; ``reason``: why it failed; ``at``: when, if it
        was not now); False when it had ended already."""
        if self.finished:
            return False
        self.finished = True
        if reason is not None and (code is None or self.report is None):
            self.lost = reason
        self._ending.set_result(Ending(code if code is not None else LOST_EXIT, reason, at))
        return True

    async def ended(self) -> Ending:
        return await asyncio.shield(self._ending)

    async def stop(self, agent: Agent, grace: float, log: Log, interrupt_first: bool) -> KillReport:
        return await self.stopper(self, agent, grace, log, interrupt_first)

    def left_behind(self) -> bool:
        """Never: the wrapper itself kills what an exited agent left, before it reports the exit. Asked once the
        head has recorded the end, so the actor that kept it is let go here."""
        self.release(self)
        return False

    async def sweep(self, grace: float) -> KillReport:
        """Nothing to do on the head (see ``left_behind``)."""
        return KillReport()


class BoardCarrier:
    """An sdk attempt's controls, through its mailbox in the wrapper's actor (``follow.Carrier``)."""

    def __init__(self, attempt: RayAttempt, post: Post, answer_wait: float) -> None:
        self.attempt = attempt
        self.post = post
        self.answer_wait = answer_wait  # how long a control may take to be answered by the wrapper
        self._answers: dict[str, tuple[str, asyncio.Future[str | None]]] = {}

    async def send(self, follow: SdkFollow, message: Interrupt | Tell, what: str) -> None:
        if self.attempt.finished:
            raise ControlError(follow.ended_line(what))
        ident = uuid.uuid4().hex
        answer: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._answers[ident] = (follow.ended_line(what), answer)
        try:
            await self.post(self.attempt, {"id": ident, "what": what, "line": message.line()})
            refused = await asyncio.wait_for(asyncio.shield(answer), self.answer_wait)
        except TimeoutError:
            raise ControlError(
                f"the wrapper on {self.attempt.node} did not answer within {self.answer_wait:g}s; the {what} may not "
                f"have reached run {self.attempt.spec.run_id}'s session"
            ) from None
        except Exception as exc:  # noqa: BLE001 - Ray's errors reaching the actor, in one line for a person
            raise ControlError(
                f"cannot leave the {what} for run {self.attempt.spec.run_id}'s wrapper: {first_line(exc)}"
            ) from None
        finally:
            self._answers.pop(ident, None)
        if refused:
            raise ControlError(refused)

    def answered(self, ident: str, refused: str | None) -> None:
        """Hand the wrapper's answer to the control that waits for it."""
        pending = self._answers.get(ident)
        if pending is not None and not pending[1].done():
            pending[1].set_result(refused)

    async def settle(self, follow: SdkFollow) -> None:
        """The attempt ended: controls still waiting are refused."""
        for ended_line, answer in list(self._answers.values()):
            if not answer.done():
                answer.set_result(ended_line)


def append_transcript(transcript: Path, data: str) -> None:
    """Lines of the runner's transcript on the worker, appended to the run's transcript here."""
    transcript.parent.mkdir(parents=True, exist_ok=True)
    with open(transcript, "a", encoding="utf-8") as handle:
        handle.write(data)
