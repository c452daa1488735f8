"""The wire protocol between the orchestrator (``backend``) and the sdk runner, as pydantic models.

Both sides import this module and nothing else of the other. One JSON object per line: the spec on stdin, then end
of file; controls and events over the Unix socket the runner inherits, where every new connection first gets the
latest event of each kind. The runner appends every event to ``events_path`` and writes a ``RunnerResult`` to
``result_path`` at exit. Exit statuses are the ``EXIT_*`` constants. A line that does not fit its model raises
``ProtocolError``.
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
EXIT_SIGNALLED = 128 + signal.SIGTERM  # SIGTERM or SIGINT; the CLI is sent SIGTERM first

RUNNER_PATH_ENV = "ORCHESTRATOR_RUNNER_PYTHONPATH"  # the agent's own PYTHONPATH (JSON, null if unset), to restore
T = TypeVar("T")


class ProtocolError(ValueError):
    """A line that is not a valid message; the text says which field is wrong and why."""


class _Message(Strict):
    """One JSON object on a line: unknown keys are errors, and a message never changes once made."""

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def line(self) -> str:
        """One line of JSON, newline included."""
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
    carried_usd: float = Field(0.0, ge=0)  # earlier runs' part of the resumed session's totals (LaunchSpec's)
    price_per_mtok: tuple[float, float] | None = None
    on_denied: Literal["fail", "warn"] = "fail"  # a result listing tool calls the permissions refused
    options: SpecOptions = Field(default_factory=SpecOptions)
    listen_fd: int | None = None  # the inherited listening socket
    socket_path: str | None = None  # where it is bound (removed at exit)
    events_path: str | None = None  # the event log, appended to
    result_path: str | None = None  # the ``RunnerResult``, written at exit

    @property
    def session_cap(self) -> float | None:
        """The per-run budget as the session's running totals (the fuse's estimate, the results) reach it: on top of
        what earlier runs spent of it, which a resumed session reports again. Not the CLI's ``--max-budget-usd``:
        that counts only what its own process spends."""
        if self.per_run_usd is None or not self.carried_usd:
            return self.per_run_usd
        return round(self.per_run_usd + self.carried_usd, 9)


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
    """Stop the current turn. Without ``keep`` the session ends (exit 3); with it the session waits for a ``tell``
    (an interrupt without ``keep`` then ends it, exit 3)."""

    op: Literal["interrupt"] = "interrupt"
    keep: bool = False


class Tell(_Message):
    """A follow-up user message in the same session: written to the CLI while a tool runs, so Claude Code answers
    it within the turn, else sent as a turn of its own when the current one ends.

    With no tell queued the runner finishes when a turn ends, except after an interrupt with ``keep``."""

    op: Literal["tell"] = "tell"
    text: str

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("a tell needs text")
        return text


AnyControl = Interrupt | Tell
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
    """The session's running cost, at every result; with a per-run budget also the fuse's estimate while a turn
    streams."""

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
    can help (not logged in, key rejected, ...)."""

    event: Literal["failure"] = "failure"
    reason: str
    budget: bool = False
    permanent: bool = False
    limit_kind: str | None = (
        None  # the account's usage or rate limit caused it: five_hour, weekly, usage_limit, rate_limit
    )
    resets_at: float | None = None  # when that limit resets (epoch seconds), when the CLI said

    def wire(self) -> dict[str, Any]:
        """``budget``, ``permanent`` and the limit are on the wire only when set."""
        return {"event": self.event, **self.model_dump(mode="json", exclude_defaults=True)}


class WarningEvent(_Message):
    """A line for a person about a session that goes on (tool calls refused under ``on_denied: warn``)."""

    event: Literal["warning"] = "warning"
    text: str


class DoneEvent(_Message):
    """The session takes no more turns; the runner exits with ``code`` once the CLI has closed, which can take
    seconds while it saves the session."""

    event: Literal["done"] = "done"
    code: int


AnyEvent = SessionEvent | ActivityEvent | CostEvent | ResultEvent | TellsEvent | FailureEvent | WarningEvent | DoneEvent
RunnerEvent = Annotated[AnyEvent, Field(discriminator="event")]
_EVENT: TypeAdapter[AnyEvent] = TypeAdapter(RunnerEvent)


class RunnerResult(_Message):
    """What the runner writes atomically at ``result_path`` when it exits: its status and the latest event of each
    kind, so an orchestrator that was down reads what it missed."""

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
    """The one place a ``ValidationError`` becomes a ``ProtocolError``."""
    try:
        return adapter.validate_json(text)
    except ValidationError as exc:
        raise ProtocolError(explain(exc, what, tagged)) from None


def explain(error: ValidationError, what: str, tagged: bool = False) -> str:
    """One line naming each bad field and why, e.g. ``text: Field required``.

    In a ``tagged`` union pydantic puts the tag first in each location; it is dropped, and a missing or unknown tag
    is reported under the tag's own field.
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
