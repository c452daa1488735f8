"""The ``claude`` backend: a ``command`` role whose program is the Claude Code CLI (``claude -p``).

It is the command backend with Claude's reading: its caps as arguments (``--max-turns``, ``--max-budget-usd``), its
output read at its end (``claude_cli.ClaudeOutput``: with ``--output-format stream-json`` its events give its
figures, session and judgement; else its last line explains a failure), and its checks (``--version``, no bypass
as root, and for ``doctor`` its login). The login check serves the ``sdk`` backend too, which runs the same CLI.

The login is asked of the CLI itself: ``claude auth status --json`` reads the local credentials (a JSON object
with ``loggedIn``, exit 1 when it is false; logged out or with an API key it connects nowhere, with a claude.ai
login it looks the account up). Non-essential traffic is off for it. The ``--json`` also keeps a CLI too old to
have ``auth`` from taking the words for a prompt: it refuses the unknown option. Whatever else it answers, or
silence past ``AUTH_SECONDS``, is a ``warn``: the doctor cannot tell.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
from pathlib import Path

from orchestrator.agents import claude_cli, procs
from orchestrator.agents.backends.base import Answer, Program
from orchestrator.agents.backends.command import check_program
from orchestrator.agents.claude_cli import STALL_DEFAULT, ClaudeOutput, cap_arguments, streams_json
from orchestrator.agents.claude_errors import one_line
from orchestrator.agents.command import adopt_command, recorded_command, start_command
from orchestrator.agents.handle import Agent, OnExit
from orchestrator.agents.spec import LaunchSpec, transcript_path
from orchestrator.config import Config, Role
from orchestrator.core.agent import Capabilities

AUTH_SECONDS = 10.0
QUIET_CLI = {"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
STREAMING = Capabilities(session=True, cost=True, tokens=True, usage_limits=True, defers=True)  # stream-json
TEXT = Capabilities(usage_limits=True)  # its last line names a usage limit; it reports no figures


def reading(spec: LaunchSpec, offset: int) -> ClaudeOutput:
    """The reader of one attempt's output in the run's log from ``offset``; stream-json events are copied into
    the run's transcript."""
    transcript = transcript_path(spec) if streams_json(spec.role) else None
    return ClaudeOutput(spec.log_path, offset, transcript, spec.role.on_denied)


class ClaudeBackend:
    """The Claude Code CLI as a ``command`` role's program."""

    name = "claude"

    def capabilities(self, role: Role) -> Capabilities:
        return STREAMING if streams_json(role) else TEXT

    def stall_default(self, role: Role) -> float | None:
        return STALL_DEFAULT if streams_json(role) else None  # stream-json writes an event at every step

    def check(self, config: Config, role: Role) -> None:
        check_program(config, role)
        claude_cli.check_role(config, role)

    def program(self, config: Config, role: Role) -> Program:
        return Program("command", role.command[0], version=claude_cli.check_version, login=login)

    async def start(self, spec: LaunchSpec, on_exit: OnExit, keeper: Path | None) -> Agent:
        role = spec.role
        arguments = cap_arguments(role, role.budget.per_run_usd)
        caps = self.capabilities(role)
        return await start_command(spec, on_exit, keeper, capabilities=caps, arguments=arguments, reading=reading)

    def adopt(self, spec: LaunchSpec, ref: procs.ProcRef, keeper_pid: int | None) -> Agent:
        return adopt_command(spec, ref, keeper_pid, capabilities=self.capabilities(spec.role), reading=reading)

    def recorded(self, spec: LaunchSpec, pid: int | None) -> Agent:
        return recorded_command(spec, capabilities=self.capabilities(spec.role), reading=reading)


def login(cli: str, env: dict[str, str]) -> Answer:
    """The CLI has credentials: an API key in its environment, or what ``auth status`` says."""
    if env.get("ANTHROPIC_API_KEY"):
        return Answer("ok", "ANTHROPIC_API_KEY is set: the CLI uses it (auth status not asked)")
    return auth_status(cli, env)


def auth_status(cli: str, env: dict[str, str]) -> Answer:
    """What ``<cli> auth status --json`` says of the login."""
    asked = f"`{shlex.quote(cli)} auth status`"
    login_fix = (
        f"run `{shlex.quote(cli)} auth login` as the user the orchestrator runs as, or set ANTHROPIC_API_KEY "
        "in the role's `env` or the orchestrator's environment"
    )
    cannot_tell = f"run {asked} yourself (a CLI older than `claude auth` cannot answer it)"
    try:
        done = subprocess.run(
            [cli, "auth", "status", "--json"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=AUTH_SECONDS,
            stdin=subprocess.DEVNULL,
            env={**env, **QUIET_CLI},
        )
    except subprocess.TimeoutExpired:
        return Answer("warn", f"cannot tell: {asked} did not answer within {AUTH_SECONDS:g}s", cannot_tell)
    except OSError as exc:
        return Answer("warn", f"cannot tell: {asked} cannot run ({exc.strerror or exc})", cannot_tell)
    answer: object = None
    with contextlib.suppress(ValueError):
        answer = json.loads(done.stdout)
    if not isinstance(answer, dict) or not isinstance(answer.get("loggedIn"), bool):
        said = one_line(done.stdout.strip() or done.stderr.strip() or "nothing", 160)
        return Answer("warn", f"cannot tell: {asked} exited {done.returncode} and said {said}", cannot_tell)
    method = answer.get("authMethod")
    if answer["loggedIn"]:
        plan = answer.get("subscriptionType")
        how = ", ".join(str(part) for part in (method, plan) if part)
        return Answer("ok", "logged in" + (f" ({how})" if how else ""))
    provider = answer.get("apiProvider")
    if provider not in (None, "firstParty"):
        return Answer(
            "warn",
            f"the CLI uses {provider}, whose credentials {asked} does not check",
            "make sure they are in the orchestrator's environment (try one `claude -p` by hand)",
        )
    return Answer("fail", f"not logged in ({asked} says loggedIn: false)", login_fix)
