"""The dashboard's door: a per-start token, the ``Host`` a request names, and the ``Origin`` of an action.

Binding to 127.0.0.1 does not keep a web page elsewhere out: with DNS rebinding its name comes to point at
127.0.0.1, and the browser then sends it requests with its own ``Host`` (CVE-2025-66416 in the MCP Python SDK).
So every request must name this server: its address (or ``localhost``) and its port, the machine's name for a
bind to every address, or one of ``public_urls`` (a TLS proxy's ``https://`` name). It must carry the token
(``Authorization: Bearer``, or the ``HttpOnly; SameSite=Strict`` cookie the page trades the URL fragment for),
and an action with an ``Origin`` must come from one of the dashboard's own origins. The cookie is a MAC of the
per-start token with its expiry, so a restart (a new token) or ``session_max_age`` ends it; no secret is kept
on disk. Pure: no I/O, the time is given.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from orchestrator.config.web import DEFAULT_PORTS, SESSION_MAX_AGE, WILDCARDS, WebSettings, is_loopback

COOKIE = "orchestrator_token"
TOKEN_BYTES = 32
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def new_token() -> str:
    """A token for one start of the server: what ``web.json`` and the printed URL hold."""
    return secrets.token_urlsafe(TOKEN_BYTES)


@dataclass(frozen=True)
class Refusal:
    """Why a request is turned away: its HTTP status, the error code and one line for people."""

    status: int
    code: str
    message: str


@dataclass(frozen=True)
class Door:
    """The rules for one bound server: its token and the host names and origins that are its own."""

    token: str
    hosts: frozenset[str]
    origins: frozenset[str]
    read_only: bool = False
    max_age: float = SESSION_MAX_AGE  # seconds a session cookie opens the door

    @classmethod
    def for_server(cls, settings: WebSettings, port: int, token: str, machine: Iterable[str] = ()) -> Door:
        """The door of a server bound to ``settings.host`` on ``port`` (the real one, when port 0 was asked);
        ``machine``: this machine's own names, admitted for a bind to every address (0.0.0.0, ::)."""
        names = {settings.host}
        if is_loopback(settings.host) or settings.host in WILDCARDS:
            names |= {"localhost", "127.0.0.1", "[::1]"}
        if settings.host in WILDCARDS:
            names |= set(machine)
        names = {f"[{name}]" if ":" in name and not name.startswith("[") else name for name in names}
        hosts = {f"{name}:{port}".lower() for name in names}
        origins = {f"http://{host}" for host in hosts}
        for origin in settings.public_urls:  # as config.web.public_origin wrote it: no default port
            scheme, _, host = origin.partition("://")
            origins.add(origin)
            hosts.add(host)
            if ":" not in host.rpartition("]")[2]:  # a browser leaves the default port out; other clients may not
                hosts.add(f"{host}:{DEFAULT_PORTS[scheme]}")
        return cls(token, frozenset(hosts), frozenset(origins), settings.read_only, settings.session_max_age)

    def session(self, now: float) -> str:
        """The session cookie's value from ``now`` on: its expiry and a MAC of it under this start's token."""
        expires = int(now + self.max_age)
        return f"{expires}.{self._mac(expires)}"

    def _mac(self, expires: int) -> str:
        return hmac.new(self.token.encode(), f"session until {expires}".encode(), hashlib.sha256).hexdigest()

    def _session_valid(self, cookie: str, now: float) -> bool:
        expires, _, mac = cookie.partition(".")
        if not expires.isdigit() or int(expires) <= now:
            return False
        return hmac.compare_digest(mac.encode(), self._mac(int(expires)).encode())

    def _token_refusal(self, headers: Mapping[str, str], cookies: Mapping[str, str], now: float) -> Refusal | None:
        """None for the right bearer token or a live session cookie; else why not."""
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            if hmac.compare_digest(auth[7:].strip().encode(), self.token.encode()):
                return None
            return Refusal(401, "unauthorized", "wrong token (it changes at every start: `orchestrator web`)")
        cookie = cookies.get(COOKIE)
        if cookie is None:
            return Refusal(401, "unauthorized", "the token is required: open the URL `orchestrator web` prints")
        if self._session_valid(cookie, now):
            return None
        return Refusal(
            401,
            "unauthorized",
            "this session has ended (the orchestrator restarted, or `web.session_max_age` passed): open the URL "
            "`orchestrator web` prints",
        )

    def check(
        self,
        method: str,
        headers: Mapping[str, str],
        cookies: Mapping[str, str],
        *,
        now: float,
        needs_token: bool = True,
    ) -> Refusal | None:
        """None when the request may go on at wall-clock time ``now``; else why not. The ``Host`` is checked
        before the token, so a rebinding page learns nothing, not even whether its guess of a token was right."""
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            return Refusal(
                403,
                "forbidden_host",
                f"Host {host or '(none)'!r} is not this dashboard's address; a name it is reached by belongs in "
                "`web: {public_urls: [...]}`",
            )
        unsafe = method.upper() not in SAFE_METHODS
        origin = headers.get("origin")
        if unsafe and origin is not None and origin.lower() not in self.origins:
            return Refusal(403, "forbidden_origin", f"Origin {origin!r} is not this dashboard's own")
        if unsafe and origin is None and headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return Refusal(403, "forbidden_origin", "a cross-site request may not act")
        return self._token_refusal(headers, cookies, now) if needs_token else None

    def action_refusal(self) -> Refusal | None:
        """Why no action may be taken at all (``read_only``), else None."""
        if self.read_only:
            return Refusal(403, "read_only", "the dashboard is read-only (`web: {read_only: true}` in roles.yaml)")
        return None
