"""The wire protocol between the orchestrator (``backend``) and the sdk runner process, as pydantic models.

Both sides import this module and nothing else of the other: the orchestrator
never loads the session or the SDK. One JSON object per line.

stdin, the spec (``RunnerSpec``), then end of file::

    {"prompt": str, "transcript": path, "resume": session id or null, "per_run_usd": float or null,
     "price_per_mtok": [input, output] or null,
     "options": {"model", "system_prompt", "permission_mode", "allowed_tools", "disallowed_tools",
                 "max_turns", "max_budget_usd", "setting_sources", "cli_path", "add_dirs", "cwd", "env"},
     "listen_fd": int, "socket_path": path, "events_path": path, "result_path": path}

The options are a role's ``SdkSettings`` (``config/sdk.py``) plus ``cwd`` and ``env``.
``system_prompt`` is a plain string (used as is) or ``{"preset": "claude_code", "append": ...}``;
absent means the ``claude_code`` preset. The CLI is also given ``--max-budget-usd`` of the
smaller of ``max_budget_usd`` and ``per_run_usd``, so it can stop a turn that overspends.
In the spec, ``null`` means the same as an absent key.

The rest travels over the listening Unix socket the runner inherited as
``listen_fd`` (at ``socket_path``, owner only), whoever started it: the
orchestrator with or without a keeper, or the wrapper on a Ray worker. The
runner may outlive the orchestrator that started it; every connection gets the
latest event of each kind so far, in order, then every new event, and a
connection that closes means nothing (an orchestrator may reconnect). Every
event is also appended to ``events_path``, and at exit ``result_path`` is
written atomically with a ``RunnerResult`` (the exit status and the latest
events), so an orchestrator that was down meanwhile reads what it missed from
disk.

a connection, lines to the runner, control messages (``Control``, by ``op``)::

    {"op": "interrupt", "keep": false}  interrupt the current turn; keep=false ends the session (exit 3),
                                         keep=true keeps it open until a ``tell`` (or ``end``: exit 3)
    {"op": "tell", "text": "..."}       a follow-up user message in the same session: written to the CLI
                                         while a tool runs (Claude Code takes it into the turn's next model
                                         call and answers it within the turn), else sent as a turn of its
                                         own when the current one ends (as after an interrupt with keep)
    {"op": "end"}                        finish when the current turn ends; queued tells are dropped

Without a queued tell, the runner finishes when a turn ends, except after an
interrupt with ``keep``, where it waits for a ``tell``.

a connection, lines from the runner, events (``RunnerEvent``, by ``event``)::

    {"event": "session", "session_id": str}       the CLI started (or resumed) this session
    {"event": "activity", "text": "Bash: ls"}     the last tool use, or the first line of the last text
    {"event": "cost", "usd": float}                the running total, at every result; with a per-run budget
                                                   also the fuse's estimate while a turn streams
    {"event": "result", "cost_usd", "input_tokens", "output_tokens", "num_turns",
                        "session_id", "is_error", "subtype"}     totals so far, after every result
    {"event": "tells", "pending": int}             tells written that the model has not answered yet
    {"event": "failure", "reason": "one line"}     a clear failure; ``"budget": true`` for the per-run budget,
                                                   ``"permanent": true`` when no retry can help (not logged in, ...)
    {"event": "done", "code": int}                 the session takes no more turns: it is closing (which can take
                                                   seconds while the CLI saves it) and will exit with ``code``

Exit status: 0 the last turn succeeded, 1 failure, 3 interrupted, 4 per-run budget
exceeded, 143 ended by SIGTERM or SIGINT (the CLI is sent SIGTERM first).

A line that does not fit its model raises ``ProtocolError``, whose text names
the field: the runner refuses a bad spec with a line in its log and exit status 1
(before the spec it has no channel), and notes a bad control line in the log; the
orchestrator skips a bad event line.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator

from orchestrator.config.sdk import SdkSettings
from orchestrator.core.units import Strict

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 3
EXIT_BUDGET = 4
EXIT_SIGNALLED = 128 + signal.SIGTERM

RUNNER_PATH_ENV = "ORCHESTRATOR_RUNNER_PYTHONPATH"  # the agent's own PYTHONPATH (JSON, null if unset), to restore
T = TypeVar("T")


class ProtocolError(ValueError):
    """A line that is not a valid message; the text says which field is wrong and why."""


class _Message(Strict):
    """One JSON object on a line: unknown keys are errors, and a message never changes once made."""

    def wire(self) -> dict[str, Any]:
        """The JSON object as it goes on the wire."""
        return self.model_dump(mode="json")

    def line(self) -> str:
        """The message as one line of JSON, newline included."""
        return json.dumps(self.wire()) + "\n"


class _SpecPart(_Message):
    """Part of the spec, where ``null`` means the key is absent, so its default applies."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


# ---------------------------------------------------------------- the spec


class SpecOptions(_SpecPart, SdkSettings):
    """The role's SDK options (``SdkSettings``) with its paths resolved, and where and with what environment the
    session runs."""

    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of(
        cls, settings: SdkSettings, *, cli_path: str | None, add_dirs: list[str], cwd: str, env: dict[str, str]
    ) -> SpecOptions:
        """A role's options for its session: every SDK key as the role sets it, but the paths, which only the
        orchestrator can resolve (a bare ``cli_path`` on its PATH, ``add_dirs`` from the project root)."""
        given = {key: getattr(settings, key) for key in SdkSettings.model_fields}
        return cls.model_validate({**given, "cli_path": cli_path, "add_dirs": add_dirs, "cwd": cwd, "env": env})


SPEC_OPTIONS = frozenset(SpecOptions.model_fields)


class RunnerSpec(_SpecPart):
    """The runner's stdin: what to ask, where to write the transcript, the session's limits, and its channel.

    The channel's keys are filled in by whoever starts the runner (the head of a Ray run leaves them to the
    worker); the runner refuses a spec without them."""

    prompt: str
    transcript: str | None = None
    resume: str | None = None
    per_run_usd: float | None = None
    price_per_mtok: tuple[float, float] | None = None
    on_denied: Literal["fail", "warn"] = "fail"  # a result listing tool calls the permissions refused
    options: SpecOptions = Field(default_factory=SpecOptions)
    listen_fd: int | None = None  # the inherited listening socket
    socket_path: str | None = None  # where it is bound (removed at exit)
    events_path: str | None = None  # the event log, appended to
    result_path: str | None = None  # the ``RunnerResult``, written at exit


def parse_spec(line: str) -> RunnerSpec:
    """The spec on one line; raises ``ProtocolError`` naming what is wrong."""
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"the spec on stdin is not JSON: {exc}") from None
    try:
        return RunnerSpec.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        unknown = [str(e["loc"][1]) for e in errors if e["type"] == "extra_forbidden" and e["loc"][:1] == ("options",)]
        if unknown:
            known = ", ".join(sorted(SPEC_OPTIONS))
            raise ProtocolError(f"unknown option(s) {', '.join(sorted(unknown))}; known: {known}") from None
        raise ProtocolError(explain(exc, "the spec")) from None


# ---------------------------------------------------------------- control messages, orchestrator -> runner


class Interrupt(_Message):
    """Stop the current turn; ``keep`` keeps the session open for a ``tell``."""

    op: Literal["interrupt"] = "interrupt"
    keep: bool = False


class Tell(_Message):
    """A follow-up user message, its own turn in the same session."""

    op: Literal["tell"] = "tell"
    text: str

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("a tell needs text")
        return text


class End(_Message):
    """Finish when the current turn ends, dropping queued tells."""

    op: Literal["end"] = "end"


AnyControl = Interrupt | Tell | End
Control = Annotated[AnyControl, Field(discriminator="op")]
_CONTROL: TypeAdapter[AnyControl] = TypeAdapter(Control)


def parse_control(line: str | bytes) -> AnyControl:
    """One control line; raises ``ProtocolError`` naming the bad field."""
    return _parse(_CONTROL, line, "the control line", tagged=True)


# ---------------------------------------------------------------- events, runner -> orchestrator


class SessionEvent(_Message):
    """The CLI started (or resumed) this session."""

    event: Literal["session"] = "session"
    session_id: str


class ActivityEvent(_Message):
    """The last tool use, or the first line of the last text."""

    event: Literal["activity"] = "activity"
    text: str


class CostEvent(_Message):
    """The session's running cost, at every result."""

    event: Literal["cost"] = "cost"
    usd: float


class ResultEvent(_Message):
    """The totals so far, after every result."""

    event: Literal["result"] = "result"
    cost_usd: float
    input_tokens: int
    output_tokens: int
    num_turns: int
    session_id: str | None
    is_error: bool
    subtype: str | None

    def figures(self) -> dict[str, Any]:
        """The totals without the ``event`` tag: what ``SdkFollow.result`` holds."""
        return self.model_dump(mode="json", exclude={"event"})


class TellsEvent(_Message):
    """How many tells the model has not answered yet."""

    event: Literal["tells"] = "tells"
    pending: int


class FailureEvent(_Message):
    """A clear failure in one line; ``budget`` when the per-run budget was exceeded, ``permanent`` when no retry
    can help."""

    event: Literal["failure"] = "failure"
    reason: str
    budget: bool = False
    permanent: bool = False
    limit_kind: str | None = None  # the account's usage or rate limit caused it: five_hour, weekly, rate_limit
    resets_at: float | None = None  # when that limit resets (epoch seconds), when the CLI said

    def wire(self) -> dict[str, Any]:
        """``budget``, ``permanent`` and the limit are on the wire only when set."""
        return {"event": self.event, **self.model_dump(mode="json", exclude_defaults=True)}


class WarningEvent(_Message):
    """A line for a person about a session that goes on (tool calls refused under ``on_denied: warn``)."""

    event: Literal["warning"] = "warning"
    text: str


class DoneEvent(_Message):
    """The session takes no more turns; the runner will exit with ``code`` once the CLI has closed."""

    event: Literal["done"] = "done"
    code: int


AnyEvent = SessionEvent | ActivityEvent | CostEvent | ResultEvent | TellsEvent | FailureEvent | WarningEvent | DoneEvent
RunnerEvent = Annotated[AnyEvent, Field(discriminator="event")]
_EVENT: TypeAdapter[AnyEvent] = TypeAdapter(RunnerEvent)


class RunnerResult(_Message):
    """What the runner leaves at ``result_path`` when it exits: its status and the latest event of each kind."""

    code: int
    events: list[RunnerEvent] = Field(default_factory=list)


_RESULT = TypeAdapter(RunnerResult)


def parse_result(text: str | bytes) -> RunnerResult:
    """A result file's text; raises ``ProtocolError`` naming the bad field."""
    return _parse(_RESULT, text, "the result")


def parse_event(line: str | bytes) -> AnyEvent:
    """One event line from the runner; raises ``ProtocolError`` naming the bad field."""
    return _parse(_EVENT, line, "the event line", tagged=True)


async def read_lines(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """A connection's lines, either way, until it closes or breaks; a line over the reader's limit is skipped."""
    while True:
        try:
            line = await reader.readline()
        except ValueError:
            continue
        except (ConnectionError, OSError):
            return
        if not line:
            return
        yield line


# ---------------------------------------------------------------- errors


def _parse(adapter: TypeAdapter[T], text: str | bytes, what: str, tagged: bool = False) -> T:
    """``text`` as the adapter's type; the one place a ``ValidationError`` becomes a ``ProtocolError``."""
    try:
        return adapter.validate_json(text)
    except ValidationError as exc:
        raise ProtocolError(explain(exc, what, tagged)) from None


def explain(error: ValidationError, what: str, tagged: bool = False) -> str:
    """One line naming each bad field and why, e.g. ``text: Field required``.

    In a ``tagged`` union pydantic puts the tag first in each location; it is
    dropped, and a missing or unknown tag is reported under the tag's own field.
    """
    parts = []
    for item in error.errors(include_url=False):
        loc = [str(part) for part in item["loc"]]
        if item["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc = [str(item.get("ctx", {}).get("discriminator", "")).strip("'")]
        elif tagged:
            loc = loc[1:]
        parts.append(f"{'.'.join(loc) or what}: {item['msg']}")
    return "; ".join(parts)
