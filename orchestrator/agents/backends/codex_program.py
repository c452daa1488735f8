"""The Codex CLI a role would run, asked at start (``up``, ``doctor``): that it is Codex, new enough, and has
credentials: the key of the model provider the role or Codex's own ``config.toml`` selects, an API key, or a login.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass

from orchestrator.agents.backends.base import Answer
from orchestrator.agents.backends.codex_rollout import codex_home
from orchestrator.agents.claude_errors import one_line
from orchestrator.core.errors import ConfigError

MIN_VERSION = (0, 169, 0)  # the oldest version its reading is tested with
ASK_SECONDS = 20.0
KEYS = ("OPENAI_API_KEY", "CODEX_API_KEY")
_VERSION = re.compile(r"codex-cli (\d+)\.(\d+)\.(\d+)")
_checked: dict[str, str] = {}


def check_version(path: str, where: str) -> str:
    """The CLI's ``--version`` line; ``ConfigError`` (naming ``where``) when it is not Codex or is too old."""
    if path in _checked:
        return _checked[path]
    fix = f"install @openai/codex {'.'.join(map(str, MIN_VERSION))} or later (npm install -g @openai/codex)"
    try:
        done = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=ASK_SECONDS, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{where}: {path} did not answer --version within {ASK_SECONDS:g}s; {fix}") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot run {path} --version ({exc.strerror or exc}); {fix}") from None
    found = _VERSION.search(done.stdout or "")
    if done.returncode != 0 or found is None:
        said = one_line((done.stdout or done.stderr or "nothing").strip(), 120)
        raise ConfigError(f"{where}: {path} does not answer --version like the Codex CLI (said {said}); {fix}")
    version = tuple(int(n) for n in found.groups())
    if version < MIN_VERSION:
        raise ConfigError(f"{where}: {path} is Codex {found.group(0)}, too old; {fix}")
    _checked[path] = found.group(0)
    return _checked[path]


@dataclass(frozen=True)
class Choice:
    """What a role picks over Codex's own ``config.toml``: a model provider (``-c model_provider=...``), a profile."""

    provider: str | None = None
    profile: str | None = None


def configured_provider(env: dict[str, str], choice: Choice = Choice()) -> tuple[str, str | None, str] | None:
    """The model provider other than OpenAI's that the agent will use, as Codex's own ``config.toml`` (in
    ``CODEX_HOME``, else ``~/.codex``) defines it: the role's choice, else its profile's, else the file's own. Its
    name, the variable its ``env_key`` names (None: it reads none) and the file; None for OpenAI's, or when the file
    cannot be read (then the login is asked)."""
    path = codex_home(env) / "config.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    profile = (data.get("profiles") or {}).get(choice.profile) if choice.profile else None
    name = choice.provider or (profile or {}).get("model_provider") or data.get("model_provider")
    if not isinstance(name, str) or name == "openai":
        return None
    provider = (data.get("model_providers") or {}).get(name)
    key = provider.get("env_key") if isinstance(provider, dict) else None
    return name, key if isinstance(key, str) and key else None, str(path)


def login(cli: str, env: dict[str, str], env_key: str | None = None, choice: Choice = Choice()) -> Answer:
    """Codex has credentials: the ``env_key`` of the provider the role selects, an API key, the key of the provider
    it uses as Codex's own ``config.toml`` defines it (``choice``: what the role picks over that file), or a login."""
    if env_key is not None:
        if env.get(env_key):
            return Answer("ok", f"{env_key} is set, as its model provider's env_key asks")
        return Answer(
            "fail",
            f"the role's model provider reads its key from {env_key}, which is not set",
            f"set {env_key} in the role's `env` or the orchestrator's environment",
        )
    given = [k for k in KEYS if env.get(k)]
    if given:
        return Answer("ok", f"{given[0]} is set: Codex uses it (login status not asked)")
    configured = configured_provider(env, choice)
    if configured is not None:
        name, key, where = configured
        if key is None or env.get(key):
            reads = f"{key}, which is set" if key else "no key of ours"
            return Answer(
                "ok", f"{where} selects the model provider {name!r}, which reads {reads} (login status not asked)"
            )
        return Answer(
            "fail",
            f"{where} selects the model provider {name!r}, which reads its key from {key}, which is not set",
            f"set {key} in the role's `env` or the orchestrator's environment",
        )
    asked = f"`{shlex.quote(cli)} login status`"
    fix = (
        f"run `{shlex.quote(cli)} login` as the user the orchestrator runs as, or set OPENAI_API_KEY "
        "(or CODEX_API_KEY) in the role's `env` or the orchestrator's environment"
    )
    try:
        done = subprocess.run(
            [cli, "login", "status"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=ASK_SECONDS,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return Answer("warn", f"cannot tell: {asked} did not answer within {ASK_SECONDS:g}s", f"run {asked} yourself")
    except OSError as exc:
        return Answer("warn", f"cannot tell: {asked} cannot run ({exc.strerror or exc})", f"run {asked} yourself")
    said = one_line(done.stdout.strip() or "logged in", 160)
    if done.returncode == 0 and "not logged in" not in said.lower():
        return Answer("ok", said)
    return Answer("fail", f"Codex is not logged in ({asked} exited {done.returncode})", fix)
