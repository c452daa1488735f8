"""``orchestrator config schema|check``: roles.yaml as a JSON Schema, and the configuration in force."""

from __future__ import annotations

import argparse
import sys

from orchestrator import console
from orchestrator.commands.common import project_root


def cmd_config(args: argparse.Namespace) -> int:
    """``schema`` prints the JSON Schema; ``check`` makes the checks of ``up`` and prints the effective values."""
    from orchestrator.ops import configuration

    if args.config_command == "schema":
        console.say(configuration.schema_text().rstrip("\n"))
        return 0
    from orchestrator.app import preflight
    from orchestrator.config import load_config
    from orchestrator.core.errors import ConfigError
    from orchestrator.ops.doctor import start_checks
    from orchestrator.ops.executor_switch import refusal

    config = load_config(project_root(args))
    preflight(config)
    warnings = start_checks(config)  # the machine's part of `up`'s checks: folders, state, inotify, disk, keeper, Ray
    refused = refusal(config)
    if refused:
        raise ConfigError(refused)
    for finding in warnings:
        console.say(f"warning: {finding.text}", sys.stderr)
    values = configuration.effective(config)
    if args.json:
        console.print_json(values)
        return 0
    import yaml

    console.say(
        f"# {config.path}: valid, roles {', '.join(config.roles)}; the values in force, defaults merged into "
        "each role, durations in seconds, rates as [count, window seconds]"
    )
    console.say(
        yaml.safe_dump(values, sort_keys=False, allow_unicode=True, width=120, default_flow_style=None).rstrip("\n")
    )
    return 0
