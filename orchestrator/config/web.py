"""The ``web:`` key of ``roles.yaml`` (and ``up --web [HOST:]PORT``): where the dashboard listens and what it allows.

Light on purpose (pydantic only): ``config`` imports it, and the server's own packages (starlette, uvicorn) load
only when the dashboard starts.
"""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict, Field, model_validator

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only reaches this machine."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class WebSettings(BaseModel):
    """``web: {port: 8765, host: 127.0.0.1}``; ``port: 0`` takes any free port. A host other than loopback needs
    ``allow_remote: true`` (anyone who can reach it and holds the token acts as a person); ``read_only`` refuses
    every action."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    port: int = Field(8765, ge=0, le=65535)
    host: str = Field("127.0.0.1", min_length=1)
    read_only: bool = False
    allow_remote: bool = False

    @model_validator(mode="after")
    def _remote_is_asked_for(self) -> WebSettings:
        if not is_loopback(self.host) and not self.allow_remote:
            raise ValueError(
                f"host {self.host!r} is reachable from other machines; set `allow_remote: true` to serve the "
                "dashboard there (anyone with the token may act as a person), or use 127.0.0.1"
            )
        return self


def parse_address(text: str, base: WebSettings | None = None) -> WebSettings:
    """``up --web [HOST:]PORT`` over the file's ``web:`` (its ``read_only`` and ``allow_remote`` kept)."""
    host, sep, port = text.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"--web: expected [HOST:]PORT such as 8765 or 127.0.0.1:0, got {text!r}")
    settings = (base or WebSettings()).model_dump()
    settings["port"] = int(port)
    if sep and host:
        settings["host"] = host.strip("[]")
    return WebSettings.model_validate(settings)
