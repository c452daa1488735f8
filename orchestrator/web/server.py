"""The dashboard's server: an ASGI app served by uvicorn inside ``up``, on the orchestrator's own asyncio loop.

Why in-process uvicorn (not aiohttp, not a thread): the supervisor already runs one asyncio loop and owns every
run there; a server on that loop reads the snapshot between two events without a lock, and posts the same
typed events as the control channel. uvicorn's ``Server.serve()`` is a coroutine, so it runs as one more task
of that loop; its signal capture is turned off (the supervisor's handlers stay the only ones) and so is the
lifespan protocol. Starlette gives the routes, the streaming responses and the test client. aiohttp would do the
same, at the price of a second framework beside the pydantic models the API shares with the control channel.

At start ``.orchestrator/web.json`` gets the URL and the token (mode 0600, removed at the end), and the URL
is printed with the token in its fragment, which the page trades for a cookie made from that token
(``security``): the next start's token ends every session of this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import socket
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.config.web import WILDCARDS, WebSettings, is_loopback
from orchestrator.core.errors import ConfigError, OrchestratorError
from orchestrator.web import errors, html, metrics, pages
from orchestrator.web.api import API, Json
from orchestrator.web.attach import Attachment
from orchestrator.web.hub import Hub
from orchestrator.web.security import COOKIE, Door, new_token

STATIC = Path(__file__).parent / "static"
WEB_JSON = "web.json"
OLD_SESSION_FILE = "web-session"  # the cookie's secret that earlier versions kept across starts: removed


class _QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers: the supervisor's loop owns SIGINT and SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Guard:
    """ASGI middleware: the door's rules before any route (``security.Door``)."""

    def __init__(self, app: ASGIApp, door: Door, say: Callable[[str], None], now: Callable[[], float]) -> None:
        self.app = app
        self.door = door
        self.say = say
        self.now = now

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        path = scope["path"]
        public = path.startswith("/static/")
        refusal = self.door.check(
            request.method, request.headers, request.cookies, now=self.now(), needs_token=not public
        )
        if refusal is not None and refusal.status == 401 and pages.is_page(path):
            await html.login(refusal.message)(scope, receive, send)
            return
        if refusal is not None:
            await errors.error(refusal.status, refusal.code, refusal.message)(scope, receive, send)
            return
        started = False
        began = time.perf_counter()

        async def sending(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and not started:
                started = True  # how long the answer took in this process, for people and the benchmark
                took = f"app;dur={(time.perf_counter() - began) * 1000:.3f}".encode()
                message = {**message, "headers": [*message.get("headers", []), (b"server-timing", took)]}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:  # noqa: BLE001 - one JSON error, never a traceback; the bug is loud in the log
            self.say(f"internal error in the dashboard at {path}: {exc}\n{traceback.format_exc()}")
            if not started:
                await INTERNAL(scope, receive, send)


def machine_names() -> set[str]:
    """This machine's own host name (and its first label), admitted for a bind to every address."""
    name = socket.gethostname().lower()
    return {name, name.partition(".")[0]} - {""}


def bind(settings: WebSettings, say: Callable[[str], None]) -> socket.socket:
    """The listening socket; a port in use is said and replaced by any free one (the URL says which)."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only when the listener says TCP, and
    # without it a response's second write waits for the client's delayed ACK (40 ms on every kept-alive request)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        try:
            sock.bind((settings.host, settings.port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or settings.port == 0:
                raise
            say(f"warning: web: port {settings.port} is in use; the dashboard takes a free port instead")
            sock.bind((settings.host, 0))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"web: cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}; "
            "name an address of this machine in `web: {host: ...}`, or remove `web:`"
        ) from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


class WebServer:
    """The dashboard of one running supervisor: start with the loop, stop with it."""

    def __init__(
        self,
        attachment: Attachment,
        settings: WebSettings,
        say: Callable[[str], None],
        show: Callable[[str], None] | None = None,
    ) -> None:
        """``say``: a line for the log and the terminal; ``show``: a line for the terminal alone (the token)."""
        self.att = attachment
        self.settings = settings
        self.say = say
        self.show = show or say
        self.hub = Hub()
        self.token = new_token()
        self.url = ""
        self._tasks: list[asyncio.Task[Any]] = []
        self._server: uvicorn.Server | None = None
        self._unwatch: Callable[[], None] | None = None

    async def start(self) -> str:
        sock = bind(self.settings, self.say)
        host, port = sock.getsockname()[:2]
        machine = machine_names() if self.settings.host in WILDCARDS else set()
        door = Door.for_server(self.settings, port, self.token, machine)
        with contextlib.suppress(OSError):
            (self.att.config.state_dir / OLD_SESSION_FILE).unlink()
        api = API(self.att, self.hub, (host, port))
        self.metrics = metrics.Metrics(self.att)
        app = Starlette(
            routes=[
                *api.routes(),
                Route("/api/v1/session", _session, methods=["POST"]),
                Route("/metrics", self.metrics.endpoint, methods=["GET"]),
                *pages.Pages(self.att).routes(),
                Mount("/static", StaticFiles(directory=STATIC), name="static"),
            ],
            exception_handlers={404: _not_found, 405: _not_allowed, OrchestratorError: _refused, Exception: _internal},
        )
        app.state.door = door
        app.state.now = self._now
        config = uvicorn.Config(
            Guard(app, door, self.say, self._now),
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,
            ws="none",
        )
        self._server = _QuietServer(config)
        self._unwatch = self.att.watch(self._changed)
        self._tasks = [
            asyncio.ensure_future(self._server.serve(sockets=[sock])),
            asyncio.ensure_future(self.hub.watch_live(self.att.light)),
        ]
        self.url = f"http://{_shown(host)}:{port}/"
        self._write_web_json()
        if not is_loopback(self.settings.host) or self.settings.public_urls:
            self.say(
                f"warning: web: the dashboard is reachable from other machines (allow_remote) at "
                f"{', '.join(self._remote_urls(port, machine))}: anyone who can reach it and holds the token acts "
                "as a person; put TLS in front of it"
            )
        mode = " (read-only)" if self.settings.read_only else ""
        self.say(f"dashboard{mode}: {self.url} (`orchestrator web` prints it with its token)")
        self.show(f"dashboard: {self.url}#token={self.token}")
        for public in self.settings.public_urls:
            self.show(f"dashboard: {public}/#token={self.token}")
        return self.url

    def _now(self) -> float:
        return self.att.clock.now().timestamp()

    def _remote_urls(self, port: int, machine: set[str]) -> list[str]:
        """The addresses other machines reach: the public URLs, else the bound host or the machine's name."""
        if self.settings.public_urls:
            return [f"{url}/" for url in self.settings.public_urls]
        name = max(sorted(machine), key=len) if machine else self.settings.host  # the full name, when it has dots
        return [f"http://{_shown(name, wildcard=False)}:{port}/"]

    def _changed(self, event: dict[str, Any]) -> None:
        self.metrics.run_changed(event)
        self.hub.publish(event)

    def _write_web_json(self) -> None:
        path = self.att.config.state_dir / WEB_JSON
        tmp = path.with_name(f".{WEB_JSON}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"url": self.url, "token": self.token, "pid": os.getpid()}, handle)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    async def stop(self) -> None:
        """Close every stream and the listener; ``web.json`` goes, its token no longer opens anything."""
        if self._unwatch is not None:
            self._unwatch()
        with contextlib.suppress(OSError):
            (self.att.config.state_dir / WEB_JSON).unlink()
        self.hub.close()
        if self._server is not None:
            self._server.should_exit = True
        for task in self._tasks[1:]:
            task.cancel()
        if self._tasks:
            try:
                await asyncio.wait_for(self._tasks[0], 3)
            except (TimeoutError, asyncio.CancelledError):
                pass
            except Exception as exc:  # noqa: BLE001 - the orchestrator's ending goes on; said once
                self.say(f"web: the dashboard did not close cleanly: {exc}")


def _shown(host: str, wildcard: bool = True) -> str:
    """``host`` as a URL names it: an IPv6 address in brackets, a bind to every address as loopback."""
    if wildcard and host in WILDCARDS:
        host = "127.0.0.1" if host == "0.0.0.0" else "::1"
    return f"[{host}]" if ":" in host else host


async def _session(request: Request) -> Response:
    """The page trades the token (from its URL's fragment, sent as a bearer header) for the session cookie: a MAC
    of this start's token that lasts ``session_max_age`` (``Secure`` when the page came over https)."""
    door: Door = request.app.state.door
    if request.headers.get("authorization", "")[:7].lower() != "bearer ":
        return errors.error(400, "usage", "send the token as `Authorization: Bearer TOKEN`")
    response = Json({"ok": True})
    secure = request.headers.get("origin", "").lower().startswith("https://")
    value = door.session(request.app.state.now())
    max_age = int(door.max_age)
    response.set_cookie(COOKIE, value, max_age=max_age, httponly=True, samesite="strict", path="/", secure=secure)
    return response


INTERNAL = errors.error(500, "internal", "internal error; see .orchestrator/orchestrator.log")


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OrchestratorError)
    return errors.from_exception(exc)


async def _internal(request: Request, exc: Exception) -> Response:
    return INTERNAL


async def _not_found(request: Request, exc: Exception) -> Response:
    return errors.error(404, "not_found", f"no such page or endpoint: {request.url.path}")


async def _not_allowed(request: Request, exc: Exception) -> Response:
    return errors.error(405, "method_not_allowed", f"{request.method} is not allowed on {request.url.path}")


async def start(
    attachment: Attachment,
    settings: WebSettings,
    say: Callable[[str], None],
    show: Callable[[str], None] | None = None,
) -> WebServer:
    """Serve the dashboard of ``attachment`` as ``settings`` say; the caller stops it at the end."""
    server = WebServer(attachment, settings, say, show)
    await server.start()
    return server
