"""The ``notifications:`` key of ``roles.yaml``: the channels that tell people when the team needs them.

Each channel is one of three kinds (a discriminated union on ``kind``): our own signed JSON ``webhook``, any
service ``apprise`` knows (one URL kept in the environment), or a ``command`` given the event's JSON on stdin.
Secrets (a URL with a token, an HMAC key) are named by their environment variable, never written here.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from orchestrator.core.team_events import NotifiableKind
from orchestrator.core.units import OFF, Duration, Strict

DEFAULT_EVENTS: tuple[NotifiableKind, ...] = ("needs_input", "failed", "paused", "crash_loop")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
EnvName = Annotated[str, Field(pattern=ENV_NAME.pattern)]


class ChannelBase(Strict):
    """What every channel has: the events it is sent (``events``); ``remind``, after which an unanswered
    question (``needs_input``) is sent again, every ``remind`` until it is answered (``off``: never); and the
    pauses before each retry of a send that failed (``backoff``, one retry per pause)."""

    events: list[NotifiableKind] = Field(default_factory=lambda: list(DEFAULT_EVENTS), min_length=1)
    remind: Annotated[Duration | None, OFF] = Field(None, gt=0)
    backoff: list[Duration] = Field(default_factory=lambda: [2.0, 10.0, 30.0], max_length=10)  # one retry each


class WebhookChannel(ChannelBase):
    """``{kind: webhook, url_env: TEAM_HOOK, secret_env: TEAM_HOOK_SECRET}``: a JSON POST to ``url`` (or the URL
    in the variable ``url_env``), signed ``X-Orchestrator-Signature: sha256=<hex HMAC-SHA256 of the body>`` with
    the key in ``secret_env`` when one is named."""

    kind: Literal["webhook"]
    url: str | None = Field(None, pattern=r"^https?://")
    url_env: EnvName | None = None
    secret_env: EnvName | None = None
    timeout: Duration = Field(10.0, gt=0)

    @model_validator(mode="after")
    def _one_url(self) -> WebhookChannel:
        if (self.url is None) == (self.url_env is None):
            raise ValueError("give exactly one of `url` and `url_env` (the variable holding the URL)")
        return self


class AppriseChannel(ChannelBase):
    """``{kind: apprise, url_env: TEAM_APPRISE_URL}``: any service Apprise knows (``ntfy://``, ``slack://``,
    ``tgram://``, ``mailto://``, ...), its URL read from the variable; needs ``orchestrator[notify]``."""

    kind: Literal["apprise"]
    url_env: EnvName


class CommandChannel(ChannelBase):
    """``{kind: command, argv: [notify-send-team]}``: runs ``argv`` with the event's JSON on stdin; exit 0 is
    delivered."""

    kind: Literal["command"]
    argv: list[str] = Field(min_length=1)
    timeout: Duration = Field(30.0, gt=0)


Channel = Annotated[WebhookChannel | AppriseChannel | CommandChannel, Field(discriminator="kind")]


def channel_label(index: int, channel: WebhookChannel | AppriseChannel | CommandChannel) -> str:
    """How a channel is named in lines for people, with no secret in it: ``notifications[0] (webhook, TEAM_HOOK)``."""
    if isinstance(channel, CommandChannel):
        what = channel.argv[0]
    elif channel.url_env is not None:
        what = f"${channel.url_env}"
    else:
        what = url_shown(channel.url or "")
    return f"notifications[{index}] ({channel.kind}, {what})"


def url_shown(url: str) -> str:
    """A URL written in the file as lines for people show it: its scheme and host (its path may carry a token)."""
    match = re.match(r"^([a-z]+://)(?:[^@/]*@)?([^/?#]*)", url)
    return f"{match.group(1)}{match.group(2)}/..." if match else "a URL"
