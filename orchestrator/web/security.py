"""The dashboard's door: a per-start token, the ``Host`` a request names, and the ``Origin`` of an action.

Binding to 127.0.0.1 does not keep a web page elsewhere out: with DNS rebinding its name comes to point at
127.0.0.1, and the browser then sends it requests with its own ``Host`` (CVE-2025-66416 in the MCP Python SDK).
So every request must name this server by its address (or ``localhost``) and its port, carry the token
(``Authorization: Bearer``, or the ``HttpOnly; SameSite=Strict`` cookie the page sets from the URL fragment),
and an action with an ``Origin`` must come from the dashboard's own origin. Pure: no I/O.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.config.web import WebSettings, is_loopback

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
    session: str = ""  # the cookie's value, given in exchange for the token; kept across starts (see server)

    @classmethod
    def for_server(cls, settings: WebSettings, port: int, token: str) -> Door:
        """The door of a server bound to ``settings.host`` on ``port`` (the real one, when port 0 was asked)."""
        names = {settings.host}
        if is_loopback(settings.host):
            names |= {"localhost", "127.0.0.1", "[::1]"}
        if ":" in settings.host and not settings.host.startswith("["):
            names.add(f"[{settings.host}]")
        hosts = frozenset(f"{name}:{port}".lower() for name in names)
        origins = frozenset(f"http://{host}" for host in hosts)
        return cls(token, hosts, origins, settings.read_only)

    def _admitted(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> bool | None:
        """True for the right bearer token or session cookie, False for a wrong one, None for none at all."""
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return hmac.compare_digest(auth[7:].strip().encode(), self.token.encode())
        cookie = cookies.get(COOKIE)
        if cookie is not None:
            return bool(self.session) and hmac.compare_digest(cookie.encode(), self.session.encode())
        return None

    def check(
        self, method: str, headers: Mapping[str, str], cookies: Mapping[str, str], *, needs_token: bool = True
    ) -> Refusal | None:
        """None when the request may go on; else why not. The ``Host`` is checked before the token, so a
        rebinding page learns nothing, not even whether its guess of a token was right."""
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            return Refusal(403, "forbidden_host", f"Host {host or '(none)'!r} is not this dashboard's address")
        unsafe = method.upper() not in SAFE_METHODS
        origin = headers.get("origin")
        if unsafe and origin is not None and origin.lower() not in self.origins:
            return Refusal(403, "forbidden_origin", f"Origin {origin!r} is not this dashboard's own")
        if unsafe and origin is None and headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return Refusal(403, "forbidden_origin", "a cross-site request may not act")
        if needs_token:
            admitted = self._admitted(headers, cookies)
            if admitted is None:
                return Refusal(401, "unauthorized", "the token is required: open the URL `orchestrator web` prints")
            if not admitted:
                return Refusal(401, "unauthorized", "wrong token (it changes at every start: `orchestrator web`)")
        return None

    def action_refusal(self) -> Refusal | None:
        """Why no action may be taken at all (``read_only``), else None."""
        if self.read_only:
            return Refusal(403, "read_only", "the dashboard is read-only (`web: {read_only: true}` in roles.yaml)")
        return None
