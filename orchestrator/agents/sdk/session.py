"""The session loop: the one owner of a Claude session, fed by the SDK's messages and the orchestrator's controls.

Both sources post to one queue that only ``Session`` takes from. Where the session is lives in one ``Phase``, changed
only by ``Session._enter`` along the table ``phases.NEXT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from orchestrator.agents.claude_errors import Problem, one_line
from orchestrator.agents.claude_stream import DENIED_FIX, NO_MODEL_CALL, denied_text
from orchestrator.agents.sdk.fuse import Fuse
from orchestrator.agents.sdk.messages import describe_activity, transcript_entry
from orchestrator.agents.sdk.phases import INTERRUPTED, NEXT, ControlLine, Event, Phase, SdkEnded, SdkFailed, SdkMessage
from orchestrator.agents.sdk.protocol import (
    EXIT_BUDGET,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    ActivityEvent,
    CostEvent,
    DoneEvent,
    FailureEvent,
    Interrupt,
    ProtocolError,
    ResultEvent,
    RunnerSpec,
    SessionEvent,
    Tell,
    TellsEvent,
    WarningEvent,
    parse_control,
)
from orchestrator.agents.sdk.reasons import (
    describe_error_result,
    describe_exception,
    rejected_limit,
    result_limit,
    stderr_summary,
    usd,
)
from orchestrator.agents.sdk.totals import Totals
from orchestrator.agents.sdk.transcript import Output

INTERRUPT_ACK_SECONDS = 15.0  # the CLI answers an interrupt request at once; longer means it is stuck
INTERRUPTED_TURN_SECONDS = 30.0  # after the acknowledgement, how long the interrupted turn may take to end
DISCONNECT_SECONDS = 20.0  # the SDK's own close() is bounded at about 15 seconds
TELL_QUIET_SECONDS = 0.1  # how long the CLI must have been quiet during a tool step before a tell is written


class Session:
    """The one loop that owns the session: it alone talks to the SDK client and decides the exit status."""

    def __init__(self, spec: RunnerSpec, options: Any, events: asyncio.Queue[Event], output: Output) -> None:
        self.spec = spec
        self.sdk_options = options
        self.options = spec.options
        self.events = events
        self.out = output
        self.client: Any = None
        self.phase = Phase.STARTING
        self.code: int | None = None  # set on entering DONE
        self.pending: deque[str] = deque()  # tells held: until a tool runs (TURN) or the turn has ended (PAUSING)
        self.tool_running = False  # the turn's last model call asked for a tool: another call will follow
        self.outstanding: deque[str] = deque()  # uuids of the user messages written and not answered yet
        self.tells: set[str] = set()  # of those, the tells
        self.deadline: float | None = None  # when the interrupted turn must have ended, in PAUSING and INTERRUPTING
        self.totals = Totals()
        self.session_id: str | None = None
        self.error_kind: str | None = None  # the last assistant message's ``error``, for the result's reason
        self.limit_hit: tuple[str, float | None] | None = None  # a ``rate_limit_event`` said rejected: kind, reset
        self.activity: str | None = None
        self.fuse = Fuse(spec.price_per_mtok, spec.carried_usd)
        self.fuse_blown: float | None = None  # the estimate when the fuse interrupted the turn
        self.shown_cost = 0.0
        self._reported_tells = 0

    async def run(self) -> int:
        """Connect, send the prompt, and handle events until the exit status is decided; then disconnect."""
        from claude_agent_sdk import ClaudeSDKClient

        self.client = ClaudeSDKClient(self.sdk_options)
        try:
            await self.client.connect()
        except Exception as exc:  # noqa: BLE001 - whatever the SDK raises becomes a failure reason
            self.fail(describe_exception(exc, await self._stderr_tail(), self.options))
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

    def _enter(self, phase: Phase) -> None:
        """The one place the phase changes; a change ``NEXT`` does not list is a bug in this class."""
        if phase not in NEXT[self.phase]:
            raise RuntimeError(f"the sdk session cannot go from {self.phase.name} to {phase.name}")
        self.phase = phase
        if phase not in INTERRUPTED:
            self.deadline = None

    async def _next_event(self) -> Event:
        while self.pending and self.phase is Phase.TURN and self.tool_running:
            # a tool is running, so the CLI will make another model call: write the tells now and it carries
            # them. Only once the CLI has been quiet a moment: a turn whose tool ended at once (its result is
            # already here) would otherwise get them after its last call, as a turn of their own.
            try:
                return await asyncio.wait_for(self.events.get(), TELL_QUIET_SECONDS)
            except TimeoutError:
                while self.pending and self.phase is Phase.TURN:
                    await self._write_user(self.pending.popleft(), tell=True)
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
        except Exception as exc:  # noqa: BLE001 - whatever the SDK raises becomes a failure reason
            self.events.put_nowait(SdkFailed(exc))
        else:
            self.events.put_nowait(SdkEnded())

    async def _handle(self, event: Event) -> None:
        if self.phase is Phase.DONE:
            return
        match event:
            case SdkMessage(message):
                await self._on_message(message)
            case ControlLine(text):
                await self._on_control(text)
            case SdkFailed(error):
                self.fail(describe_exception(error, await self._stderr_tail(), self.options))
            case SdkEnded():
                tail = stderr_summary(await self._stderr_tail())
                when = "while it waited for a tell" if self.phase is Phase.WAITING else "before the turn finished"
                self.fail(f"Claude Code ended the session {when}" + (f": {tail}" if tail else ""))

    # -- control messages

    async def _on_control(self, line: str) -> None:
        try:
            control = parse_control(line)
        except ProtocolError as exc:
            self.out.note(f"ignored a control line ({one_line(str(exc), 200)}): {one_line(line, 80)!r}")
            return
        self.out.record({"type": "control", **control.wire()})
        match control:
            case Interrupt(keep=keep):
                await self._interrupt(keep)
            case Tell(text=text):
                await self._tell(text)

    async def _tell(self, text: str) -> None:
        if self.phase is Phase.WAITING:
            await self._send_turn(text, tell=True)
        elif self.phase in (Phase.TURN, Phase.PAUSING):
            # TURN: written once a tool runs (``_next_event``); PAUSING: held for the
            # turn's end, since an interrupt may drop what the CLI has queued
            self.pending.append(text)
            self._report_tells()
        else:  # INTERRUPTING
            self.out.note("ignored a tell: the session ends with the current turn")

    async def _interrupt(self, keep: bool) -> None:
        """Interrupt the turn; without ``keep``, drop the queued tells too. In PAUSING and INTERRUPTING the
        interrupt is already sent: only keep=false changes anything, since a cancel is not undone by --keep."""
        if not keep:
            self.pending.clear()
        if self.phase is Phase.TURN:
            await self._send_interrupt(keep)
        elif not keep and self.phase is Phase.WAITING:
            self.finish(EXIT_INTERRUPTED)
        elif not keep and self.phase is Phase.PAUSING:
            self._enter(Phase.INTERRUPTING)

    async def _send_interrupt(self, keep: bool) -> None:
        self._enter(Phase.PAUSING if keep and self.phase is Phase.TURN else Phase.INTERRUPTING)
        self.deadline = asyncio.get_running_loop().time() + INTERRUPT_ACK_SECONDS + INTERRUPTED_TURN_SECONDS
        try:
            await asyncio.wait_for(self.client.interrupt(), INTERRUPT_ACK_SECONDS)
        except Exception as exc:  # noqa: BLE001 - the turn's result, or the CLI's end, still decides what happens next
            self.out.note(f"the CLI did not acknowledge the interrupt: {one_line(str(exc) or type(exc).__name__)}")

    # -- SDK messages

    async def _on_message(self, message: Any) -> None:
        from claude_agent_sdk import AssistantMessage, ResultMessage, StreamEvent, SystemMessage

        if isinstance(message, StreamEvent):
            await self._on_stream(message.event)
            return  # partial messages stay out of the transcript: the whole message follows
        self.out.record(transcript_entry(message))
        if isinstance(message, SystemMessage) and message.subtype == "api_retry":
            data = message.data
            status = data.get("error_status") or data.get("error") or "an error"
            self._show(f"API retry {data.get('attempt', '?')}/{data.get('max_retries', '?')} after {status}")
        elif isinstance(message, SystemMessage) and message.subtype == "init":
            session_id = message.data.get("session_id")
            if isinstance(session_id, str) and session_id != self.session_id:
                self.session_id = session_id
                self.out.event(SessionEvent(session_id=session_id))
        elif isinstance(message, AssistantMessage):
            if message.parent_tool_use_id is None:
                self.error_kind = getattr(message, "error", None)  # SDK 0.1 has no ``error``
                self.tool_running = any(type(b).__name__ == "ToolUseBlock" for b in message.content)
            self._show(describe_activity(message))
        elif isinstance(message, ResultMessage):
            await self._on_result(message)
        elif type(message).__name__ == "RateLimitEvent":  # SDK 0.2; "allowed" and warnings change nothing
            self.limit_hit = rejected_limit(getattr(message, "rate_limit_info", None)) or self.limit_hit

    def _show(self, activity: str | None) -> None:
        if activity and activity != self.activity:
            self.activity = activity
            self.out.event(ActivityEvent(text=activity))

    async def _on_stream(self, event: dict[str, Any]) -> None:
        """A model call's stream: update the estimate, and blow the fuse when it passes the per-run cap."""
        per_run, cap = self.spec.per_run_usd, self.spec.session_cap
        if per_run is None or cap is None or not isinstance(event, dict):
            return
        self.fuse.observe(event)
        estimate = self.fuse.estimate()
        if estimate - self.shown_cost >= max(per_run / 50, 1e-6):
            self.shown_cost = estimate
            self.out.event(CostEvent(usd=round(estimate, 6)))
        if estimate > cap and self.fuse_blown is None and self.phase in (Phase.TURN, Phase.PAUSING):
            self.fuse_blown = estimate
            self.out.note(
                f"budget fuse: about {usd(self._ours(estimate))} spent, over the per-run budget of {usd(per_run)}"
            )
            self.pending.clear()
            await self._send_interrupt(keep=False)

    async def _on_result(self, result: Any) -> None:
        """Report the totals, then decide what the turn's end leads to, by phase."""
        self.session_id = result.session_id or self.session_id
        self.tool_running = False
        self.totals.add(result)
        self.fuse.result(result)
        self.shown_cost = self.totals.cost_usd
        self._answered(result)
        cost = round(self.totals.cost_usd, 6)
        self.out.event(CostEvent(usd=cost))
        self.out.event(
            ResultEvent(
                cost_usd=cost,
                input_tokens=self.totals.input_tokens,
                output_tokens=self.totals.output_tokens,
                num_turns=self.totals.num_turns,
                session_id=self.session_id,
                is_error=bool(result.is_error),
                subtype=result.subtype,
            )
        )
        error_kind, self.error_kind = self.error_kind, None
        if self.fuse_blown is not None or self._over_budget(result):
            reported = usd(self._ours(self.totals.cost_usd))
            how = f" ({reported} spent)"
            if self.fuse_blown is not None:
                blown = usd(self._ours(self.fuse_blown))
                how = f": the turn was interrupted at about {blown} spent (Claude Code reported {reported})"
            self.fail(f"per-run budget of {usd(self.spec.per_run_usd or 0)} exceeded{how}", code=EXIT_BUDGET)
        elif self.phase is Phase.INTERRUPTING:
            self.finish(EXIT_INTERRUPTED)
        elif self.phase is not Phase.PAUSING and result.is_error:  # an interrupted turn always ends in an error
            fields = {k: getattr(result, k, None) for k in ("subtype", "errors", "result", "api_error_status")}
            limit = result_limit(fields, error_kind, self.limit_hit)
            self.fail(describe_error_result(fields, error_kind, self.options), limit=limit)
        elif self.phase is not Phase.PAUSING and result.permission_denials and not self._denials_warned(result):
            text = denied_text(result.permission_denials)
            self.fail(Problem(f"{text}; {DENIED_FIX}", permanent=True))
        elif self.outstanding and self.phase is Phase.TURN:
            pass  # the CLI answers the messages it has queued in a turn of their own
        elif self.pending:  # tells held in PAUSING
            await self._send_turn(self.pending.popleft(), tell=True)
        elif self.phase is Phase.PAUSING:
            self._enter(Phase.WAITING)
        elif self.totals.cost_usd == 0 and self.totals.input_tokens == 0 and self.totals.output_tokens == 0:
            self.fail(NO_MODEL_CALL)  # exit 0 with nothing done is no success (the same rule as stream-json runs)
        else:
            self.finish(EXIT_OK)

    def _denials_warned(self, result: Any) -> bool:
        """Under ``on_denied: warn``, the turn's refused tool calls are a warning in the log, not a failure."""
        if self.spec.on_denied != "warn":
            return False
        text = denied_text(result.permission_denials)
        self.out.note(f"warning: {text}")
        self.out.event(WarningEvent(text=text))  # the run's end carries it: a warning line and a notice
        return True

    def _over_budget(self, result: Any) -> bool:
        """Spent past the per-run budget (on top of what a resumed session had spent before), or stopped by the CLI's
        --max-budget-usd where that is the per-run budget (the role's own cap is not tighter)."""
        per_run, session, cap = self.spec.per_run_usd, self.spec.session_cap, self.options.max_budget_usd
        if per_run is None or session is None:
            return False
        stopped = result.subtype == "error_max_budget_usd" and (cap is None or cap >= per_run)
        return self.totals.cost_usd > session or stopped

    def _ours(self, total: float) -> float:
        """This run's part of a running total of the session (a resumed one reports earlier runs' spend again)."""
        return max(total - self.spec.carried_usd, 0.0)

    async def _send_turn(self, text: str, tell: bool = False) -> None:
        self._enter(Phase.TURN)
        self.tool_running = False
        await self._write_user(text, tell)

    async def _write_user(self, text: str, tell: bool = False) -> None:
        """Write one user message to the CLI, with a uuid so its result can say it was answered."""
        message_id = str(uuid.uuid4())
        self.out.record({"type": "prompt", "text": text, "uuid": message_id})
        self.outstanding.append(message_id)
        if tell:
            self.tells.add(message_id)
            self._report_tells()
        message = {"type": "user", "message": {"role": "user", "content": text}, "parent_tool_use_id": None}

        async def one() -> AsyncIterator[dict[str, Any]]:
            yield {**message, "uuid": message_id}

        try:
            await self.client.query(one())  # the dict form: it carries the uuid
        except Exception as exc:  # noqa: BLE001 - whatever the SDK raises becomes a failure reason
            self.fail(describe_exception(exc, await self._stderr_tail(), self.options))

    def _answered(self, result: Any) -> None:
        """Take the messages a result answered off ``outstanding``: those it names, else the oldest one.

        An interrupted turn ends them all: the CLI drops what it had queued.
        """
        named = list(getattr(result, "user_message_uuids", None) or [])
        single = getattr(result, "user_message_uuid", None)
        if isinstance(single, str):
            named.append(single)
        if self.phase in INTERRUPTED:
            self.outstanding.clear()
        elif named:
            self.outstanding = deque(u for u in self.outstanding if u not in named)
        elif self.outstanding:
            self.outstanding.popleft()
        self._report_tells()

    def _report_tells(self) -> None:
        pending = len(self.tells.intersection(self.outstanding)) + len(self.pending)
        if pending != self._reported_tells:
            self._reported_tells = pending
            self.out.event(TellsEvent(pending=pending))

    # -- ending

    def finish(self, code: int) -> None:
        """Decide the exit status and say ``done``, once; later calls change nothing."""
        if self.phase is not Phase.DONE:
            self.code = code
            self._enter(Phase.DONE)
            self.out.event(DoneEvent(code=code))  # so a tell from now on is refused, not silently dropped

    def fail(
        self, reason: str | Problem, code: int = EXIT_FAILED, limit: tuple[str, float | None] | None = None
    ) -> None:
        """A ``failure`` event with the reason on one line, then ``finish``; nothing once the session is done.

        ``limit``: (kind, resets_at) when the account's usage or rate limit caused it (never permanent)."""
        if self.phase is Phase.DONE:
            return
        problem = reason if isinstance(reason, Problem) else Problem(reason)
        kind, resets_at = limit or (None, None)
        failure = FailureEvent(
            reason=one_line(problem.reason, 600),
            budget=code == EXIT_BUDGET,
            permanent=problem.permanent and limit is None,
            limit_kind=kind,
            resets_at=resets_at,
        )
        self.out.event(failure)
        self.out.note(failure.reason)
        self.finish(code)

    async def _stderr_tail(self, limit: float = 1.0) -> deque[str]:
        """The CLI's last stderr lines, to explain a failure, once the SDK's stderr reader has had a moment to pass
        them on."""
        loop = asyncio.get_running_loop()
        end = loop.time() + limit
        seen = -1
        while seen != self.out.stderr_lines and loop.time() < end:
            seen = self.out.stderr_lines
            await asyncio.sleep(0.05)
        return self.out.stderr_tail
