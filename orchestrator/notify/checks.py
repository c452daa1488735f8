"""What each channel needs before the team starts: its variables set, Apprise installed, its command found.

``up`` and ``config check`` refuse with the first problem (fail closed: a team promised to tell people must be
able to); ``doctor`` lists every channel's finding. No line shows a secret: only the variables' names.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from orchestrator.config import Config
from orchestrator.config.notify import AppriseChannel, CommandChannel, WebhookChannel, channel_label
from orchestrator.core.errors import ConfigError
from orchestrator.notify.channels import apprise_installed, command_path


@dataclass(frozen=True)
class ChannelCheck:
    """One channel's verdict: ``problem`` and ``fix`` are empty when it is ready."""

    label: str
    problem: str = ""
    fix: str = ""
    ready: str = ""


def check_channels(
    config: Config, environ: Mapping[str, str] | None = None, have_apprise: Callable[[], bool] = apprise_installed
) -> list[ChannelCheck]:
    """Every channel of ``notifications:``, checked."""
    env = os.environ if environ is None else environ
    found = []
    for index, channel in enumerate(config.notifications):
        label = channel_label(index, channel)
        names = [getattr(channel, "url_env", None), getattr(channel, "secret_env", None)]
        unset = [name for name in names if name and not env.get(name)]
        if unset:
            found.append(
                ChannelCheck(
                    label,
                    f"the variable {', '.join(unset)} is not set",
                    "export it in the orchestrator's environment (its service unit's Environment=), or remove the "
                    "channel",
                )
            )
        elif isinstance(channel, AppriseChannel) and not have_apprise():
            found.append(
                ChannelCheck(
                    label,
                    "needs Apprise, which is not installed here",
                    "pip install 'orchestrator[notify]', or remove the channel",
                )
            )
        elif isinstance(channel, CommandChannel) and command_path(channel, config.root, env) is None:
            found.append(
                ChannelCheck(
                    label,
                    f"{channel.argv[0]!r} is not found (PATH, or a path from {config.root})",
                    "install it or fix `argv`",
                )
            )
        else:
            what = "signed" if isinstance(channel, WebhookChannel) and channel.secret_env else "ready"
            found.append(ChannelCheck(label, ready=f"{what}; events {', '.join(channel.events)}"))
    return found


def require_channels(config: Config) -> None:
    """``ConfigError`` with the first channel that cannot work, in one line."""
    for check in check_channels(config):
        if check.problem:
            raise ConfigError(f"{config.path}: {check.label}: {check.problem}; {check.fix}")
