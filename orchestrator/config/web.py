"""The ``web:`` key of ``roles.yaml`` (and ``up --web [HOST:]PORT``): where the dashboard listens and what it allows.

Light on purpose (pydantic only): ``config`` imports it, and the server's own packages (starlette, uvicorn) load
only when the dashboard starts.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.core.units import Duration

LOOPBACK_NAMES = ("localhost",)
WILDCARDS = ("0.0.0.0", "::")  # a bind to every address of the machine
DEFAULT_PORTS = {"http": 80, "https": 443}
SESSION_MAX_AGE = 12 * 3600.0


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only reaches this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def public_origin(url: str) -> str:
    """``url`` (``https://team.example.org``, ``http://myhost:8765/``) as its origin, the way a browser sends it
    (lower case, no default port, no slash); ``ValueError`` with one line when it is not a bare http(s) origin."""
    example = "such as https://team.example.org or http://myhost:8765"
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r} is not a URL {example}") from None
    scheme, name = parts.scheme.lower(), (parts.hostname or "")
    if scheme not in DEFAULT_PORTS or not name:
        raise ValueError(f"{url!r} is not an http:// or https:// URL with a host name, {example}")
    if parts.username is not None or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(
            f"{url!r} has more than a scheme, a host and a port; the dashboard is served at the root of its "
            f"address, {example}"
        )
    name = f"[{name}]" if ":" in name else name
    shown = f":{port}" if port is not None and port != DEFAULT_PORTS[scheme] else ""
    return f"{scheme}://{name}{shown}"


class WebSettings(BaseModel):
    """``web: {port: 8765, host: 127.0.0.1}``; ``port: 0`` takes any free port. A host other than loopback needs
    ``allow_remote: true`` (anyone who can reach it and holds the token acts as a person), and so do
    ``public_urls``, the other addresses it is reached by (a TLS proxy's, a DNS name); ``read_only`` refuses
    every action; ``session_max_age`` is how long the page's cookie lasts (a restart ends it sooner)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    port: int = Field(8765, ge=0, le=65535)
    host: str = Field("127.0.0.1", min_length=1)
    read_only: bool = False
    allow_remote: bool = False
    public_urls: tuple[str, ...] = ()
    session_max_age: Duration = Field(SESSION_MAX_AGE, gt=0)

    @field_validator("public_urls", mode="after")
    @classmethod
    def _origins(cls, urls: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(public_origin(url) for url in urls))

    @model_validator(mode="after")
    def _remote_is_asked_for(self) -> WebSettings:
        if not is_loopback(self.host) and not self.allow_remote:
            raise ValueError(
                f"host {self.host!r} is reachable from other machines; set `allow_remote: true` to serve the "
                "dashboard there (anyone with the token may act as a person), or use 127.0.0.1"
            )
        if self.public_urls and not self.allow_remote:
            raise ValueError(
                "public_urls let other machines reach the dashboard; set `allow_remote: true` as well (anyone "
                "with the token may act as a person), or remove public_urls"
            )
        return self


def parse_address(text: str, base: WebSettings | None = None) -> WebSettings:
    """``up --web [HOST:]PORT`` over the file's ``web:`` (its other keys kept)."""
    host, sep, port = text.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"--web: expected [HOST:]PORT such as 8765 or 127.0.0.1:0, got {text!r}")
    settings = (base or WebSettings()).model_dump()
    settings["port"] = int(port)
    if sep and host:
        settings["host"] = host.strip("[]")
    return WebSettings.model_validate(settings)
