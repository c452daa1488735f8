"""The start-up check of the asks feature: ``approve:`` holds a tool call only where the orchestrator's hook can
defer it (a Claude CLI role with stream-json); on any other role ``up`` is refused with one line (fail closed: the
call would run unapproved, the promise broken)."""

from __future__ import annotations

from orchestrator.asks.settings import hooked
from orchestrator.config import Config, dry_run
from orchestrator.core.errors import ConfigError


def check_asks(config: Config) -> None:
    """``ConfigError`` naming the role and the way out when its ``approve:`` could not hold a call (not in a dry run,
    ``ORCHESTRATOR_SPAWN_CMD``, whose stand-in replaces every command)."""
    if dry_run():
        return
    for name, role in config.roles.items():
        if role.approve and not hooked(role):
            raise ConfigError(
                f"{config.path}: roles.{name}.approve: only a Claude CLI role with --output-format stream-json can "
                "hold a tool call for a person (the orchestrator's hook defers it), and this one would run it "
                "unapproved; use a `claude -p --output-format stream-json --verbose` command, or refuse the call "
                "with the role's own permissions (disallowed_tools, --disallowedTools)"
            )
