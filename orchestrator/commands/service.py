"""``orchestrator service install|status|logs|uninstall``: this root's team as a systemd user service."""

from __future__ import annotations

import argparse

from orchestrator import console
from orchestrator.commands.common import project_root


def cmd_service(args: argparse.Namespace) -> int:
    """Install runs the checks of ``up`` first, so a unit is only written for a team that can start."""
    from orchestrator.ops import service

    root = project_root(args)
    if args.service_command == "install":
        from orchestrator.app import preflight
        from orchestrator.config import load_config

        config = load_config(root)
        preflight(config)
        return service.install(config, console.say, dry_run=args.dry_run)
    if args.service_command == "uninstall":
        return service.uninstall(root, console.say, dry_run=args.dry_run)
    if args.service_command == "status":
        return service.status(root)
    return service.logs(root, follow=args.follow, lines=args.lines)
