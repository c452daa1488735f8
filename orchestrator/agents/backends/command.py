"""The ``command`` backend: any program, given the prompt on its standard input or as its last argument.

It can do nothing but run: its exit status is its verdict, it has no session to tell or interrupt, reports no
figures, and may rightly be silent until it ends (no stall timeout unless the role sets one).
"""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.agents import procs
from orchestrator.agents.backends.base import Program
from orchestrator.agents.command import adopt_command, recorded_command, start_command
from orchestrator.agents.handle import Agent, OnExit
from orchestrator.agents.spec import LaunchSpec, resolve_command, role_folder
from orchestrator.config import Config, Role, dry_run
from orchestrator.core.agent import Capabilities
from orchestrator.core.errors import ConfigError

NOTHING_BUT_RUN = Capabilities()


def check_program(config: Config, role: Role) -> None:
    """The role's program can be found from its folder: a ``ConfigError`` naming ``roles.<name>.command`` if not."""
    if resolve_command(role.command, role_folder(config.root, role.cwd)) is None:
        where = "is not an executable file" if os.sep in role.command[0] else "not found on PATH"
        raise ConfigError(
            f"{config.path}: roles.{role.name}.command: {role.command[0]!r} {where}; install it, "
            "fix the role's `command`, or set ORCHESTRATOR_SPAWN_CMD for a dry run"
        )


def check_no_run_budget(config: Config, role: Role) -> None:
    """A plain command reports no spend, so nothing could stop a run at a per-run budget (fail closed). Not in a dry
    run (``ORCHESTRATOR_SPAWN_CMD``), whose stand-in replaces the command the budget was written for. A daily budget
    is the registry's to check (``backends.check``), for every backend that reports no spend."""
    if role.budget.per_run_usd and not dry_run():
        raise ConfigError(
            f"{config.path}: roles.{role.name}.budget.per_run_usd (its own, or from defaults): a plain command "
            "reports no spend, so nothing could stop a run at it; set it to off for this role"
        )


class CommandBackend:
    """Any program: started, adopted and read by its exit status alone."""

    name = "command"

    def capabilities(self, role: Role) -> Capabilities:
        return NOTHING_BUT_RUN

    def stall_default(self, role: Role) -> float | None:
        return None

    def check(self, config: Config, role: Role) -> None:
        check_program(config, role)
        check_no_run_budget(config, role)

    def program(self, config: Config, role: Role) -> Program:
        return Program("command", role.command[0], verdict="not Claude Code: its exit status is the verdict")

    async def start(self, spec: LaunchSpec, on_exit: OnExit, keeper: Path | None) -> Agent:
        return await start_command(spec, on_exit, keeper, capabilities=NOTHING_BUT_RUN)

    def adopt(self, spec: LaunchSpec, ref: procs.ProcRef, keeper_pid: int | None) -> Agent:
        return adopt_command(spec, ref, keeper_pid, capabilities=NOTHING_BUT_RUN)

    def recorded(self, spec: LaunchSpec, pid: int | None) -> Agent:
        return recorded_command(spec, capabilities=NOTHING_BUT_RUN)
