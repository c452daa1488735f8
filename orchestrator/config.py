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
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from orchestrator.agents.ray.settings import ExecutorSettings, RoleResources
from orchestrator.config_errors import describe_validation_error
from orchestrator.control.authority import check_may
from orchestrator.core.errors import ConfigError
from orchestrator.core.values import OFF, UNITS, Duration, Expect, Shaped, is_off
from orchestrator.core.values import parse_duration as parse_duration  # the one parser; callers import it from here
from orchestrator.memory.settings import MemorySettings
from orchestrator.retention.settings import RetentionSettings
from orchestrator.schedule.settings import SignalSettings, TaskSettings, WakeSettings, check_team, check_timezone
from orchestrator.web.settings import WebSettings

CONFIG_NAME = "roles.yaml"
SPAWN_CMD_ENV = "ORCHESTRATOR_SPAWN_CMD"
ROLE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RetryPolicy(_Strict):
    """How often and after which pauses a failed run is tried again."""

    max: int = Field(3, ge=0)
    backoff: list[Duration] = Field(default_factory=lambda: [5.0, 15.0, 45.0], min_length=1)

    def delay(self, retry_number: int) -> float:
        """Pause before retry ``retry_number`` (1-based); the last value repeats."""
        return self.backoff[min(retry_number, len(self.backoff)) - 1]


class CrashPolicy(_Strict):
    """For critical roles: this many failures, each within ``window`` of its start, end the orchestrator."""

    window: Duration = 30.0
    max: int = Field(3, ge=1)


class RoleBudget(_Strict):
    per_run_usd: Annotated[float | None, OFF] = Field(None, gt=0)
    per_day_usd: Annotated[float | None, OFF] = Field(None, gt=0)


class Prices(_Strict):
    """Dollars per million tokens, for the live budget fuse's estimate."""

    input: float = Field(gt=0)
    output: float = Field(gt=0)


class TeamBudget(_Strict):
    per_day_usd: Annotated[float | None, OFF] = Field(None, gt=0)


_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*(ms|s|m|h|d)\s*$")
RATE_EXPECTED = "a rate such as 20/h or 5/30m (memos per window)"


def parse_rate(value: Any) -> tuple[int, float]:
    """``20/h`` or ``5/30m`` as (count, window in seconds)."""
    if isinstance(value, str):
        match = _RATE.match(value)
        if match and int(match.group(1)) >= 1:
            window = float(match.group(2) or 1) * UNITS[match.group(3)]
            if window > 0:
                return int(match.group(1)), window
    raise ValueError(f"expected {RATE_EXPECTED}, or off, got {value!r}")


class Limits(_Strict):
    """The loop breaker: a memo over a limit is held in ``memo/<role>/held/`` instead of run."""

    chain_depth: Annotated[int | None, OFF] = Field(40, ge=1)  # reply_to links above a memo; None: no limit
    pair_rate: Annotated[tuple[int, float] | None, BeforeValidator(parse_rate), Expect(RATE_EXPECTED), OFF] = (
        20,
        3600.0,
    )


class UsageLimits(_Strict):
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


class SystemPromptPreset(_Strict):
    preset: Literal["claude_code"] = "claude_code"
    append: str | None = None


class RoleSettings(_Strict):
    """Every key a role may set; the same keys may sit under ``defaults``."""

    prompt: str | None = None
    command: list[str] | None = Field(None, min_length=1)
    prompt_via: Literal["stdin", "arg"] | None = None
    timeout: Duration | None = None
    grace: Duration | None = None
    # checked where written, merged with the defaults key by key later
    retry: Annotated[dict[str, Any] | None, Shaped(RetryPolicy)] = None
    crash: Annotated[dict[str, Any] | None, Shaped(CrashPolicy)] = None
    batch: bool | None = None
    batch_max: int | None = Field(None, ge=1)
    critical: bool | None = None
    max_concurrent: int | None = Field(None, ge=1)
    env: dict[str, str] | None = None
    cwd: str | None = None
    retry_timeouts: bool | None = None
    stop_on_failure: bool | None = None
    backend: Literal["command", "sdk"] | None = None
    account: str | None = Field(None, min_length=1)  # roles on one account share its usage limits
    # claude-agent-sdk backend
    model: str | None = None
    system_prompt: str | SystemPromptPreset | None = None
    permission_mode: Literal["default", "acceptEdits", "plan", "bypassPermissions"] | None = None
    allowed_tools: list[str] | None = None
    disallowed_tools: list[str] | None = None
    max_turns: int | None = Field(None, ge=1)
    max_budget_usd: float | None = Field(None, gt=0)
    setting_sources: list[Literal["user", "project", "local"]] | None = None
    cli_path: str | None = None
    add_dirs: list[str] | None = None
    budget: Annotated[dict[str, Any] | None, Shaped(RoleBudget)] = None
    retry_resumes: bool | None = None
    # wakes on a schedule (orchestrator/schedule)
    wake: WakeSettings | None = None
    tasks: dict[str, TaskSettings] | None = None
    signals: dict[str, SignalSettings] | None = None
    preflight: list[Annotated[list[str], Field(min_length=1)]] | None = None
    preflight_reuse: Duration | None = None
    # continuity (orchestrator/continuity)
    context: list[str] | None = None
    context_max_bytes: int | None = Field(None, ge=1)
    journal_in_prompt: int | None = Field(None, ge=0)
    handoff_max_bytes: int | None = Field(None, ge=1)
    api_retries: int | None = Field(None, ge=0, le=20)
    price_per_mtok: Prices | None = None
    # the Claude CLI's own behaviour (orchestrator/agents/claude_cli)
    background_tasks: bool | None = None
    stall_timeout: Stall = None
    on_denied: Literal["fail", "warn"] | None = None
    # where a run executes (orchestrator/agents/ray): what it needs on a Ray node
    resources: RoleResources | None = None
    # what its agents may do beyond (or short of) an agent's authority (orchestrator/control/authority)
    may: Annotated[list[str], AfterValidator(check_may)] | None = None


class Role(_Strict):
    """One role with its defaults applied: what the supervisor works with."""

    name: str
    prompt: str
    command: list[str] = Field(default_factory=lambda: ["claude", "-p"], min_length=1)
    prompt_via: Literal["stdin", "arg"] = "stdin"
    timeout: Duration = 1800.0
    grace: Duration = 10.0
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    crash: CrashPolicy = Field(default_factory=CrashPolicy)
    batch: bool = False
    batch_max: int = Field(100, ge=1)  # a batch run takes at most this many memos, oldest first
    critical: bool = False
    max_concurrent: int | None = Field(None, ge=1)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str = "."
    retry_timeouts: bool = False
    stop_on_failure: bool = False
    backend: Literal["command", "sdk"] = "command"
    account: str = "team"  # the credentials it runs on: a usage limit pauses every role on the same account
    model: str | None = None
    system_prompt: str | SystemPromptPreset = Field(default_factory=SystemPromptPreset)
    permission_mode: Literal["default", "acceptEdits", "plan", "bypassPermissions"] | None = None
    allowed_tools: list[str] = Field(default_factory=list)
    disallowed_tools: list[str] = Field(default_factory=list)
    max_turns: int | None = None
    max_budget_usd: float | None = None
    setting_sources: list[Literal["user", "project", "local"]] | None = None
    cli_path: str | None = None
    add_dirs: list[str] = Field(default_factory=list)
    budget: RoleBudget = Field(default_factory=RoleBudget)
    retry_resumes: bool = False
    wake: WakeSettings | None = None
    tasks: dict[str, TaskSettings] = Field(default_factory=dict)
    signals: dict[str, SignalSettings] = Field(default_factory=dict)
    preflight: list[list[str]] = Field(default_factory=list)
    preflight_reuse: Duration = 60.0  # a passed preflight is not run again before a run for this long
    context: list[str] = Field(default_factory=list)
    context_max_bytes: int = Field(64 * 1024, ge=1)
    journal_in_prompt: int = Field(5, ge=0)
    handoff_max_bytes: int = Field(20 * 1024, ge=1)
    api_retries: int = Field(2, ge=0, le=20)  # the Claude CLI's own retries of an API error (CLAUDE_CODE_MAX_RETRIES)
    price_per_mtok: Prices | None = None  # overrides the fuse's price table
    background_tasks: bool = False  # Claude roles: the CLI may start background tasks (killed at the end of a -p run)
    stall_timeout: Stall = None  # no output for this long stops the attempt; None: the default, 0.0: off
    on_denied: Literal["fail", "warn"] = "fail"  # Claude's result lists tool calls the permissions refused
    resources: RoleResources = Field(default_factory=RoleResources)
    may: list[str] = Field(default_factory=list)

    @property
    def limit(self) -> int:
        """How many runs of this role may be running at once."""
        return 1 if self.batch else (self.max_concurrent or 1_000_000)


class TeamFile(_Strict):
    """The top level of ``roles.yaml``."""

    max_concurrent: int = Field(10, ge=1)
    notify: str | None = None
    rescan_interval: Duration = 5.0
    max_memo_bytes: int = Field(1024 * 1024, ge=1)
    recovery: Literal["adopt", "restart"] = "adopt"
    budget: TeamBudget = Field(default_factory=TeamBudget)
    timezone: Annotated[str | None, AfterValidator(check_timezone)] = None
    memory: MemorySettings = Field(default_factory=MemorySettings)
    limits: Limits = Field(default_factory=Limits)
    usage_limits: UsageLimits = Field(default_factory=UsageLimits)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    web: WebSettings | None = None  # the dashboard (orchestrator/web); None: off
    defaults: RoleSettings = Field(default_factory=RoleSettings)
    roles: dict[str, RoleSettings] = Field(min_length=1)


class Config(_Strict):
    """The whole validated configuration of one project root."""

    root: Path
    path: Path
    max_concurrent: int
    notify: str | None
    rescan_interval: float
    max_memo_bytes: int
    budget: TeamBudget
    roles: dict[str, Role]
    timezone: str | None = None
    memory: MemorySettings = Field(default_factory=MemorySettings)
    limits: Limits = Field(default_factory=Limits)
    recovery: str = "adopt"  # at a restart: adopt live agents and read exit records, or stop and requeue
    usage_limits: UsageLimits = Field(default_factory=UsageLimits)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    web: WebSettings | None = None

    def role_dir(self, role: str) -> Path:
        return self.root / "memo" / role

    @property
    def state_dir(self) -> Path:
        return self.root / ".orchestrator"


_MERGED_ONE_LEVEL = ("retry", "crash", "env", "budget")


def _merge(defaults: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """A role's keys over the defaults; small mappings merge key by key."""
    merged = {**defaults, **own}
    for key in _MERGED_ONE_LEVEL:
        if isinstance(defaults.get(key), dict) and isinstance(own.get(key), dict):
            merged[key] = {**defaults[key], **own[key]}
    return merged


def _spawn_command_override() -> list[str] | None:
    """``ORCHESTRATOR_SPAWN_CMD`` replaces every role's command (for dry runs)."""
    raw = os.environ.get(SPAWN_CMD_ENV)
    if raw is None or not raw.strip():
        return None
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
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: not found; create one with `orchestrator init {root}`") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        raise ConfigError(f"{path}: not valid YAML{at}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with a `roles` key at the top level")
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
        merged = _merge(defaults, settings.model_dump(exclude_none=True))
        merged.setdefault("prompt", f"prompts/{name}.md")
        if override is not None:
            merged["command"] = override
        given = {"name": name, **merged}
        try:
            roles[name] = Role.model_validate(given)
        except ValidationError as exc:
            raise ConfigError(describe_validation_error(path, exc, Role, given, ("roles", name))) from None
    if team.notify is not None and team.notify not in roles:
        raise ConfigError(
            f"{path}: notify: names {team.notify!r}, which is not a role under `roles` ({', '.join(roles)})"
        )
    problem = check_team(path, root, roles)
    if problem:
        raise ConfigError(problem)
    if team.memory.keeper is not None and team.memory.keeper not in roles:
        raise ConfigError(
            f"{path}: memory.keeper: names {team.memory.keeper!r}, which is not a role under `roles` ({', '.join(roles)})"
        )
    return Config(
        root=root,
        path=path,
        max_concurrent=team.max_concurrent,
        notify=team.notify,
        rescan_interval=team.rescan_interval,
        max_memo_bytes=team.max_memo_bytes,
        budget=team.budget,
        roles=roles,
        timezone=team.timezone,
        memory=team.memory,
        limits=team.limits,
        usage_limits=team.usage_limits,
        recovery=team.recovery,
        executor=team.executor,
        retention=team.retention,
        web=team.web,
    )
