"""``orchestrator doctor``: everything the first memo would find wrong with a set-up, found before it.

One ``Finding`` a check (``ok``, ``warn`` or ``fail``, with what to do): per role (``roles``) the command on
every PATH that starts it and Claude Code's version, its login, its memo folders, its prompt and context
files; for the team (``team``) the keeper, inotify's limits, the disk, the state folder, the database and the
clock. ``diagnose`` makes them all; ``start_checks`` makes the cheap ones, which start no program, for
``up``: a failure stops it with one line, a warning is printed once. What the checks read of the machine
comes through ``Host``, the one seam the tests replace.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.config import Config, load_config
from orchestrator.core.errors import ConfigError
from orchestrator.ops.doctor import team
from orchestrator.ops.doctor.findings import Finding, exit_status, from_message, ok, summary
from orchestrator.ops.doctor.host import Host
from orchestrator.ops.doctor.roles import Checkup, agent_paths, check_folders, check_role
from orchestrator.ops.doctor.workspaces import check_workspaces

__all__ = ["Finding", "Host", "diagnose", "exit_status", "start_checks", "summary"]


def diagnose(root: Path, host: Host | None = None) -> list[Finding]:
    """Every check of the project at ``root``; a configuration that does not load is one failure, and the
    checks that need only the root are still made."""
    host = host or Host()
    try:
        config = load_config(root)
    except ConfigError as exc:
        state = root.resolve() / ".orchestrator"
        return [
            from_message("config", str(exc), "fix it in roles.yaml (`orchestrator config check` says the same)"),
            team.check_disk(root.resolve(), host),
            team.check_state(state),
            team.check_database(state),
        ]
    checkup = Checkup(config, host, agent_paths(config, host))
    count = f"{len(config.roles)} role" + ("s" if len(config.roles) != 1 else "")
    found = [ok("config", f"{config.path}: {count} ({', '.join(config.roles)})")]
    for role in config.roles.values():
        found += check_role(checkup, role)
    return [
        *found,
        team.check_keeper(config),
        *team.check_ray_token(config),
        team.check_inotify(config, host),
        team.check_disk(config.root, host),
        team.check_state(config.state_dir),
        team.check_database(config.state_dir),
        team.check_clock(config, host),
        team.check_accounts(config),
        *team.check_notifications(config),
        *check_workspaces(config),
    ]


def start_checks(config: Config, host: Host | None = None) -> list[Finding]:
    """The checks ``up`` makes at start, none of which starts a program: the memo folders, the state folder,
    inotify's limits, the disk and the keeper. Raises ``ConfigError`` with the first failure's line; returns
    the warnings, for ``up`` to print once."""
    host = host or Host()
    probed: set[int] = set()
    found = [check_folders(config, role, probed) for role in config.roles.values()]
    found += [
        team.check_state(config.state_dir),
        team.check_inotify(config, host),
        team.check_disk(config.root, host),
        team.check_keeper(config),
        *team.check_ray_token(config),
    ]
    for finding in found:
        if finding.status == "fail":
            raise ConfigError(f"{finding.text} (`orchestrator doctor` checks the rest)")
    return [finding for finding in found if finding.status == "warn"]
