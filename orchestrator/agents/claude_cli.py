"""The Claude Code CLI as an agent program, for both backends: its caps, start-up checks and failure reasons.

The CLI writes its errors to stdout, so a failure its stream-json events do not explain is explained by its last
meaningful line of output.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from orchestrator.agents import claude_stream
from orchestrator.agents.claude_errors import Problem, classify, last_meaningful_line, one_line
from orchestrator.agents.spec import is_claude_command, resolve_command, role_folder
from orchestrator.config import Config, Role
from orchestrator.core.agent import UsageLimit
from orchestrator.core.errors import ConfigError

STALL_DEFAULT = 600.0  # the default stall timeout of sdk and stream-json Claude roles: an event at every step
VERSION_SECONDS = 20.0
VERSION_ANSWER = re.compile(r"\(Claude Code\)")
LOG_TAIL_BYTES = 64 * 1024
_checked: dict[str, str] = {}  # CLI path -> its version line, so a team of many roles asks once


def streams_json(role: Role) -> bool:
    """Whether the role's agent writes Claude's stream-json events (an ``sdk`` role, or a ``claude`` command
    with ``--output-format stream-json``)."""
    return role.backend == "sdk" or (
        is_claude_command(role.command) and _sets(role.command, "--output-format", "stream-json")
    )


def _sets(argv: list[str], flag: str, value: str) -> bool:
    """Whether ``argv`` gives ``flag`` the ``value``, as ``flag=value`` or as two arguments."""
    return f"{flag}={value}" in argv or any(a == flag and b == value for a, b in zip(argv, argv[1:], strict=False))


def _given(argv: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def _given_value(argv: list[str], flag: str) -> str | None:
    """The value ``argv`` gives ``flag`` (``flag=value`` or two arguments), or None."""
    for word, after in zip(argv, [*argv[1:], None], strict=True):
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
        if word == flag:
            return after
    return None


def _check_own_cap(config: Config, role: Role, key: str) -> None:
    """A ``--max-budget-usd`` the command gives itself is left as it is (``cap_arguments``): one over the role's
    caps would loosen them, so it is refused rather than kept silently."""
    caps = [v for v in (role.max_budget_usd, role.budget.per_run_usd) if v is not None]
    given = _given_value(role.command, "--max-budget-usd")
    try:
        own = float(given) if given is not None else None
    except ValueError:
        return  # the CLI says what is wrong with it
    if own is not None and caps and own > min(caps):
        raise ConfigError(
            f"{config.path}: {key}: --max-budget-usd {given} is over the role's cap of {min(caps):g} "
            "(budget.per_run_usd, max_budget_usd), which the CLI would then not keep; take it out of the command: "
            "the orchestrator passes the tighter cap"
        )


def cap_arguments(role: Role, per_run_usd: float | None) -> list[str]:
    """The role's caps as Claude CLI arguments, so the CLI stops itself at them (the live fuse stays the outer guard):
    ``--max-turns``, and ``--max-budget-usd`` the tighter of ``max_budget_usd`` and the per-run budget. An argument
    the role's command already gives is left out."""
    if not is_claude_command(role.command):
        return []
    extra: list[str] = []
    if role.max_turns is not None and not _given(role.command, "--max-turns"):
        extra += ["--max-turns", str(role.max_turns)]
    caps = [v for v in (role.max_budget_usd, per_run_usd) if v is not None]
    if caps and not _given(role.command, "--max-budget-usd"):
        extra += ["--max-budget-usd", f"{min(caps):g}"]
    return extra


def resolve_cli_path(cli_path: str, root: Path) -> str | None:
    """The CLI's full path (a bare name is looked up on PATH, a relative path is from ``root``), or None."""
    return resolve_command([os.path.expanduser(cli_path)], root)


def sdk_cli_path(role: Role, root: Path) -> str | None:
    """The CLI an ``sdk`` role's session runs: its ``cli_path``, else the one bundled with claude-agent-sdk,
    else ``claude`` on PATH (the SDK's own order); None when there is none."""
    if role.cli_path:
        return resolve_cli_path(role.cli_path, root)
    try:
        import claude_agent_sdk
    except ImportError:
        return None
    bundled = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    if os.access(bundled, os.X_OK) and bundled.is_file():
        return str(bundled)
    return resolve_command(["claude"], root)


def check_version(path: str, where: str) -> str:
    """The CLI's ``--version`` line; raises ``ConfigError`` (naming ``where``) when it does not answer like
    Claude Code."""
    if path in _checked:
        return _checked[path]
    fix = "point it at the Claude Code CLI (npm install -g @anthropic-ai/claude-code)"
    try:
        done = subprocess.run(
            [path, "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_SECONDS,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "DISABLE_AUTOUPDATER": "1"},
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(f"{where}: {path} did not answer --version within {VERSION_SECONDS:g}s; {fix}") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot run {path} --version ({exc.strerror or exc}); {fix}") from None
    answer = (done.stdout or "").strip() or (done.stderr or "").strip()
    if done.returncode != 0 or not VERSION_ANSWER.search(done.stdout or ""):
        said = one_line(answer, 120) if answer else "nothing"
        raise ConfigError(
            f"{where}: {path} does not answer --version like Claude Code (exit {done.returncode}, said {said}); {fix}"
        )
    _checked[path] = one_line(answer, 120)
    return _checked[path]


def _asks_bypass(role: Role) -> bool:
    if role.backend == "sdk":
        return role.permission_mode == "bypassPermissions"
    argv = role.command
    return "--dangerously-skip-permissions" in argv or _sets(argv, "--permission-mode", "bypassPermissions")


def check_role(config: Config, role: Role) -> None:
    """Start-up checks of a role that runs the Claude CLI; raises ``ConfigError`` in ``file: key: what to do``
    form. Roles that do not run the Claude CLI are left alone."""
    if role.backend == "sdk":
        key = f"roles.{role.name}.cli_path"
        if importlib.util.find_spec("claude_agent_sdk") is None:
            raise ConfigError(
                f"{config.path}: roles.{role.name}.backend: sdk needs claude-agent-sdk, which is not installed; "
                "install it with pip install 'orchestrator[sdk]'"
            )
        path = sdk_cli_path(role, config.root)
        if path is None and role.cli_path:
            raise ConfigError(f"{config.path}: {key}: {role.cli_path!r} is not an executable file")
        if path is None:
            raise ConfigError(
                f"{config.path}: {key}: no Claude Code CLI found (none bundled with claude-agent-sdk, none on PATH); "
                "install it (npm install -g @anthropic-ai/claude-code) or set cli_path"
            )
        mode_key = f"roles.{role.name}.permission_mode"
    elif is_claude_command(role.command):
        key = f"roles.{role.name}.command"
        _check_own_cap(config, role, key)
        path = resolve_command(role.command, role_folder(config.root, role.cwd))
        if path is None:
            return  # the generic check says it is not found
        mode_key = key
    else:
        return
    check_version(path, f"{config.path}: {key}")
    sandboxed = role.env.get("IS_SANDBOX", os.environ.get("IS_SANDBOX", "")) not in ("", "0")
    if _asks_bypass(role) and os.geteuid() == 0 and not sandboxed:
        raise ConfigError(
            f"{config.path}: {mode_key}: Claude Code refuses bypassPermissions when run as root; run the "
            "orchestrator as another user, set IS_SANDBOX=1 in the role's env if this is a sandbox, or choose "
            "acceptEdits with allowed tools"
        )


class ClaudeOutput:
    """A Claude CLI agent's output in the run's log from ``offset`` (where this attempt's output starts), read at
    its end, in a worker thread. With stream-json (``transcript`` set) its tail gives its figures, judges its end
    and says what it last did and said; the transcript keeps the attempt's init and result events (the whole
    stream stays in the log)."""

    def __init__(self, log_path: Path, offset: int, transcript: Path | None, on_denied: str) -> None:
        self.log_path = log_path
        self.offset = offset
        self.transcript = transcript
        self.on_denied = on_denied
        self.result: dict[str, Any] = {}

    def judge(self, code: int) -> claude_stream.Judgement:
        """How the attempt went, ending with exit ``code``: its stream's judgement, else why it failed. Blocking."""
        judged = claude_stream.Judgement()
        try:
            if self.transcript is not None:
                stream = claude_stream.read_end(self.log_path, self.offset)
                self.result = claude_stream.figures(stream)
                self._keep(self.transcript, [e for e in (stream.init, stream.result) if e is not None])
                judged = claude_stream.judge(stream, code, self.on_denied)
                if judged.failed or code <= 0:
                    return judged
            with open(self.log_path, "rb") as handle:
                handle.seek(max(self.offset, os.path.getsize(self.log_path) - LOG_TAIL_BYTES))
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            return judged
        problem = explain(text, code) if code > 0 else None
        if problem is None:
            return judged
        limit = UsageLimit(problem.limit_kind, problem.resets_at, problem.reason) if problem.limit_kind else None
        return claude_stream.Judgement(
            reason=problem.reason, permanent=problem.permanent, usage_limit=limit, last_words=judged.last_words
        )

    @staticmethod
    def _keep(transcript: Path, events: list[dict[str, Any]]) -> None:
        try:
            transcript.parent.mkdir(parents=True, exist_ok=True)
            with open(transcript, "a", encoding="utf-8") as out:
                out.writelines(json.dumps(e, ensure_ascii=False) + "\n" for e in events)
        except OSError:
            pass  # the log still holds every event


def explain(output: str, code: int) -> Problem | None:
    """The reason (and whether no retry can help) for exit ``code``, from the CLI's last meaningful line of
    ``output``; stream-json events are skipped, since a person is told the CLI's own words."""
    line = last_meaningful_line("\n".join(t for t in output.splitlines() if not t.lstrip().startswith('{"')))
    if line is None:
        return None
    problem = classify(line)
    if problem is not None:
        return Problem(f"{problem.reason} (exit code {code})", problem.permanent, problem.limit_kind, problem.resets_at)
    return Problem(f"exit code {code}: Claude Code said: {line}")
