"""An agent running under a wrapper on a Ray worker: the transport of its ``Agent`` handle (``handle.Transport``).

``RayAttempt`` holds what the head knows of one attempt's Ray task (its lease,
its stream, the wrapper's last word) and ends once, when the spawner's pump says
so (``end``); stopping it is the spawner's work (``RaySpawner.stop_attempt``:
the stop board, then ``ray.cancel``), handed to it as ``stopper``.

A ``backend: sdk`` attempt also has its session's ``SdkFollow``, which applies
the runner's events the wrapper streams back (``wire.SdkEvent``) exactly as
locally, and its mailbox on the head's stop board (``BoardCarrier``), which
carries its interrupts, tells and ends: the wrapper, a client of the runner's
socket like the orchestrator locally, writes them there at its next poll and answers (``wire.ControlAnswer``), so a refusal (the
session had ended) comes back as a ``ControlError`` with one line, as locally.
The transcript lines the runner writes on the worker are appended to the run's
transcript on the head (``append_transcript``).
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
from orchestrator.agents.sdk.protocol import End, Interrupt, Tell
from orchestrator.agents.spec import LaunchSpec
from orchestrator.core.agent import KillReport, Log
from orchestrator.core.errors import ControlError

LOST_EXIT = 255  # the exit status recorded for an attempt whose wrapper was lost

#: stops an attempt's tree: ``stopper(attempt, agent, grace, log, interrupt_first)``
Stopper = Callable[["RayAttempt", Agent, float, Log, bool], Awaitable[KillReport]]
#: leaves a control message in the attempt's mailbox: ``post(attempt, {"id", "what", "line"})``
Post = Callable[["RayAttempt", dict[str, Any]], Awaitable[None]]


class RayAttempt:
    """One attempt's Ray task as the head sees it (its ``pid`` is on a remote node: ``create_time`` is None)."""

    def __init__(self, stopper: Stopper, spec: LaunchSpec, lease: str, gen: Any) -> None:
        self.stopper = stopper
        self.spec = spec
        self.lease = lease
        self.gen = gen
        self.pid: int | None = None  # on a remote node: its ``create_time`` is None
        self.create_time: float | None = None
        self.node: str | None = None  # where it runs, or the node that refused its start
        self.report: KillReport | None = None  # set when the wrapper reports having stopped the tree
        self.finished = False  # the attempt has ended, as the head sees it
        self.lost: str | None = None  # why the head gave the attempt up, when it did (no report of the tree's end)
        self.exit_pids: list[int] = []  # what the wrapper swept after the agent exited by itself
        self.heard = 0.0  # the clock's monotonic time of the wrapper's last message
        self.watchdog: Any = None  # the lost_after timer
        self.pump: asyncio.Future[None] | None = None  # reads the wrapper's stream to its end
        self.follow: SdkFollow | None = None  # an sdk attempt's session
        self.board: BoardCarrier | None = None  # and its mailbox on the stop board
        self._ending: asyncio.Future[Ending] = asyncio.get_running_loop().create_future()

    def end(self, code: int | None, reason: str | None) -> bool:
        """The attempt's one end, for its ``Agent`` (``code`` None: the wrapper was lost; ``reason``: its failure's);
        False when it had ended already."""
        if self.finished:
            return False
        self.finished = True
        if reason is not None and (code is None or self.report is None):
            self.lost = reason
        self._ending.set_result(Ending(code if code is not None else LOST_EXIT, reason))
        return True

    async def ended(self) -> Ending:
        return await asyncio.shield(self._ending)

    async def stop(self, agent: Agent, grace: float, log: Log, interrupt_first: bool) -> KillReport:
        return await self.stopper(self, agent, grace, log, interrupt_first)

    def left_behind(self) -> bool:
        """Never: the wrapper itself kills what an exited agent left, before it reports the exit."""
        return False

    async def sweep(self, grace: float) -> KillReport:
        """Nothing to do on the head (see ``left_behind``)."""
        return KillReport()


class BoardCarrier:
    """An sdk attempt's controls, through its mailbox on the stop board (``follow.Carrier``)."""

    def __init__(self, attempt: RayAttempt, post: Post, answer_wait: float) -> None:
        self.attempt = attempt
        self.post = post
        self.answer_wait = answer_wait  # how long a control may take to be answered by the wrapper
        self._answers: dict[str, tuple[str, asyncio.Future[str | None]]] = {}

    async def send(self, follow: SdkFollow, message: Interrupt | Tell | End, what: str) -> None:
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
        except Exception as exc:  # noqa: BLE001 - Ray's errors reaching the stop board, in one line for a person
            raise ControlError(
                f"cannot leave the {what} for run {self.attempt.spec.run_id}'s wrapper: {first_line(exc)}"
            ) from None
        finally:
            self._answers.pop(ident, None)
        if refused:
            raise ControlError(refused)

    def answered(self, ident: str, refused: str | None) -> None:
        """The wrapper's answer to one control message."""
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
