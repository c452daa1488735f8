"""``orchestrator notify test``: one test event sent to every channel at once (no retries), and what each
answered, so a person sees a channel work before the team needs it."""

from __future__ import annotations

import os
from dataclasses import dataclass

from orchestrator.config import Config
from orchestrator.config.notify import channel_label
from orchestrator.core.clock import SystemClock
from orchestrator.core.errors import ConfigError
from orchestrator.core.team_events import TeamEvent
from orchestrator.notify.channels import DeliveryError, scrub, secrets_of, send
from orchestrator.notify.payload import payload

NOT_DELIVERED = 11  # the exit status of `notify test` when a channel did not take the test event


@dataclass(frozen=True)
class ProbeResult:
    label: str
    delivered: bool
    answer: str

    @property
    def line(self) -> str:
        return f"{'ok  ' if self.delivered else 'fail'} {self.label}: {self.answer}"


def probe_channels(config: Config) -> list[ProbeResult]:
    """Send the test event through every channel; a ``ConfigError`` when none is named."""
    if not config.notifications:
        raise ConfigError(f"{config.path}: notifications: no channel is named; docs/configuration.md shows how")
    event = TeamEvent("test", reason="a test from `orchestrator notify test`: this channel works")
    body = payload(event, config, SystemClock().now())
    results = []
    for index, channel in enumerate(config.notifications):
        label = channel_label(index, channel)
        try:
            results.append(ProbeResult(label, True, send(channel, body, os.environ, config.root)))
        except DeliveryError as exc:
            results.append(ProbeResult(label, False, scrub(str(exc), secrets_of(channel, os.environ))))
    return results
