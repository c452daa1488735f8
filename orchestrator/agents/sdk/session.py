"""The session loop: the one owner of a Claude session, fed by the SDK's messages and the orchestrator's controls.

Two sources post to one queue (the SDK's message stream and a stdin reader
thread); ``Session`` alone takes from it, talks to the SDK client and decides
the exit status.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import os
import threading
from collections import deque
from typing import Any

from orchestrator.agents.sdk.messages import describe_activity, transcript_entry
from orchestrator.agents.sdk.protocol import (
    EXIT_BUDGET, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, ActivityEvent, CostEvent, DoneEvent, FailureEvent,
    Interrupt, ProtocolError, ResultEvent, RunnerSpec, SessionEvent, Tell, parse_control,
)  # fmt: skip
from orchestrator.agents.sdk.reasons import describe_error_result, describe_exception, one_line, stderr_summary, usd
from orchestrator.agents.sdk.totals import Totals
from orchestrator.agents.sdk.transcript import Output

INTERRUPT_ACK_SECONDS = 15.0  # the CLI answers an interrupt request at once; longer means it is stuck
INTERRUPTED_TURN_SECONDS = 30.0  # after the acknowledgement, how long the interrupted turn may take to end
DISCONNECT_SECONDS = 20.0  # the SDK's own close() is bounded at about 15 seconds


# ---------------------------------------------------------------- what the loop is told


@dataclasses.dataclass(frozen=True)
class StdinLine:
    """A line from the orchestrator: the spec, then control messages."""

    text: str


@dataclasses.dataclass(frozen=True)
class StdinClosed:
    """The orchestrator closed our stdin: no more control messages."""


@dataclasses.dataclass(frozen=True)
class SdkMessage:
    """A parsed message from the CLI, through the SDK."""

    message: Any


@dataclasses.dataclass(frozen=True)
class SdkFailed:
    """The SDK's message stream raised: the CLI crashed, or wrote what it cannot read."""

    error: BaseException


@dataclasses.dataclass(frozen=True)
class SdkEnded:
    """The SDK's message stream ended: the CLI closed its stdout."""


Event = StdinLine | StdinClosed | SdkMessage | SdkFailed | SdkEnded


def start_stdin_reader(loop: asyncio.AbstractEventLoop, events: asyncio.Queue[Event]) -> None:
    """Post each stdin line, then ``StdinClosed``, from a daemon thread.

    A thread with ``os.read`` works whatever stdin is (pipe, file, terminal) and
    holds no lock of ``sys.stdin``'s, so it cannot block the interpreter's exit.
    """

    def post(event: Event) -> bool:
        try:
            loop.call_soon_threadsafe(events.put_nowait, event)
            return True
        except RuntimeError:  # the loop is closed: the runner is exiting
            return False

    def pump() -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(0, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                if pending.strip():
                    post(StdinLine(pending.decode("utf-8", "replace")))
                post(StdinClosed())
                return
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip() and not post(StdinLine(line.decode("utf-8", "replace"))):
                    return

    threading.Thread(target=pump, name="stdin", daemon=True).start()


# ---------------------------------------------------------------- the session


class Phase(enum.Enum):
    """Where the session is; ``Session`` alone changes it."""

    STARTING = "starting"
    """Connecting to the CLI; the prompt is not sent yet."""
    TURN = "turn"
    """A user message was sent and its result has not arrived."""
    WAITING = "waiting"
    """Interrupted with ``keep``: the session is open until a ``tell``, ``end`` or EOF."""
    DONE = "done"
    """The exit status is decided; the loop stops."""


class Session:
    """The one loop that owns the session: it alone talks to the SDK client and decides the exit status."""

    def __init__(self, spec: RunnerSpec, options: Any, events: asyncio.Queue[Event], output: Output) -> None:
        self.spec = spec
        self.sdk_options = options
        self.options = spec.options
        self.per_run_usd = spec.per_run_usd
        self.events = events
        self.out = output
        self.client: Any = None
        self.phase = Phase.STARTING
        self.code: int | None = None
        self.totals = Totals()
        self.session_id: str | None = None
        self.pending: deque[str] = deque()
        self.end_requested = False
        self.stdin_closed = False
        self.interrupt_sent = False
        self.keep_after_interrupt = False
        self.deadline: float | None = None  # when an interrupted turn must have ended
        self.error_kind: str | None = None  # the last assistant message's ``error``, for the result's reason
        self.activity: str | None = None

    async def run(self) -> int:
        from claude_agent_sdk import ClaudeSDKClient

        self.client = ClaudeSDKClient(self.sdk_options)
        try:
            await self.client.connect()
        except Exception as exc:
            await self._settle_stderr()
            self.fail(describe_exception(exc, self.out.stderr_tail, self.options))
            return self.code or EXIT_FAILED
        pump = asyncio.ensure_future(self._pump())
        try:
            await self._send_turn(self.spec.prompt)
            while self.phase is not Phase.DONE:
                await self._handle(await self._next_event())
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pump
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self.client.disconnect(), DISCONNECT_SECONDS)
        return EXIT_FAILED if self.code is None else self.code

    async def _next_event(self) -> Event:
        if self.deadline is None:
            return await self.events.get()
        left = self.deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(self.events.get(), max(left, 0.0))
        except TimeoutError:
            self.out.note(f"the interrupted turn did not end within {INTERRUPTED_TURN_SECONDS:g}s; ending the session")
            self.finish(EXIT_INTERRUPTED)
            return SdkEnded()

    async def _pump(self) -> None:
        """SDK messages into the loop's queue; kept draining so the SDK's small buffer never blocks its reader."""
        try:
            async for message in self.client.receive_messages():
                self.events.put_nowait(SdkMessage(message))
        except Exception as exc:
            self.events.put_nowait(SdkFailed(exc))
        else:
            self.events.put_nowait(SdkEnded())

    async def _handle(self, event: Event) -> None:
        if self.phase is Phase.DONE:
            return
        if isinstance(event, SdkMessage):
            await self._on_message(event.message)
        elif isinstance(event, StdinLine):
            await self._on_control(event.text)
        elif isinstance(event, StdinClosed):
            self.stdin_closed = True
            if self.phase is Phase.WAITING:
                self.finish(EXIT_INTERRUPTED)
        elif isinstance(event, SdkFailed):
            await self._settle_stderr()
            self.fail(describe_exception(event.error, self.out.stderr_tail, self.options))
        elif isinstance(event, SdkEnded):
            await self._settle_stderr()
            tail = stderr_summary(self.out.stderr_tail)
            when = "while it waited for a tell" if self.phase is Phase.WAITING else "before the turn finished"
            self.fail(f"Claude Code ended the session {when}" + (f": {tail}" if tail else ""))

    # -- control messages

    async def _on_control(self, line: str) -> None:
        try:
            message = parse_control(line)
        except ProtocolError as exc:
            self.out.note(f"ignored a control line ({one_line(str(exc), 200)}): {one_line(line, 80)!r}")
            return
        self.out.record({"type": "control", **message.wire()})
        if isinstance(message, Interrupt):
            await self._interrupt(message.keep)
        elif isinstance(message, Tell):
            text = message.text
            if self.end_requested:
                self.out.note("ignored a tell after end")
            elif self.phase is Phase.WAITING:
                await self._send_turn(text)
            else:
                self.pending.append(text)
        else:  # End
            self.end_requested = True
            if self.pending:
                self.out.note(f"end: dropping {len(self.pending)} queued tell(s)")
                self.pending.clear()
            if self.phase is Phase.WAITING:
                self.finish(EXIT_INTERRUPTED)

    async def _interrupt(self, keep: bool) -> None:
        if self.phase is Phase.WAITING:
            if not keep:
                self.finish(EXIT_INTERRUPTED)
            return
        # keep=false wins for the turn: a cancel must not be undone by a later interrupt --keep
        self.keep_after_interrupt = keep and (self.keep_after_interrupt or not self.interrupt_sent)
        if not keep:
            self.pending.clear()
        if self.interrupt_sent:
            return
        self.interrupt_sent = True
        self.deadline = asyncio.get_running_loop().time() + INTERRUPT_ACK_SECONDS + INTERRUPTED_TURN_SECONDS
        try:
            await asyncio.wait_for(self.client.interrupt(), INTERRUPT_ACK_SECONDS)
        except Exception as exc:  # the turn's result, or the CLI's end, still decides what happens next
            self.out.note(f"the CLI did not acknowledge the interrupt: {one_line(str(exc) or type(exc).__name__)}")

    # -- SDK messages

    async def _on_message(self, message: Any) -> None:
        from claude_agent_sdk import AssistantMessage, ResultMessage, SystemMessage

        self.out.record(transcript_entry(message))
        if isinstance(message, SystemMessage) and message.subtype == "init":
            session_id = message.data.get("session_id")
            if isinstance(session_id, str) and session_id != self.session_id:
                self.session_id = session_id
                self.out.event(SessionEvent(session_id=session_id))
        elif isinstance(message, AssistantMessage):
            if message.parent_tool_use_id is None:
                self.error_kind = getattr(message, "error", None)  # SDK 0.1 has no ``error``
            activity = describe_activity(message)
            if activity and activity != self.activity:
                self.activity = activity
                self.out.event(ActivityEvent(text=activity))
        elif isinstance(message, ResultMessage):
            await self._on_result(message)

    async def _on_result(self, result: Any) -> None:
        self.session_id = result.session_id or self.session_id
        self.totals.add(result)
        cost = round(self.totals.cost_usd, 6)
        self.out.event(CostEvent(usd=cost))
        self.out.event(
            ResultEvent(
                cost_usd=cost, input_tokens=self.totals.input_tokens, output_tokens=self.totals.output_tokens,
                num_turns=self.totals.num_turns, session_id=self.session_id, is_error=bool(result.is_error),
                subtype=result.subtype,
            )
        )  # fmt: skip
        interrupted, self.interrupt_sent, self.deadline = self.interrupt_sent, False, None
        error_kind, self.error_kind = self.error_kind, None
        keep = interrupted and self.keep_after_interrupt
        if self._over_budget(result):
            self.fail(
                f"per-run budget of {usd(self.per_run_usd or 0)} exceeded ({usd(self.totals.cost_usd)} spent)",
                code=EXIT_BUDGET, budget=True,
            )  # fmt: skip
        elif interrupted and not keep:
            self.finish(EXIT_INTERRUPTED)
        elif not interrupted and result.is_error:
            fields = {k: getattr(result, k, None) for k in ("subtype", "errors", "result", "api_error_status")}
            self.fail(describe_error_result(fields, error_kind, self.options))
        elif self.pending:  # ``end`` empties the queue, so a tell here is still wanted
            await self._send_turn(self.pending.popleft())
        elif keep and not (self.end_requested or self.stdin_closed):
            self.phase = Phase.WAITING
        else:
            self.finish(EXIT_INTERRUPTED if keep else EXIT_OK)

    def _over_budget(self, result: Any) -> bool:
        if self.per_run_usd is None:
            return False
        if self.totals.cost_usd > self.per_run_usd:
            return True
        cap = self.options.max_budget_usd
        per_run_binds = cap is None or cap >= self.per_run_usd
        return result.subtype == "error_max_budget_usd" and per_run_binds

    async def _send_turn(self, text: str) -> None:
        self.out.record({"type": "prompt", "text": text})
        self.phase = Phase.TURN
        try:
            await self.client.query(text)
        except Exception as exc:
            await self._settle_stderr()
            self.fail(describe_exception(exc, self.out.stderr_tail, self.options))

    # -- ending

    def finish(self, code: int) -> None:
        if self.phase is not Phase.DONE:
            self.code = code
            self.phase = Phase.DONE
            self.out.event(DoneEvent(code=code))  # so a tell from now on is refused, not silently dropped

    def fail(self, reason: str, code: int = EXIT_FAILED, budget: bool = False) -> None:
        if self.phase is Phase.DONE:
            return
        failure = FailureEvent(reason=one_line(reason, 600), budget=budget)
        self.out.event(failure)
        self.out.note(failure.reason)
        self.finish(code)

    async def _settle_stderr(self, limit: float = 1.0) -> None:
        """Give the SDK's stderr reader a moment to pass on the CLI's last lines before they explain a failure."""
        loop = asyncio.get_running_loop()
        end = loop.time() + limit
        seen = -1
        while seen != self.out.stderr_lines and loop.time() < end:
            seen = self.out.stderr_lines
            await asyncio.sleep(0.05)
