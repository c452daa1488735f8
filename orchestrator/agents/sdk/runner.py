"""The ``sdk`` backend's runner: one Claude session through claude-agent-sdk, in a process of its own.

The orchestrator starts ``python -m orchestrator.agents.sdk.runner`` in a new session,
so the kill ladder reaches the Claude Code CLI that the SDK starts below it, and
talks to it over pipes, one JSON object per line. Keeping the SDK out of the
orchestrator's own loop means a hung or crashing SDK can only take one run down.

stdin, first line, the spec::

    {"prompt": str, "transcript": path, "resume": session id or null, "per_run_usd": float or null,
     "options": {"model", "system_prompt", "permission_mode", "allowed_tools", "disallowed_tools",
                 "max_turns", "max_budget_usd", "setting_sources", "cli_path", "add_dirs", "cwd", "env"}}

``system_prompt`` is a plain string (used as is) or ``{"preset": "claude_code", "append": ...}``;
absent means the ``claude_code`` preset. The CLI is also given ``--max-budget-usd`` of the
smaller of ``max_budget_usd`` and ``per_run_usd``, so it can stop a turn that overspends.

stdin, later lines, control messages::

    {"op": "interrupt", "keep": false}  interrupt the current turn; keep=false ends the session (exit 3),
                                         keep=true keeps it open until a ``tell`` (or ``end`` / EOF: exit 3)
    {"op": "tell", "text": "..."}       a follow-up user message in the same session; queued while a turn
                                         is under way and sent when it ends, so each tell is its own turn
    {"op": "end"}                        finish when the current turn ends; queued tells are dropped
    end of file                          no more control messages

Without a queued tell, the runner finishes when a turn ends, except after an
interrupt with ``keep``, where it waits for a ``tell``.

stdout, events::

    {"event": "session", "session_id": str}       the CLI started (or resumed) this session
    {"event": "activity", "text": "Bash: ls"}     the last tool use, or the first line of the last text
    {"event": "cost", "usd": float}                the running total, at every result
    {"event": "result", "cost_usd", "input_tokens", "output_tokens", "num_turns",
                        "session_id", "is_error", "subtype"}     totals so far, after every result
    {"event": "failure", "reason": "one line"}     a clear failure; ``"budget": true`` for the per-run budget
    {"event": "done", "code": int}                 the session takes no more turns: it is closing (which can take
                                                   seconds while the CLI saves it) and will exit with ``code``

Exit status: 0 the last turn succeeded, 1 failure, 3 interrupted, 4 per-run budget
exceeded, 143 ended by SIGTERM or SIGINT (the CLI is sent SIGTERM first).

Totals follow what Claude Code 2.1 documents for streaming-input sessions:
``total_cost_usd`` and ``modelUsage`` on a result are running totals (the latest
is taken, never summed); ``num_turns`` counts one prompt's model turns (summed).
Tokens come from ``modelUsage`` (every model call, subagents included); input
tokens count cache reads and writes too. A resumed session continues from the
total its transcript saved, so after ``resume`` the cost includes earlier attempts.

Every SDK message goes to the transcript as a JSON line (``type`` is ``user``,
``assistant``, ``system``, ``result``, ...), as do the prompts and controls the
runner sent (``type`` ``prompt`` and ``control``). The CLI's stderr is copied to
ours line by line (the orchestrator sends ours to the run's log); its last lines
explain a crash, because the SDK's ``ProcessError`` only holds a placeholder.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
import logging
import os
import re
import signal
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 3
EXIT_BUDGET = 4
EXIT_SIGNALLED = 128 + signal.SIGTERM

RUNNER_PATH_ENV = "ORCHESTRATOR_RUNNER_PYTHONPATH"  # the agent's own PYTHONPATH (JSON, null if unset), to restore
INTERRUPT_ACK_SECONDS = 15.0  # the CLI answers an interrupt request at once; longer means it is stuck
INTERRUPTED_TURN_SECONDS = 30.0  # after the acknowledgement, how long the interrupted turn may take to end
DISCONNECT_SECONDS = 20.0  # the SDK's own close() is bounded at about 15 seconds
STDERR_TAIL_LINES = 20
SPEC_OPTIONS = frozenset(
    {"model", "system_prompt", "permission_mode", "allowed_tools", "disallowed_tools", "max_turns",
     "max_budget_usd", "setting_sources", "cli_path", "add_dirs", "cwd", "env"}
)  # fmt: skip


class SpecError(Exception):
    """The spec on stdin is not what the orchestrator should send; the message says why."""


# ---------------------------------------------------------------- output


class Output:
    """Events to stdout, notes and CLI stderr to stderr, and the transcript file: the runner's only writer."""

    def __init__(self) -> None:
        self.transcript: IO[str] | None = None
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self.stderr_lines = 0

    def open_transcript(self, path: str) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        self.transcript = open(target, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole run

    def event(self, name: str, **fields: Any) -> None:
        _write_all(1, json.dumps({"event": name, **fields}) + "\n")

    def note(self, text: str) -> None:
        """A line for the run's log, from the runner itself."""
        _write_all(2, f"sdk_runner: {text}\n")

    def cli_stderr(self, line: str) -> None:
        """The SDK's ``stderr`` callback: one line the CLI wrote."""
        self.stderr_tail.append(line)
        self.stderr_lines += 1
        _write_all(2, line + "\n")

    def record(self, entry: dict[str, Any]) -> None:
        if self.transcript is None:
            return
        try:
            self.transcript.write(json.dumps({"ts": round(time.time(), 3), **entry}, default=repr) + "\n")
            self.transcript.flush()
        except OSError as exc:
            self.note(f"cannot write the transcript any more: {exc}")
            self.transcript = None

    def close(self) -> None:
        if self.transcript is not None:
            with contextlib.suppress(OSError):
                self.transcript.close()
            self.transcript = None


def _write_all(fd: int, text: str) -> None:
    """Unbuffered, so nothing is lost at exit; a reader that went away is not an error."""
    data = text.encode("utf-8", "replace")
    try:
        while data:
            data = data[os.write(fd, data) :]
    except (BrokenPipeError, OSError):
        pass


def one_line(text: str, limit: int = 240) -> str:
    """Whitespace collapsed, cut to ``limit`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def usd(amount: float) -> str:
    return f"${amount:.2f}" if amount >= 0.01 or amount == 0 else f"${amount:.4f}"


# ---------------------------------------------------------------- the spec and the SDK's options


def read_spec(line: str) -> dict[str, Any]:
    try:
        spec = json.loads(line)
    except json.JSONDecodeError as exc:
        raise SpecError(f"the first line on stdin is not JSON: {exc}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("prompt"), str):
        raise SpecError('the first line on stdin must be a JSON object with a "prompt" string')
    options = spec.get("options") or {}
    if not isinstance(options, dict):
        raise SpecError('"options" must be a JSON object')
    unknown = sorted(set(options) - SPEC_OPTIONS)
    if unknown:
        raise SpecError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(SPEC_OPTIONS))}")
    for key in ("per_run_usd",):
        if spec.get(key) is not None and not isinstance(spec[key], (int, float)):
            raise SpecError(f'"{key}" must be a number or null')
    return spec


def system_prompt(value: Any) -> Any:
    """The role's ``system_prompt`` in the SDK's shape; absent means the ``claude_code`` preset.

    The SDK turns ``None`` into an empty system prompt, so the default must be explicit.
    """
    if value is None:
        return {"type": "preset", "preset": "claude_code"}
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        prompt: dict[str, Any] = {"type": "preset", "preset": value.get("preset") or "claude_code"}
        if value.get("append"):
            prompt["append"] = str(value["append"])
        return prompt
    raise SpecError(f"system_prompt must be a string or a mapping, not {type(value).__name__}")


def cli_budget(options: dict[str, Any], per_run_usd: float | None) -> float | None:
    """The CLI's own ``--max-budget-usd``: the tighter of the role's cap and the per-run budget."""
    caps = [float(v) for v in (options.get("max_budget_usd"), per_run_usd) if v is not None]
    return min(caps) if caps else None


def build_options(spec: dict[str, Any], output: Output) -> Any:
    """``ClaudeAgentOptions`` for the spec; the CLI's stderr goes to ``output``."""
    from claude_agent_sdk import ClaudeAgentOptions

    options = spec.get("options") or {}
    kwargs: dict[str, Any] = {
        "system_prompt": system_prompt(options.get("system_prompt")),
        "allowed_tools": [str(t) for t in options.get("allowed_tools") or []],
        "disallowed_tools": [str(t) for t in options.get("disallowed_tools") or []],
        "add_dirs": [str(d) for d in options.get("add_dirs") or []],
        "env": {str(k): str(v) for k, v in (options.get("env") or {}).items()},
        "stderr": output.cli_stderr,
    }
    for key in ("model", "permission_mode", "max_turns", "cli_path", "cwd", "setting_sources"):
        if options.get(key) is not None:
            kwargs[key] = options[key]
    budget = cli_budget(options, spec.get("per_run_usd"))
    if budget is not None:
        kwargs["max_budget_usd"] = budget
    if spec.get("resume"):
        kwargs["resume"] = str(spec["resume"])
    return ClaudeAgentOptions(**kwargs)


# ---------------------------------------------------------------- reading SDK messages

_BLOCK_TYPES = {
    "TextBlock": "text", "ThinkingBlock": "thinking", "ToolUseBlock": "tool_use",
    "ToolResultBlock": "tool_result", "ServerToolUseBlock": "server_tool_use",
    "ServerToolResultBlock": "server_tool_result",
}  # fmt: skip
_MESSAGE_TYPES = {
    "UserMessage": "user", "AssistantMessage": "assistant", "ResultMessage": "result",
    "StreamEvent": "stream_event", "RateLimitEvent": "rate_limit_event",
    "ConversationResetMessage": "conversation_reset",
}  # fmt: skip


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        if type(value).__name__ in _BLOCK_TYPES:
            out["type"] = _BLOCK_TYPES[type(value).__name__]
        for item in dataclasses.fields(value):
            out.setdefault(item.name, _jsonable(getattr(value, item.name)))
        return out
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def transcript_entry(message: Any) -> dict[str, Any]:
    """One SDK message as a transcript line; ``type`` says what it is."""
    from claude_agent_sdk import SystemMessage

    name = type(message).__name__
    kind = "system" if isinstance(message, SystemMessage) else _MESSAGE_TYPES.get(name, name)
    body = _jsonable(message)
    return {"type": kind, **(body if isinstance(body, dict) else {"value": body})}


_TOOL_KEYS = ("command", "file_path", "path", "pattern", "url", "query", "description", "prompt")


def describe_activity(message: Any) -> str | None:
    """``Tool: argument`` for the message's last tool use, else the first line of its last text."""
    from claude_agent_sdk import TextBlock, ToolUseBlock

    for block in reversed(message.content):
        if isinstance(block, ToolUseBlock):
            args = block.input if isinstance(block.input, dict) else {}
            detail = next((args[k] for k in _TOOL_KEYS if isinstance(args.get(k), str)), None)
            detail = detail or next((v for v in args.values() if isinstance(v, str)), "")
            return one_line(f"{block.name}: {detail}" if detail else block.name, 160)
        if isinstance(block, TextBlock) and block.text.strip():
            first = next(line for line in block.text.splitlines() if line.strip())
            return one_line(first, 160)
    return None


class Totals:
    """Cost, tokens and turns over every result of the session so far."""

    def __init__(self) -> None:
        self.cost_usd = 0.0
        self.input_tokens = 0
        self.output_tokens = 0
        self.num_turns = 0
        self._turn_tokens = (0, 0)  # summed per-turn ``usage``, for a CLI that sends no ``modelUsage``

    def add(self, result: Any) -> None:
        if result.total_cost_usd is not None:
            self.cost_usd = max(self.cost_usd, float(result.total_cost_usd))  # a running total; a crash may send 0
        self.num_turns += int(result.num_turns or 0)
        usage = result.usage or {}
        turn_input = _input_tokens(usage, "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        turn_output = int(usage.get("output_tokens") or 0)
        self._turn_tokens = (self._turn_tokens[0] + turn_input, self._turn_tokens[1] + turn_output)
        models = [m for m in (getattr(result, "model_usage", None) or {}).values() if isinstance(m, dict)]
        if models:
            self.input_tokens = sum(
                _input_tokens(m, "inputTokens", "cacheCreationInputTokens", "cacheReadInputTokens") for m in models
            )
            self.output_tokens = sum(int(m.get("outputTokens") or 0) for m in models)
        else:
            self.input_tokens, self.output_tokens = self._turn_tokens


def _input_tokens(usage: dict[str, Any], *keys: str) -> int:
    return sum(int(usage.get(k) or 0) for k in keys)


# ---------------------------------------------------------------- failure reasons

_AUTH_ERRORS = {"authentication_failed", "oauth_org_not_allowed", "account_on_hold", "verification_required",
                "cloud_credential_error"}  # fmt: skip
_AUTH_TEXT = re.compile(r"not logged in|/login|invalid api key|authenticat|unauthori[sz]ed|\b401\b", re.I)
_OVERLOADED_TEXT = re.compile(r"overloaded|\b529\b", re.I)
_RATE_TEXT = re.compile(r"rate.?limit|\b429\b", re.I)


def known_problem(text: str, error_kind: str | None = None, status: int | None = None) -> str | None:
    """A one-line reason for the problems people meet most, or None."""
    detail = one_line(text, 200)
    if error_kind in _AUTH_ERRORS or status == 401 or _AUTH_TEXT.search(text):
        return (f"Claude Code is not logged in ({detail}); run `claude` once and sign in with /login, "
                "or set ANTHROPIC_API_KEY")  # fmt: skip
    if error_kind == "overloaded" or status == 529 or _OVERLOADED_TEXT.search(text):
        return f"the Anthropic API is overloaded ({detail}); try again later"
    if error_kind == "rate_limit" or status == 429 or _RATE_TEXT.search(text):
        return f"rate limited by the Anthropic API ({detail})"
    if error_kind == "billing_error":
        return f"the Anthropic account has a billing problem ({detail})"
    if text.startswith("API Error") or error_kind in {"server_error", "invalid_request", "model_not_found"}:
        return f"the Anthropic API returned an error ({detail})"
    return None


def describe_error_result(fields: dict[str, Any], error_kind: str | None, options: dict[str, Any]) -> str:
    """Why a result with ``is_error`` failed, from its raw fields."""
    errors = [e for e in fields.get("errors") or [] if isinstance(e, str) and e.strip()]
    text = "; ".join(errors) or str(fields.get("result") or "").strip()
    subtype = str(fields.get("subtype") or "")
    if subtype == "error_max_turns":
        return f"stopped after the role's max_turns ({options.get('max_turns')}) turns"
    if subtype == "error_max_budget_usd":
        return f"stopped at the role's max_budget_usd ({usd(float(options.get('max_budget_usd') or 0))})"
    status = fields.get("api_error_status")
    known = known_problem(text, error_kind, status if isinstance(status, int) else None)
    if known:
        return known
    return f"Claude Code reported an error ({subtype or 'no subtype'}): {one_line(text or 'no details', 200)}"


def stderr_summary(lines: deque[str], count: int = 3) -> str:
    tail = [one_line(line, 160) for line in list(lines)[-count:] if line.strip()]
    return " | ".join(tail)


def describe_exception(exc: BaseException, stderr: deque[str], options: dict[str, Any]) -> str:
    """One line for an exception from the SDK, with the CLI's last stderr lines where they explain it."""
    from claude_agent_sdk import CLIConnectionError, CLIJSONDecodeError, CLINotFoundError, ProcessError

    tail = stderr_summary(stderr)
    result_data = getattr(exc, "data", None)  # ``ResultError`` (SDK 0.2): an error result, then a failed exit
    if isinstance(exc, CLINotFoundError):
        where = f" at {options['cli_path']}" if options.get("cli_path") else ""
        return (f"the Claude Code CLI was not found{where}; install it (npm install -g @anthropic-ai/claude-code) "
                "or set the role's cli_path")  # fmt: skip
    if isinstance(exc, CLIJSONDecodeError):
        return f"Claude Code wrote output that is not JSON: {one_line(exc.line, 120)!r}"
    if type(exc).__name__ == "MessageParseError":
        return f"Claude Code sent a message the SDK cannot read: {one_line(str(exc), 160)}"
    if isinstance(exc, ProcessError) and isinstance(result_data, dict) and result_data.get("type") == "result":
        return describe_error_result(result_data, None, options)
    if isinstance(exc, ProcessError):
        known = known_problem(tail) if tail else None
        if known:
            return known
        status = f"status {exc.exit_code}" if exc.exit_code is not None else "an error"
        return f"Claude Code exited with {status}: " + (tail or "it wrote nothing to stderr")
    if isinstance(exc, CLIConnectionError):
        return f"cannot talk to Claude Code: {one_line(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}"
    message = str(exc).splitlines()[0] if str(exc) else ""
    if "Control request timeout: initialize" in message:
        return "Claude Code did not answer the SDK's start-up handshake" + (f": {tail}" if tail else "")
    return one_line(f"{type(exc).__name__}: {message}" + (f" ({tail})" if tail else ""))


# ---------------------------------------------------------------- the session loop


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


class Session:
    """The one loop that owns the session: it alone talks to the SDK client and decides the exit status."""

    def __init__(self, spec: dict[str, Any], options: Any, events: asyncio.Queue[Event], output: Output) -> None:
        self.spec = spec
        self.sdk_options = options
        self.options: dict[str, Any] = spec.get("options") or {}
        self.per_run_usd: float | None = spec.get("per_run_usd")
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
            await self._send_turn(self.spec["prompt"])
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
            message = json.loads(line)
            op = message["op"]
        except (json.JSONDecodeError, KeyError, TypeError):
            self.out.note(f"ignored a control line that is not {{\"op\": ...}}: {one_line(line, 80)!r}")
            return
        self.out.record({"type": "control", **message})
        if op == "interrupt":
            await self._interrupt(bool(message.get("keep", False)))
        elif op == "tell":
            text = message.get("text")
            if not isinstance(text, str) or not text.strip():
                self.out.note("ignored a tell without text")
            elif self.end_requested:
                self.out.note("ignored a tell after end")
            elif self.phase is Phase.WAITING:
                await self._send_turn(text)
            else:
                self.pending.append(text)
        elif op == "end":
            self.end_requested = True
            if self.pending:
                self.out.note(f"end: dropping {len(self.pending)} queued tell(s)")
                self.pending.clear()
            if self.phase is Phase.WAITING:
                self.finish(EXIT_INTERRUPTED)
        else:
            self.out.note(f"ignored an unknown control op {op!r}")

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
                self.out.event("session", session_id=session_id)
        elif isinstance(message, AssistantMessage):
            if message.parent_tool_use_id is None:
                self.error_kind = getattr(message, "error", None)  # SDK 0.1 has no ``error``
            activity = describe_activity(message)
            if activity and activity != self.activity:
                self.activity = activity
                self.out.event("activity", text=activity)
        elif isinstance(message, ResultMessage):
            await self._on_result(message)

    async def _on_result(self, result: Any) -> None:
        self.session_id = result.session_id or self.session_id
        self.totals.add(result)
        self.out.event("cost", usd=round(self.totals.cost_usd, 6))
        self.out.event(
            "result", cost_usd=round(self.totals.cost_usd, 6), input_tokens=self.totals.input_tokens,
            output_tokens=self.totals.output_tokens, num_turns=self.totals.num_turns,
            session_id=self.session_id, is_error=bool(result.is_error), subtype=result.subtype,
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
        cap = self.options.get("max_budget_usd")
        per_run_binds = cap is None or float(cap) >= self.per_run_usd
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
            self.out.event("done", code=code)  # so a tell from now on is refused, not silently dropped

    def fail(self, reason: str, code: int = EXIT_FAILED, budget: bool = False) -> None:
        if self.phase is Phase.DONE:
            return
        fields: dict[str, Any] = {"reason": one_line(reason, 600)}
        if budget:
            fields["budget"] = True
        self.out.event("failure", **fields)
        self.out.note(fields["reason"])
        self.finish(code)

    async def _settle_stderr(self, limit: float = 1.0) -> None:
        """Give the SDK's stderr reader a moment to pass on the CLI's last lines before they explain a failure."""
        loop = asyncio.get_running_loop()
        end = loop.time() + limit
        seen = -1
        while seen != self.out.stderr_lines and loop.time() < end:
            seen = self.out.stderr_lines
            await asyncio.sleep(0.05)


# ---------------------------------------------------------------- process entry


def _restore_pythonpath() -> None:
    """Put back the agent's own PYTHONPATH, which sdk_backend extended to find this package.

    The interpreter has read it already; the CLI and its tools must see the original.
    """
    raw = os.environ.pop(RUNNER_PATH_ENV, None)
    if raw is None:
        return
    try:
        original = json.loads(raw)
    except json.JSONDecodeError:
        return
    if isinstance(original, str):
        os.environ["PYTHONPATH"] = original
    else:
        os.environ.pop("PYTHONPATH", None)


def _terminate_children() -> None:
    """SIGTERM to our direct children (the CLI); the orchestrator's ladder handles the rest of the group."""
    try:
        import psutil

        children = psutil.Process().children()
    except Exception:
        return
    for child in children:
        with contextlib.suppress(Exception):
            child.terminate()


async def serve(output: Output) -> int:
    """Read the spec, run the session, and return the exit status; SIGTERM or SIGINT ends it at once."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)  # only records; the code below acts
    work = asyncio.ensure_future(run_session(output))
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({work, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if work.done():
        stopper.cancel()
        return work.result()
    output.note("stopped by a signal")
    _terminate_children()
    output.close()
    os._exit(EXIT_SIGNALLED)  # at once: a clean SDK shutdown can take many seconds


async def run_session(output: Output) -> int:
    """The spec from stdin's first line, then the session it describes."""
    events: asyncio.Queue[Event] = asyncio.Queue()
    start_stdin_reader(asyncio.get_running_loop(), events)
    first = await events.get()
    if not isinstance(first, StdinLine):
        output.event("failure", reason="no spec on stdin: the runner expects one JSON line first")
        return EXIT_FAILED
    try:
        spec = read_spec(first.text)
        try:
            import claude_agent_sdk  # noqa: F401
        except ImportError as exc:
            raise SpecError(f"claude-agent-sdk is not importable by {sys.executable}: {exc}") from None
        options = build_options(spec, output)  # a bad option fails here, before the CLI starts
        if spec.get("transcript"):
            output.open_transcript(str(spec["transcript"]))
    except (SpecError, TypeError, ValueError, OSError) as exc:
        output.event("failure", reason=one_line(f"bad spec: {exc}", 600))
        return EXIT_FAILED

    return await Session(spec, options, events, output).run()


def main() -> None:
    """``python -m orchestrator.agents.sdk.runner``: exit with the session's status, never with a traceback."""
    _restore_pythonpath()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="claude_agent_sdk: %(message)s")
    output = Output()
    try:
        code = asyncio.run(serve(output))
    except Exception as exc:  # a bug here must still end with one line the orchestrator can show
        output.event("failure", reason=one_line(f"the sdk runner failed: {type(exc).__name__}: {exc}"))
        import traceback

        traceback.print_exc()
        code = EXIT_FAILED
    finally:
        output.close()
    sys.exit(code)


if __name__ == "__main__":
    main()
