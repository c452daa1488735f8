"""The team's configuration: ``roles.yaml`` validated by pydantic models.

Precedence is environment > file > default, each override in its own small
function. Unknown keys are errors; every error names the file, the key path and
what was expected. Nothing here exits: it raises ``ConfigError``.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

import yaml
from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, model_validator

from orchestrator.config.asks import AskKeys
from orchestrator.config.claude import ClaudeKeys
from orchestrator.config.codex import CODEX_COMMAND, DEFAULT_SANDBOX, CodexSettings, TokenPrice
from orchestrator.config.continuity import ContinuityKeys
from orchestrator.config.errors import describe_validation_error
from orchestrator.config.memory import MemorySettings
from orchestrator.config.notify import Channel
from orchestrator.config.ray import ExecutorSettings, RayKeys
from orchestrator.config.retention import RetentionSettings
from orchestrator.config.schedule import ScheduleKeys, check_team, check_timezone
from orchestrator.config.sdk import SdkSettings
from orchestrator.config.web import WebSettings
from orchestrator.config.workspace import WorkspaceKeys
from orchestrator.config.yaml_file import load_yaml
from orchestrator.core.errors import ConfigError
from orchestrator.core.grants import check_may
from orchestrator.core.run import Run
from orchestrator.core.units import (
    OFF,
    RATE_EXPECTED,
    Duration,
    Expect,
    Strict,
    is_off,
    parse_duration,
    parse_rate,
    partial,
)

CONFIG_NAME = "roles.yaml"
SPAWN_CMD_ENV = "ORCHESTRATOR_SPAWN_CMD"
ROLE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class RetryPolicy(Strict):
    """How often and after which pauses a failed run is tried again."""

    max: int = Field(3, ge=0)
    backoff: list[Duration] = Field(default_factory=lambda: [5.0, 15.0, 45.0], min_length=1)

    def delay(self, retry_number: int) -> float:
        """Pause before retry ``retry_number`` (1-based); the last value repeats."""
        return self.backoff[min(retry_number, len(self.backoff)) - 1]


class CrashPolicy(Strict):
    """For critical roles: this many failures, each within ``window`` of its start, end the orchestrator."""

    window: Duration = 30.0
    max: int = Field(3, ge=1)


class RoleBudget(Strict):
    per_run_usd: Annotated[float | None, OFF] = Field(None, gt=0)
    per_day_usd: Annotated[float | None, OFF] = Field(None, gt=0)


class TeamBudget(Strict):
    per_day_usd: Annotated[float | None, OFF] = Field(None, gt=0)


class Limits(Strict):
    """The loop breaker: a memo over a limit is held in ``memo/<role>/held/`` instead of run."""

    chain_depth: Annotated[int | None, OFF] = Field(40, ge=1)  # reply_to links above a memo; None: no limit
    pair_rate: Annotated[tuple[int, float] | None, BeforeValidator(parse_rate), Expect(RATE_EXPECTED), OFF] = (
        20,
        3600.0,
    )


class UsageLimits(Strict):
    """An account paused by a usage limit with no reset time tries one run after ``probe``, doubling to ``max_probe``."""

    probe: Duration = Field(300.0, gt=0)
    max_probe: Duration = Field(3600.0, gt=0)


STALL_EXPECTED = "a duration such as 10m or 90s, or off"


def parse_stall(value: Any) -> float | None:
    """A role's ``stall_timeout``: seconds, ``0.0`` for ``off`` (kept through the merge with the defaults, where
    null means unset), None when not given."""
    if value is None:
        return None
    if is_off(value):
        return 0.0
    return parse_duration(value)


Stall = Annotated[float | None, BeforeValidator(parse_stall), Expect(STALL_EXPECTED)]


class Role(SdkSettings, ClaudeKeys, CodexSettings, ScheduleKeys, ContinuityKeys, RayKeys, WorkspaceKeys, AskKeys):
    """One role with its defaults applied: what the supervisor works with. Every key but ``name`` may be written
    under a role or under ``defaults`` (``RoleSettings``, derived from this model). Its own keys are the core's;
    each feature's come from its key group: the claude-agent-sdk backend's (``model``, ``system_prompt``, ...)
    from ``SdkSettings``, the Claude CLI's from ``ClaudeKeys``, the Codex CLI's (``sandbox``, ``config``,
    ``profile``) from ``CodexSettings``, the schedule's (``wake``, ``tasks``, ...) from ``ScheduleKeys``,
    continuity's from ``ContinuityKeys``, the Ray executor's from ``RayKeys``, the workspaces' (``workspace``)
    from ``WorkspaceKeys``, asking a person's (``approve``, ``ask_timeout``, ``on_timeout``) from ``AskKeys``."""

    name: str
    prompt: str
    command: list[str] = Field(default_factory=lambda: ["claude", "-p"], min_length=1)
    prompt_via: Literal["stdin", "arg"] = "stdin"
    timeout: Duration = Field(1800.0, gt=0)  # 0 would stop every run as it starts
    grace: Duration = 10.0
    retry: RetryPolicy = Field(default_factory=RetryPolicy)  # retry, crash, env, budget: merged key by key
    crash: CrashPolicy = Field(default_factory=CrashPolicy)
    batch: bool = False
    batch_max: int = Field(100, ge=1)  # a batch run takes at most this many memos, oldest first
    critical: bool = False
    max_concurrent: int | None = Field(None, ge=1)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str = "."
    retry_timeouts: bool = False
    stop_on_failure: bool = False
    backend: Literal["command", "sdk", "codex"] = "command"
    # the credentials it runs on: a usage limit pauses every role on the same account
    account: str = Field("team", min_length=1)
    budget: RoleBudget = Field(default_factory=RoleBudget)
    retry_resumes: bool = False
    stall_timeout: Stall = None  # no output for this long stops the attempt; None: the default, 0.0: off
    # what its agents may do beyond (or short of) an agent's authority (orchestrator/control/authority)
    may: Annotated[list[str], AfterValidator(check_may)] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _codex_command(cls, data: Any) -> Any:
        """A ``codex`` role that names no command runs ``codex exec --json`` (not the default ``claude -p``)."""
        if isinstance(data, dict) and data.get("backend") == "codex" and "command" not in data:
            return {**data, "command": list(CODEX_COMMAND), "sandbox": data.get("sandbox") or DEFAULT_SANDBOX}
        return data

    @property
    def limit(self) -> int:
        """How many runs of this role may be running at once."""
        return 1 if self.batch else (self.max_concurrent or 1_000_000)


# a run of the supervisor and its features: its role a whole ``Role`` (core knows only ``RoleLike``)
RoleRun: TypeAlias = Run[Role]

_MERGED_ONE_LEVEL = ("retry", "crash", "env", "budget", "workspace")

if TYPE_CHECKING:

    class RoleSettings(Strict):
        """What the type checker sees; at run time the model is made from ``Role`` by ``partial`` below."""

else:
    RoleSettings = partial(
        Role,
        "RoleSettings",
        "Every key a role may set; the same keys may sit under ``defaults``.",
        omit=("name",),
        by_key=_MERGED_ONE_LEVEL,
    )


class Team(Strict):
    """The team-wide keys of ``roles.yaml``: read by ``TeamFile`` and kept as they are by ``Config``."""

    max_concurrent: int = Field(10, ge=1)
    notify: str | None = None
    rescan_interval: Duration = Field(5.0, gt=0)
    max_memo_bytes: int = Field(1024 * 1024, ge=1)
    # at a restart: adopt live agents and read exit records, or stop and requeue
    recovery: Literal["adopt", "restart"] = "adopt"
    budget: TeamBudget = Field(default_factory=TeamBudget)
    timezone: Annotated[str | None, AfterValidator(check_timezone)] = None
    memory: MemorySettings = Field(default_factory=MemorySettings)
    limits: Limits = Field(default_factory=Limits)
    usage_limits: UsageLimits = Field(default_factory=UsageLimits)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    web: WebSettings | None = None  # the dashboard (orchestrator/web); None: off
    notifications: list[Channel] = Field(
        default_factory=list
    )  # who is told of a failure, a question (orchestrator/notify)
    prices: dict[str, TokenPrice] = Field(default_factory=dict)  # a model's token prices, for estimated costs


class TeamFile(Team):
    """The top level of ``roles.yaml``."""

    defaults: RoleSettings = Field(default_factory=RoleSettings)
    roles: dict[str, RoleSettings] = Field(min_length=1)


class Config(Team):
    """The whole validated configuration of one project root: the team's keys, and every role with its
    defaults applied."""

    root: Path
    path: Path
    roles: dict[str, Role]

    def role_dir(self, role: str) -> Path:
        return self.root / "memo" / role

    @property
    def state_dir(self) -> Path:
        return self.root / ".orchestrator"


def _merge(defaults: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """A role's keys over the defaults; small mappings merge key by key."""
    merged = {**defaults, **own}
    for key in _MERGED_ONE_LEVEL:
        if isinstance(defaults.get(key), dict) and isinstance(own.get(key), dict):
            merged[key] = {**defaults[key], **own[key]}
    return merged


def _another_agents(defaults: dict[str, Any]) -> bool:
    """Whether the ``defaults``' command is another agent's than Codex's: written for another backend (``defaults``
    do not say ``backend: codex``), and not starting a program named ``codex``."""
    command = defaults.get("command")
    if not isinstance(command, list) or not command or defaults.get("backend") == "codex":
        return False
    return Path(str(command[0])).name != "codex"


def dry_run() -> bool:
    """Whether ``ORCHESTRATOR_SPAWN_CMD`` replaces every role's command (a dry run): the checks of what a role's own
    command would do (its hook, its spend) are not made for the stand-in."""
    return bool(os.environ.get(SPAWN_CMD_ENV, "").strip())


def _spawn_command_override() -> list[str] | None:
    """``ORCHESTRATOR_SPAWN_CMD`` replaces every role's command (for dry runs)."""
    if not dry_run():
        return None
    raw = os.environ[SPAWN_CMD_ENV]
    try:
        argv = shlex.split(raw)
    except ValueError as exc:
        raise ConfigError(f"{SPAWN_CMD_ENV}: cannot split {raw!r} like a shell would: {exc}") from None
    return argv


def load_config(root: Path) -> Config:
    """Read and validate ``<root>/roles.yaml``; raise ``ConfigError`` naming what is wrong."""
    root = root.resolve()
    path = root / CONFIG_NAME
    try:
        raw, twice = load_yaml(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found; create one with `orchestrator init {root}`") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        raise ConfigError(f"{path}: not valid YAML{at}: {getattr(exc, 'problem', exc)}") from None
    if twice is not None:
        raise ConfigError(f"{path}: {twice}")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with a `roles` key at the top level")
    if isinstance(raw.get("memory"), dict) and "keeper" in raw["memory"]:
        raise ConfigError(
            f"{path}: memory.keeper: renamed to memory.curator (a keeper is the process that watches an agent)"
        )
    try:
        team = TeamFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(path, exc, TeamFile, raw)) from None

    override = _spawn_command_override()
    defaults = team.defaults.model_dump(exclude_none=True)
    roles: dict[str, Role] = {}
    for name, settings in team.roles.items():
        if not ROLE_NAME.match(name):
            raise ConfigError(
                f"{path}: roles.{name}: a role name must start with a letter or digit and hold only letters, "
                "digits, '.', '_' and '-' (it names a folder)"
            )
        own = settings.model_dump(exclude_none=True)
        merged = _merge(defaults, own)
        if merged.get("backend") == "codex" and "command" not in own and _another_agents(defaults):
            merged.pop("command", None)  # the team's default is another agent's (`claude -p`): it runs `codex exec`
        merged.setdefault("prompt", f"prompts/{name}.md")
        if override is not None:
            merged["command"] = override
        given = {"name": name, **merged}
        try:
            roles[name] = Role.model_validate(given)
            roles[name].take_prices(team.prices)
        except ValidationError as exc:
            raise ConfigError(describe_validation_error(path, exc, Role, given, ("roles", name))) from None
    if team.notify is not None and team.notify not in roles:
        raise ConfigError(
            f"{path}: notify: names {team.notify!r}, which is not a role under `roles` ({', '.join(roles)})"
        )
    problem = check_team(path, root, roles)
    if problem:
        raise ConfigError(problem)
    if team.memory.curator is not None and team.memory.curator not in roles:
        raise ConfigError(
            f"{path}: memory.curator: names {team.memory.curator!r}, which is not a role under `roles` ({', '.join(roles)})"
        )
    ray = team.executor.kind == "ray"
    for name, role in roles.items():
        if ray and role.workspace.isolated:
            raise ConfigError(
                f"{path}: roles.{name}.workspace.mode: worktree is not yet supported with `executor: ray` (the "
                "worktree is on this machine); use mode: shared, or the local executor"
            )
    team_keys = {key: getattr(team, key) for key in Team.model_fields}
    return Config.model_validate({**team_keys, "root": root, "path": path, "roles": roles})
