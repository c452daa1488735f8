"""The ``sdk`` backend: a Claude session through claude-agent-sdk, in a runner process (``agents/sdk/``).

It can do all the core asks of an agent: a session to resume, tell and interrupt, its cost and tokens, usage
limits, and its messages in the run's transcript. The SDK's own modules are imported only when an ``sdk`` role
starts or is taken back: about 15 ms of every start-up otherwise.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.agents import claude_cli, procs
from orchestrator.agents.backends.base import Program
from orchestrator.agents.backends.claude import login
from orchestrator.agents.claude_cli import STALL_DEFAULT
from orchestrator.agents.handle import Agent, OnExit
from orchestrator.agents.spec import LaunchSpec
from orchestrator.config import Config, Role
from orchestrator.core.agent import Capabilities

SESSION = Capabilities(session=True, resume=True, tell=True, interrupt=True, cost=True, tokens=True, usage_limits=True)


class SdkBackend:
    """A claude-agent-sdk session, run by ``agents/sdk/runner`` under its keeper and followed on its socket."""

    name = "sdk"

    def capabilities(self, role: Role) -> Capabilities:
        return SESSION

    def stall_default(self, role: Role) -> float | None:
        return STALL_DEFAULT  # its runner reports an event at every step

    def check(self, config: Config, role: Role) -> None:
        claude_cli.check_role(config, role)

    def program(self, config: Config, role: Role) -> Program:
        cli = claude_cli.sdk_cli_path(role, config.root)
        found_by = "cli_path" if role.cli_path else "the sdk's own choice"
        return Program("cli_path", "the sdk's CLI", False, cli, found_by, version=claude_cli.check_version, login=login)

    async def start(self, spec: LaunchSpec, on_exit: OnExit, keeper: Path | None) -> Agent:
        from orchestrator.agents.sdk.backend import start_sdk

        return await start_sdk(spec, on_exit, keeper, capabilities=SESSION)

    def adopt(self, spec: LaunchSpec, ref: procs.ProcRef, keeper_pid: int | None) -> Agent:
        from orchestrator.agents.sdk.backend import adopt_sdk

        return adopt_sdk(spec, ref, keeper_pid, capabilities=SESSION)

    def recorded(self, spec: LaunchSpec, pid: int | None) -> Agent:
        from orchestrator.agents.sdk.backend import recorded_sdk

        return recorded_sdk(spec, pid, capabilities=SESSION)
