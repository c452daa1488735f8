"""The control channel's wire format: one pydantic model per request, told apart by ``op``, and one answer.

A request is one JSON object on one line. ``parse_request`` turns a line into a
validated model or raises ``UsageError`` with a one-line reason that names the
field at fault, so the server never dispatches on a raw dict::

    {"op": "status"}
    {"op": "stop", "force": false, "who": "..."}
    {"op": "cancel", "memo": "B-031", "role": null, "reason": "", "all": false, "who": "..."}
    {"op": "interrupt", "memo": "B-031", "keep": false, "reason": "interrupted", "who": "..."}
    {"op": "tell", "memo": "B-031", "text": "...", "who": "..."}
    {"op": "wake", "role": "rin", "task": null, "who": "..."}
    {"op": "schedule_changed"}
    {"op": "authorize", "command": "release", "role": null}

A feature may serve requests of its own: each is a ``FeatureRequest`` subclass with a literal ``op`` of its own,
registered with the supervisor (``Extension.requests``), which hands the server their models (``more``): they are
parsed and validated here like the others and reach the loop as one ``FeatureRequested`` event.

Validation is strict (``"force": "yes"`` is not a boolean) and unknown fields
are refused. No request field holds a list or an object, so nesting deeper than
``MAX_DEPTH`` is refused by a byte scan before ``json.loads`` could recurse on it.

Only the server imports this module: pydantic costs a CLI call about 150 ms.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from orchestrator.control.authority import COMMANDS
from orchestrator.core import events
from orchestrator.core.errors import UsageError

MAX_DEPTH = 32  # a valid request has depth 1; this only has to stop json.loads from recursing without bound


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class StatusRequest(_Request):
    """The live state, as ``status --json`` prints it."""

    op: Literal["status"] = "status"


class StopRequest(_Request):
    """Begin ending: graceful (running agents finish) or forced (kill them, return their memos)."""

    op: Literal["stop"] = "stop"
    force: bool = False
    who: str = "unknown"


class CancelRequest(_Request):
    """Cancel one memo (``memo``), every match (``all``) or all of a role's work (``role``)."""

    op: Literal["cancel"] = "cancel"
    memo: str | None = None
    role: str | None = None
    reason: str = ""
    all: bool = False
    who: str = "unknown"


class InterruptRequest(_Request):
    """End an SDK agent's current turn; ``keep`` keeps its session open for ``tell``."""

    op: Literal["interrupt"] = "interrupt"
    memo: str
    keep: bool = False
    reason: str = "interrupted"
    who: str = "unknown"


class TellRequest(_Request):
    """A follow-up message into an SDK agent's session."""

    op: Literal["tell"] = "tell"
    memo: str
    text: str
    who: str = "unknown"


class WakeRequest(_Request):
    """Write a wake of ``role`` now; ``task`` forces that one task."""

    op: Literal["wake"] = "wake"
    role: str
    task: str | None = None
    who: str = "unknown"


class ScheduleChangedRequest(_Request):
    """The ledger changed: the schedule looks again at what is due."""

    op: Literal["schedule_changed"] = "schedule_changed"


class FeatureRequest(_Request):
    """The base of a request a feature registers: a subclass sets ``op`` to a ``Literal`` of its own name and adds
    its fields (no lists or objects: see ``MAX_DEPTH``)."""

    op: str
    who: str = "unknown"


def op_of(model: type[FeatureRequest]) -> str:
    """The one name a feature request's ``op`` is, from its ``Literal``; ``TypeError`` when it has none."""
    names = get_args(model.model_fields["op"].annotation)
    if (
        len(names) != 1
        or not isinstance(names[0], str)
        or get_origin(model.model_fields["op"].annotation) is not Literal
    ):
        raise TypeError(f"{model.__name__}.op must be a Literal of one name, such as Literal['park']")
    return names[0]


def _known_command(command: str) -> str:
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r}; known: {', '.join(COMMANDS)}")
    return command


class AuthorizeRequest(_Request):
    """May the caller run ``command`` (one that acts on files itself), touching ``role``'s part (None: its own)?

    Answered by the gate, not the loop: ``{"caller": {...}}``, or a refusal."""

    op: Literal["authorize"] = "authorize"
    command: Annotated[str, AfterValidator(_known_command)]
    role: str | None = None


Request = Annotated[
    StatusRequest
    | StopRequest
    | CancelRequest
    | InterruptRequest
    | TellRequest
    | WakeRequest
    | ScheduleChangedRequest
    | AuthorizeRequest,
    Field(discriminator="op"),
]
REQUESTS: TypeAdapter[Request] = TypeAdapter(Request)
OPS: tuple[str, ...] = tuple(
    get_args(model.model_fields["op"].annotation)[0] for model in get_args(get_args(Request)[0])
)


class Answer(BaseModel):
    """``{"ok": true, "result": {...}}`` or ``{"ok": false, "code": "...", "error": "..."}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ok: bool
    result: dict[str, Any] | None = None
    code: str | None = None
    error: str | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> Answer:
        if self.ok and (self.result is None or self.code is not None or self.error is not None):
            raise ValueError("an ok answer has a result and no code or error")
        if not self.ok and (self.result is not None or not self.code or not self.error):
            raise ValueError("a refusal has a code and an error and no result")
        return self

    @classmethod
    def success(cls, result: dict[str, Any]) -> Answer:
        """The answer to a request that was carried out."""
        return cls(ok=True, result=result)

    @classmethod
    def failure(cls, code: str, error: str) -> Answer:
        """A refusal; ``code`` names the error class the client raises (see ``errors.CONTROL_ERRORS``)."""
        return cls(ok=False, code=code, error=error)

    def to_line(self) -> bytes:
        """One line of JSON; values JSON cannot hold (paths, times) are sent as text."""
        wire: dict[str, Any] = (
            {"ok": True, "result": self.result} if self.ok else {"ok": False, "code": self.code, "error": self.error}
        )
        return (json.dumps(wire, ensure_ascii=False, default=str) + "\n").encode()


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")


def too_deep(line: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether ``line`` nests lists and objects deeper than ``limit`` (or leaves them unclosed), brackets inside
    strings not counted.

    Every real request takes the first test (a count of brackets). For the rest, each pass deletes the innermost
    pairs, so brackets that still remain after ``limit`` passes are nested deeper or unbalanced; all of it runs
    in C, and stops as soon as a pass deletes nothing.
    """
    if line.count(b"[") + line.count(b"{") <= limit:
        return False
    brackets = _STRING.sub(b"", line).translate(_SQUARE, _NOT_BRACKETS)
    for _ in range(limit):
        shorter = brackets.replace(b"[]", b"")
        if not shorter:
            return False
        if len(shorter) == len(brackets):
            return True
        brackets = shorter
    return True


def parse_request(line: bytes, more: Mapping[str, type[FeatureRequest]] | None = None) -> Request | FeatureRequest:
    """The validated request on ``line`` (``more``: the features' requests, by ``op``); ``UsageError`` naming what is
    wrong (and the field) otherwise."""
    if too_deep(line):
        raise UsageError(f"malformed request: lists or objects nested deeper than {MAX_DEPTH} levels, or not closed")
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise UsageError("malformed request: expected one JSON object per line") from None
    if not isinstance(data, dict):
        raise UsageError('malformed request: expected a JSON object such as {"op": "status"}')
    refuse_lone_surrogates(data)
    if "op" not in data:
        raise UsageError('malformed request: field "op": Field required')
    more = more or {}
    if not isinstance(data["op"], str) or (data["op"] not in OPS and data["op"] not in more):
        raise UsageError(f"unknown request {data['op']!r}; known: {', '.join([*OPS, *more])}")
    try:
        if data["op"] in more:
            return more[data["op"]].model_validate(data)
        return REQUESTS.validate_python(data)
    except ValidationError as exc:
        raise UsageError(f"malformed request: {describe(exc)}") from None


def refuse_lone_surrogates(data: dict[str, Any]) -> None:
    """``UsageError`` when a text of ``data`` holds a lone surrogate (JSON's ``"\\ud800"``): it is no Unicode, and
    no record (SQLite, a memo's YAML, a log line) can hold it."""
    if "\\ud" not in json.dumps(data):  # ``ensure_ascii``: every surrogate is written as one
        return
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError("malformed request: a text in it is not Unicode (a lone surrogate)") from None


def describe(exc: ValidationError) -> str:
    """Each problem as ``field "name": message``, without the union's tag that pydantic puts first."""
    parts = []
    for error in exc.errors(include_url=False):
        loc = [str(p) for p in error["loc"]]
        if loc and loc[0] in OPS:
            loc = loc[1:]
        parts.append(f'field "{".".join(loc)}": {error["msg"]}' if loc else error["msg"])
    return "; ".join(parts)


def to_event(request: Request | FeatureRequest, reply: asyncio.Future[Any]) -> events.Request:
    """The loop's typed event for a validated request; the loop answers through ``reply``."""
    if isinstance(request, FeatureRequest):
        return events.FeatureRequested(request, reply)
    if isinstance(request, AuthorizeRequest):
        raise TypeError("an authorize request is answered by the gate, never posted to the loop")
    if isinstance(request, StatusRequest):
        return events.StatusRequested(reply)
    if isinstance(request, StopRequest):
        return events.StopRequested(request.force, request.who, reply)
    if isinstance(request, CancelRequest):
        return events.CancelRequested(
            request.memo or None, request.role or None, request.all, request.who, request.reason, reply
        )
    if isinstance(request, InterruptRequest):
        return events.InterruptRequested(request.memo, request.keep, request.who, request.reason, reply)
    if isinstance(request, WakeRequest):
        return events.WakeRequested(request.role, request.task or None, request.who, reply)
    if isinstance(request, ScheduleChangedRequest):
        return events.ScheduleChanged(reply)
    return events.TellRequested(request.memo, request.text, request.who, reply)
