"""The registry of backends: which strategy runs a role's agents, decided here and nowhere else.

A role's ``backend`` names its backend; a ``command`` role whose program is known to a backend (``claude``) is
run by that backend (``codex`` likewise), so it is read the way its program writes. Everything above ``agents`` asks the backend
found here what it can do (``capabilities``, ``stall_seconds``), never its name. ``docs/backends.md`` says how to
add one.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.agents.backends.base import Answer, Backend, Program
from orchestrator.agents.backends.claude import ClaudeBackend
from orchestrator.agents.backends.codex import CodexBackend
from orchestrator.agents.backends.command import CommandBackend
from orchestrator.agents.backends.sdk import SdkBackend
from orchestrator.config import Config, Role, dry_run
from orchestrator.core.agent import Capabilities
from orchestrator.core.errors import ConfigError

__all__ = ["Answer", "Backend", "Program", "backend_for", "capabilities", "check", "register", "stall_seconds"]

_named: dict[str, Backend] = {}  # a role's ``backend`` -> its backend
_programs: dict[str, Backend] = {}  # a ``command`` role's program name -> the backend that knows it


def register(backend: Backend, *, named: bool = True, programs: tuple[str, ...] = ()) -> None:
    """Make ``backend`` the one a role's ``backend: <its name>`` selects (unless not ``named``), and the one that
    runs a ``command`` role whose program is named one of ``programs``. A later registration replaces one."""
    if named:
        _named[backend.name] = backend
    for program in programs:
        _programs[program] = backend


def unregister(backend: Backend) -> None:
    """Forget ``backend`` wherever it was registered (a test's toy backend, once its test is done)."""
    for table in (_named, _programs):
        for key in [k for k, v in table.items() if v is backend]:
            del table[key]


def backend_for(role: Role) -> Backend:
    """The backend that runs ``role``'s agents."""
    if role.backend == "command" and role.command:
        known = _programs.get(Path(role.command[0]).name)
        if known is not None:
            return known
    return _named[role.backend]


def capabilities(role: Role) -> Capabilities:
    """What ``role``'s agents can do."""
    return backend_for(role).capabilities(role)


def check(config: Config, role: Role) -> None:
    """The start-up checks of ``role`` (``up``, ``config check``, ``doctor``): its backend's, then that a daily budget
    of its own has a spend to count (not in a dry run, ``ORCHESTRATOR_SPAWN_CMD``, whose stand-in replaces the
    command the budget was written for)."""
    backend_for(role).check(config, role)
    caps = capabilities(role)
    if role.budget.per_day_usd and not (caps.cost or caps.tokens) and not dry_run():
        raise ConfigError(
            f"{config.path}: roles.{role.name}.budget.per_day_usd (its own, or from defaults): this role's agent "
            "reports no spend as its command runs it (a plain command, claude without --output-format stream-json, "
            "codex exec without --json), so nothing would count it against the budget; set it to off for this role "
            "(the team's budget.per_day_usd counts the roles whose spend is known)"
        )


def stall_seconds(role: Role) -> float | None:
    """How long an attempt may write nothing before it is stopped as stalled; None: never. The role's
    ``stall_timeout`` when it sets one (``off``: never), else its backend's default."""
    if role.stall_timeout is not None:
        return role.stall_timeout or None
    return backend_for(role).stall_default(role)


register(CommandBackend())
register(ClaudeBackend(), named=False, programs=("claude",))
register(SdkBackend())
register(CodexBackend(), programs=("codex",))
