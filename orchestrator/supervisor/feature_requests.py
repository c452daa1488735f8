"""Control requests a feature serves: each registered with its model, its handler and who may send it.

A new command costs its feature a ``FeatureRequest`` model (a literal ``op`` and its fields), a handler and a
``Command`` registration from ``Extension.requests``, and the command line's parser entry that sends it (the
client needs nothing else: ``control.client.call(root, op, **fields)``). The control server parses it with the
models registered here, the gate admits it as its registration says, and the loop hands the one
``FeatureRequested`` event to ``FeatureRequests.handle``: nothing of the supervisor or of the loop's table changes.
A handler whose answer comes later (a landing waits for its turn and its git work) returns an awaitable instead: it
is awaited beside the loop, and the caller is answered with its result, or its error, when it is done.

Authority is declared with the registration (``needs``): None, every caller may send it (a read); else a person
may, and an agent only with the grant it names, at level ``any`` (``may: [NAME]``), or at the grant's ``own``
level when ``own(request, caller)`` says the request touches only its own role's part.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from orchestrator.control.authority import Caller
from orchestrator.control.protocol import OPS, FeatureRequest, op_of
from orchestrator.core.errors import ControlError
from orchestrator.core.events import FeatureRequested
from orchestrator.core.grants import DEFAULTS

R = TypeVar("R", bound=FeatureRequest)


@dataclass(frozen=True)
class Needs:
    """What an agent must hold to send a request (a person always may): ``grant`` (a name ``may:`` takes) at level
    ``any``, or at ``own`` when ``own`` says the request touches only the caller's own role's part."""

    grant: str
    own: Callable[[Any, Caller], bool] | None = None


@dataclass(frozen=True)
class Command(Generic[R]):
    """One request a feature serves. ``handle`` runs on the loop's thread, inside the event's handling, and returns
    the answer's result, or an awaitable of it for an answer that comes later (an ``OrchestratorError`` it raises,
    or its awaitable raises, is the caller's refusal); ``command``: its words in a refusal (``orchestrator
    COMMAND``), the ``op`` when not given."""

    model: type[R]
    handle: Callable[[R], dict[str, Any] | Awaitable[dict[str, Any]]]
    needs: Needs | None = None
    command: str | None = None

    @property
    def op(self) -> str:
        return op_of(self.model)

    @property
    def words(self) -> str:
        return self.command or self.op


class FeatureRequests:
    """The requests the plugged features serve, by ``op``; the server parses with ``models``."""

    def __init__(self) -> None:
        self.models: dict[str, type[FeatureRequest]] = {}
        self._by_op: dict[str, Command[Any]] = {}

    def add(self, owner: str, requests: Iterable[Command[Any]]) -> None:
        """Register ``owner``'s requests; a name taken, or a grant ``may:`` does not know, is a bug (``ValueError``)."""
        for request in requests:
            op = request.op
            if op in OPS or op in self._by_op:
                raise ValueError(f"{owner}: the request {op!r} is already served")
            if request.needs is not None and request.needs.grant not in DEFAULTS:
                raise ValueError(f"{owner}: request {op!r} needs the unknown grant {request.needs.grant!r}")
            self._by_op[op] = request
            self.models[op] = request.model

    def needs(self, request: FeatureRequest) -> Needs | None:
        """What an agent must hold to send ``request``; None: every caller may."""
        return self._by_op[request.op].needs

    def rule(self, request: FeatureRequest, caller: Caller) -> tuple[str, tuple[str, bool], bool]:
        """For the gate, of a request that ``needs`` a grant: its command's words, (the grant, whether ``own`` is
        enough), and whether it touches only the caller's own role's part."""
        registered = self._by_op[request.op]
        needs = registered.needs
        assert needs is not None
        own = needs.own is not None and needs.own(request, caller)
        return registered.words, (needs.grant, needs.own is not None), own

    def handle(self, event: FeatureRequested) -> None:
        """Answer ``event`` with its handler's result (when an awaitable, once it is done)."""
        result = self._by_op[event.request.op].handle(event.request)
        if inspect.isawaitable(result):
            later = asyncio.ensure_future(result)
            later.add_done_callback(lambda done: _answer(event.reply, done))
            return
        if not event.reply.done():
            event.reply.set_result(result)


def _answer(reply: asyncio.Future[Any], done: asyncio.Future[Any]) -> None:
    """Hand a later answer (its result, or its error) to the caller still waiting for it."""
    if reply.done():
        if not done.cancelled():
            done.exception()  # retrieved: nobody waits for it any more
        return
    if done.cancelled():
        reply.set_exception(ControlError("the request was called off: the orchestrator is ending"))
    elif done.exception() is not None:
        reply.set_exception(done.exception())  # type: ignore[arg-type]
    else:
        reply.set_result(done.result())
