"""The JSON API under ``/api/v1/``: the dashboard's only source, and the same actions as the CLI.

Reads of the live state come from the supervisor's snapshot on the loop's thread (a few milliseconds); reads of
records (history, journal, schedule, memory, trace) call the same functions as their commands, in a worker
thread with their own read-only connections, so a long read never holds the loop. Every action is a typed
control request admitted by the gate (``attach.Attachment.ask``), or, for what acts on files itself (``send``,
``release``, a retry), the gate's check first and then the command's own function.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from orchestrator.control import protocol
from orchestrator.control.authority import Caller
from orchestrator.core.errors import OrchestratorError, RefusedError, UsageError
from orchestrator.core.senders import AGENT_SENDER
from orchestrator.web import errors, peers
from orchestrator.web.attach import Attachment
from orchestrator.web.hub import Hub, encode
from orchestrator.workspaces import overview

LOG_TAIL = 64 * 1024  # bytes of a log the tail answers with
FOLLOW_EVERY = 0.25


class Json(JSONResponse):
    """JSON with the control channel's rule: what JSON cannot hold (paths, times) is sent as text."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, default=str, separators=(",", ":")).encode()


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TellBody(_Body):
    text: str = Field(min_length=1)


class ReasonBody(_Body):
    reason: str = ""


class InterruptBody(_Body):
    reason: str = "interrupted"
    keep: bool = False


class SendBody(_Body):
    to: str = Field(min_length=1)
    text: str = Field(min_length=1)
    subject: str | None = None
    reply_to: str | None = None


class WakeBody(_Body):
    task: str | None = None


class BulkCancelBody(_Body):
    role: str | None = None
    state: str | None = None
    reason: str = ""


class API:
    """The routes, bound to one attachment and one hub."""

    def __init__(self, attachment: Attachment, hub: Hub, local: tuple[str, int]) -> None:
        self.att = attachment
        self.hub = hub
        self.local = local  # the bound address, for finding a connection's process

    def routes(self) -> list[Route]:
        get = ["GET"]
        post = ["POST"]
        return [
            Route("/api/v1/state", self.state, methods=get),
            Route("/api/v1/runs/{run_id:int}", self.run, methods=get),
            Route("/api/v1/runs/{run_id:int}/log", self.log, methods=get),
            Route("/api/v1/history", self.history, methods=get),
            Route("/api/v1/schedule", self.schedule, methods=get),
            Route("/api/v1/journal", self.journal, methods=get),
            Route("/api/v1/handoff/{role}", self.handoff, methods=get),
            Route("/api/v1/memory/search", self.memory_search, methods=get),
            Route("/api/v1/trace/{memo}", self.trace, methods=get),
            Route("/api/v1/workspaces", self.workspaces, methods=get),
            Route("/api/v1/events", self.events, methods=get),
            Route("/api/v1/runs/{run_id:int}/cancel", self.action(self.cancel), methods=post),
            Route("/api/v1/runs/{run_id:int}/interrupt", self.action(self.interrupt), methods=post),
            Route("/api/v1/runs/{run_id:int}/tell", self.action(self.tell), methods=post),
            Route("/api/v1/runs/{run_id:int}/retry", self.action(self.retry), methods=post),
            Route("/api/v1/memos/{memo}/release", self.action(self.release), methods=post),
            Route("/api/v1/roles/{role}/wake", self.action(self.wake), methods=post),
            Route("/api/v1/send", self.action(self.send), methods=post),
            Route("/api/v1/cancel", self.action(self.bulk_cancel), methods=post),
            Route("/api/v1/requests/{op}", self.action(self.feature), methods=post),
        ]

    # ------------------------------------------------------------ reads
    async def state(self, request: Request) -> Response:
        return Json(self.att.state())

    async def run(self, request: Request) -> Response:
        found = self.att.run(request.path_params["run_id"])
        if found is None:
            return errors.error(404, "unknown_run", f"no run {request.path_params['run_id']} on record")
        found["quiet"] = self.att.quiet().get(request.path_params["run_id"])
        config = self.att.config
        found["workspace"] = await asyncio.to_thread(
            overview.run_changes, config.root, config.state_dir / "state.db", request.path_params["run_id"]
        )
        return Json(found)

    async def log(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        found = self.att.run(run_id)
        if found is None:
            return errors.error(404, "unknown_run", f"no run {run_id} on record")
        path = Path(found["run"]["log"]) if found["run"].get("log") else None
        if path is None or not path.exists():
            return errors.error(404, "no_log", f"run {run_id} has no log (yet, or retention removed it)")
        size = _int_param(request, "bytes", LOG_TAIL, 1, 16 * LOG_TAIL)
        text, offset = await asyncio.to_thread(_tail, path, size)
        if request.query_params.get("follow") not in ("1", "true"):
            return Json({"run_id": run_id, "path": str(path), "offset": offset, "text": text})
        return StreamingResponse(self._follow(run_id, path, offset, text), media_type="text/event-stream")

    async def _follow(self, run_id: int, path: Path, offset: int, text: str) -> Any:
        yield encode("log", {"text": text})
        while True:
            await asyncio.sleep(FOLLOW_EVERY)
            chunk, offset = await asyncio.to_thread(_read_from, path, offset)
            if chunk:
                yield encode("log", {"text": chunk})
            live = self.att.run(run_id)
            if live is None or live["run"]["state"] in ("succeeded", "failed", "cancelled", "timed_out", "returned"):
                yield encode("end", live["run"] if live else {})
                return

    async def history(self, request: Request) -> Response:
        from orchestrator.control import history

        q = request.query_params
        limit = _int_param(request, "limit", None, 1, 100_000) if q.get("limit") else None
        report = await asyncio.to_thread(
            history.collect,
            self.att.root,
            role=q.get("role") or None,
            since=q.get("since") or None,
            until=q.get("until") or None,
            limit=limit,
            every=q.get("all") in ("1", "true"),
            before=_int_param(request, "before", None, 1, 2**62),
        )
        return Json(report)

    async def workspaces(self, request: Request) -> Response:
        config = self.att.config
        return Json(
            {"workspaces": await asyncio.to_thread(overview.inventory, config.root, config.state_dir / "state.db")}
        )

    async def schedule(self, request: Request) -> Response:
        from orchestrator.schedule import view

        return Json(await asyncio.to_thread(view.schedule, self.att.config))

    async def journal(self, request: Request) -> Response:
        from orchestrator.continuity import commands

        q = request.query_params
        last = _int_param(request, "last", None, 1, 100_000) if q.get("last") else None
        entries = await asyncio.to_thread(
            commands.journal_entries, self.att.root, role=q.get("role") or None, since=q.get("since") or None, last=last
        )
        return Json({"entries": entries})

    async def handoff(self, request: Request) -> Response:
        from orchestrator.continuity import commands

        role = request.path_params["role"]
        if role not in self.att.config.roles:
            return errors.error(404, "unknown_role", f"no role {role!r} in {self.att.config.path}")
        current = await asyncio.to_thread(commands.handoff_current, self.att.root, role)
        versions = await asyncio.to_thread(commands.handoff_history, self.att.root, role)
        return Json({"role": role, "current": current, "versions": versions})

    async def memory_search(self, request: Request) -> Response:
        q = request.query_params
        query = q.get("q", "").strip()
        if not query:
            raise UsageError("memory search: give the words to find as ?q=...")
        limit = _int_param(request, "limit", 20, 1, 500)
        found = await asyncio.to_thread(_memory_search, self.att, query, q.get("role") or None, limit)
        return Json({"query": query, "entries": found})

    async def trace(self, request: Request) -> Response:
        from orchestrator.tools import trace

        return Json(await asyncio.to_thread(trace.trace, self.att.root, request.path_params["memo"]))

    async def events(self, request: Request) -> Response:
        first = encode("hello", {"type": "hello", "started_at": self.att.started_at, "pid": os.getpid()})
        return StreamingResponse(
            self.hub.stream(first), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
        )

    # ------------------------------------------------------------ actions
    def action(
        self, handler: Callable[[Request, Caller, str], Awaitable[dict[str, Any]]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """An action: refused when read-only, its caller found from the kernel, its answer as JSON."""

        async def endpoint(request: Request) -> Response:
            refusal = request.app.state.door.action_refusal()
            if refusal is not None:
                return errors.error(refusal.status, refusal.code, refusal.message)
            caller = await self._caller(request)
            who = f"a person at the dashboard ({request.client.host if request.client else '?'})"
            return Json(await handler(request, caller, who))

        return endpoint

    async def _caller(self, request: Request) -> Caller:
        client = (request.client.host, request.client.port) if request.client else None
        pid = await asyncio.to_thread(peers.peer_pid, client, self.local)
        if pid is None and client is not None and peers.is_loopback_client(client[0]):
            raise RefusedError(
                "refused: the process holding this connection cannot be found, so it is not known to be a person"
            )
        return self.att.caller(pid)

    def _label(self, run_id: int) -> str:
        found = self.att.run(run_id)
        if found is None:
            raise _NoRun(run_id)
        view = found["run"]
        return str(view.get("memo_id") or view.get("memo") or "")

    async def cancel(self, request: Request, caller: Caller, who: str) -> dict[str, Any]:
        body = await _body(request, ReasonBody)
        label = self._label(request.path_params["run_id"])
        return await self.att.ask(protocol.CancelRequest(memo=label, reason=body.reason, who=who), caller)

    async def interrupt(self, request: Request, caller: Caller, who: str) -> dict[str, Any]:
        body = await _body(request, InterruptBody)
        label = self._label(request.path_params["run_id"])
        req = protocol.InterruptRequest(memo=label, keep=body.keep, reason=body.reason, who=who)
        return await self.att.ask(req, caller)

    async def tell(self, request: Request, caller: Caller, who: str) -> dict[str, Any]:
        body = await _body(request, TellBody)
        label = self._label(request.path_params["run_id"])
        return await self.att.ask(protocol.TellRequest(memo=label, text=body.text, who=who), caller)

    async def retry(self, request: Request, caller: Caller, who: str) -> dict[str, Any]:
        await _body(request, _Body)
        self.att.require(caller, "release")
        return self.att.retry(request.path_params["run_id"], who)

    async def release(self, request: Request, caller: Caller, who: str) -> dict[str, Any]:
        from orchestrator.tools.release import release

        await _body(request, _Body)
        self.att.require(caller, "release")
        done = await asyncio.to_thread(release, self.att.root, request.path_params["memo"], who=who)
        return {"released": done}

    async def wake(self, request: Request, caller: Caller, who: str) -> dict[str, Any]:
        body = await _body(request, WakeBody)
        req = protocol.WakeRequest(role=request.path_params["role"], task=body.task, who=who)
        return await self.att.ask(req, caller)

    async def send(self, request: Request, caller: Caller, who: str) -> dict[str, Any]:
        from orchestrator.tools.send import send

        body = await _body(request, SendBody)
        self.att.require(caller, "send", True)
        sender = (caller.role or AGENT_SENDER) if caller.agent else "owner"  # an agent never sends as a person
        result = await asyncio.to_thread(
            send,
            self.att.root,
            body.to,
            body.text,
            subject=body.subject,
            reply_to=body.reply_to,
            sender=sender,
        )
        return {"id": result.memo_id, "path": str(result.path), "warning": result.warning}

    async def bulk_cancel(self, request: Request, caller: Caller, who: str) -> dict[str, Any]:
        body = await _body(request, BulkCancelBody)
        if not body.role and not body.state:
            raise UsageError('cancel: give "role", "state" or both')
        if body.state is None:
            return await self.att.ask(protocol.CancelRequest(role=body.role, reason=body.reason, who=who), caller)
        labels = [
            str(run.get("memo_id") or run.get("memo"))
            for run in self.att.light()["runs"]
            if run["state"] == body.state and (body.role is None or run["role"] == body.role)
        ]
        done: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        for label in labels:
            try:
                done.append(await self.att.ask(protocol.CancelRequest(memo=label, reason=body.reason, who=who), caller))
            except OrchestratorError as exc:
                failed.append({"memo": label, "error": str(exc)})
        return {"cancelled": done, "failed": failed}

    async def feature(self, request: Request, caller: Caller, who: str) -> dict[str, Any]:
        """A request a feature serves (``Extension.requests``: landing a workspace, answering a question), its
        fields the JSON body: parsed, checked and answered exactly as the CLI's."""
        op, models = request.path_params["op"], self.att.feature_models()
        if op not in models:
            known = ", ".join(sorted(models)) or "none"
            raise UsageError(f"no feature of this orchestrator serves the request {op!r} (it serves: {known})")
        fields = await _object(request)
        line = json.dumps({**fields, "op": op, "who": who}).encode()
        return await self.att.ask(protocol.parse_request(line, models), caller)


class _NoRun(UsageError):
    def __init__(self, run_id: int) -> None:
        super().__init__(f"no run {run_id} on record")


async def _body(request: Request, model: type[_Body]) -> Any:
    """The request's JSON body as ``model`` (an empty body is ``{}``); a bad one is a usage error naming the
    field."""
    data = await _object(request)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"malformed request: {protocol.describe(exc)}") from None


async def _object(request: Request) -> dict[str, Any]:
    """The request's JSON body, an object (an empty body is ``{}``); anything else is a usage error."""
    raw = await request.body()
    if len(raw) > 1024 * 1024:
        raise UsageError("the request body is over 1 MiB")
    try:
        data = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise UsageError("malformed request: expected a JSON object") from None
    if not isinstance(data, dict):
        raise UsageError("malformed request: expected a JSON object")
    protocol.refuse_lone_surrogates(data)
    return data


def _int_param(request: Request, name: str, default: int | None, low: int, high: int) -> Any:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise UsageError(f"?{name}={raw}: expected a whole number from {low} to {high}")
    return int(raw)


def _tail(path: Path, size: int) -> tuple[str, int]:
    with open(path, "rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        start = max(0, end - size)
        handle.seek(start)
        data = handle.read(end - start)
    if start:
        data = data.split(b"\n", 1)[-1]
    return data.decode("utf-8", "replace"), end


def _read_from(path: Path, offset: int) -> tuple[str, int]:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(LOG_TAIL)
    except OSError:
        return "", offset
    cut = data.rfind(b"\n") + 1 if len(data) == LOG_TAIL else len(data)
    return data[:cut].decode("utf-8", "replace"), offset + cut


def _memory_search(att: Attachment, query: str, role: str | None, limit: int) -> list[dict[str, Any]]:
    """``memory search`` as a person runs it (the dashboard's reads are a person's)."""
    from orchestrator.memory.db import MemoryDB
    from orchestrator.memory.db.schema import db_path
    from orchestrator.memory.service import PERSON, Memory

    path = db_path(att.config.state_dir)
    if not path.exists():
        return []
    db = MemoryDB(path)
    try:
        memory = Memory(db, att.config.memory, list(att.config.roles), PERSON)
        return list(memory.search(query, role=role, limit=limit))
    finally:
        db.close()
