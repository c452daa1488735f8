"""A ``backend: sdk`` run on a Ray worker, as the supervisor sees it: the same surface as the local ``SdkAgent``.

The figures come from the runner's events, which the wrapper streams back
(``wire.SdkEvent``) and ``SdkFollow`` applies exactly as locally; the transcript
lines the runner writes on the worker are appended to the run's transcript on
the head. ``interrupt``, ``tell`` and ``end`` are left in the attempt's mailbox
on the head's stop board; the wrapper writes them to the runner's stdin at its
next poll and answers (``wire.ControlAnswer``), so a refusal (the session had
ended) comes back as a ``ControlError`` with one line, as locally.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from orchestrator.agents.command import LaunchSpec
from orchestrator.agents.ray.agent import RayAgent
from orchestrator.agents.sdk.follow import SdkFollow
from orchestrator.agents.sdk.protocol import (
    EXIT_INTERRUPTED,
    EXIT_SIGNALLED,
    End,
    Interrupt,
    ProtocolError,
    Tell,
    parse_event,
)
from orchestrator.core.errors import ControlError

#: leaves a control message in the attempt's mailbox: ``post(agent, {"id", "what", "line"})``
Post = Callable[["RaySdkAgent", dict[str, Any]], Awaitable[None]]


class RaySdkAgent(SdkFollow, RayAgent):
    """An sdk runner under a wrapper on a Ray worker, with the figures its events reported so far."""

    backend = "sdk"

    def __init__(
        self, spec: LaunchSpec, lease: str, gen: Any, transcript: Path, post: Post, answer_wait: float
    ) -> None:
        RayAgent.__init__(self, spec, lease, gen)
        self._follow(transcript)
        self.post = post
        self.answer_wait = answer_wait  # how long a control may take to be answered by the wrapper
        self._answers: dict[str, tuple[str, asyncio.Future[str | None]]] = {}

    def _ended_line(self, what: str) -> str:
        return f"run {self.spec.run_id}'s agent session has already ended; nothing to {what}"

    async def _control(self, message: Interrupt | Tell | End, what: str) -> None:
        if self.closing or self.ended:
            raise ControlError(self._ended_line(what))
        ident = uuid.uuid4().hex
        answer: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._answers[ident] = (what, answer)
        try:
            await self.post(self, {"id": ident, "what": what, "line": message.line()})
            refused = await asyncio.wait_for(asyncio.shield(answer), self.answer_wait)
        except TimeoutError:
            raise ControlError(
                f"the wrapper on {self.node} did not answer within {self.answer_wait:g}s; the {what} may not have "
                f"reached run {self.spec.run_id}'s session"
            ) from None
        except Exception as exc:  # noqa: BLE001 - Ray's errors reaching the stop board, in one line for a person
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ControlError(f"cannot leave the {what} for run {self.spec.run_id}'s wrapper: {first}") from None
        finally:
            self._answers.pop(ident, None)
        if refused:
            raise ControlError(refused)

    # ------------------------------------------------------------ what the wrapper streams back
    def event_line(self, line: str) -> None:
        """One runner event from the worker: the figures as locally."""
        try:
            event = parse_event(line)
        except ProtocolError:  # not a runner event: skipped, as locally
            return
        self._apply(event)

    def transcript_lines(self, data: str) -> None:
        """Lines of the runner's transcript on the worker, appended to the run's transcript here."""
        self.transcript.parent.mkdir(parents=True, exist_ok=True)
        with open(self.transcript, "a", encoding="utf-8") as handle:
            handle.write(data)

    def answered(self, ident: str, refused: str | None) -> None:
        """The wrapper's answer to one control message."""
        pending = self._answers.get(ident)
        if pending is not None and not pending[1].done():
            pending[1].set_result(refused)

    def exited(self, code: int) -> None:
        """The attempt ended: controls still waiting are refused, and an unexplained failure says where to look."""
        for what, answer in list(self._answers.values()):
            if not answer.done():
                answer.set_result(self._ended_line(what))
        if code > 0 and code not in (EXIT_INTERRUPTED, EXIT_SIGNALLED) and self.failure_reason is None:
            self.failure_reason = (
                f"the sdk runner exited with status {code} without saying why; see {self.spec.log_path}"
            )
