"""The ``sdk`` backend inside the orchestrator: start a run's runner process and follow its events.

The Claude session itself lives in ``orchestrator.agents.sdk.runner``, a child process
started in its own session like every agent, so the kill ladder reaches the CLI
below it and a misbehaving SDK cannot stall the supervisor's loop. This module
writes the runner's spec, reads its events into an ``SdkAgent``, and turns
``interrupt`` and ``tell`` into control lines on the runner's stdin.

API used by the supervisor:

``check_role(role, root=None)``
    Start-up check: raises ``ConfigError`` when claude-agent-sdk is not installed
    or ``cli_path`` is not an executable file (relative paths are from ``root``).
``await start_sdk(spec, on_exit) -> SdkAgent``
    Like ``runner.start_command``. ``spec.extra`` may hold ``resume`` (a session
    id to continue), ``transcript`` (default
    ``<root>/.orchestrator/runs/<run_id>/transcript.jsonl``) and ``per_run_usd``
    (default: the role's ``budget.per_run_usd``).
``SdkAgent``
    ``activity``, ``cost_usd``, ``result`` (``cost_usd``, ``input_tokens``,
    ``output_tokens``, ``num_turns``, ``session_id``, ``is_error``, ``subtype``),
    ``session_id`` (known from the session's start), ``failure_reason``,
    ``budget_exceeded``, ``interrupted`` (this agent sent an interrupt and no
    tell since), ``closing`` (the session takes no more turns; controls are
    refused), ``transcript``, ``on_update(agent, event)`` called after each
    event; ``await interrupt(keep=False)``, ``await tell(text)``, ``await end()``.

The runner's exit status: 0 success, 1 failure, 3 interrupted, 4 per-run
budget exceeded, 143 stopped by a signal. The messages both ways are the
models in ``orchestrator.agents.sdk.protocol``, the only module of the runner's
side that this one imports.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.agents import procs
from orchestrator.agents.claude_cli import retry_environment
from orchestrator.agents.command import Agent, LaunchSpec, SpawnError, _watch_exit, open_log, resolve_command
from orchestrator.agents.sdk.follow import SdkFollow
from orchestrator.agents.sdk.protocol import (
    EXIT_INTERRUPTED,
    EXIT_SIGNALLED,
    RUNNER_PATH_ENV,
    End,
    Interrupt,
    ProtocolError,
    RunnerSpec,
    SpecOptions,
    SystemPromptPreset,
    Tell,
    explain,
    parse_event,
)
from orchestrator.config import Role
from orchestrator.core.errors import ConfigError, ControlError

RUNNER_MODULE = "orchestrator.agents.sdk.runner"
EVENT_LINE_LIMIT = 4 * 1024 * 1024  # one event line; the runner keeps them small, this only bounds a broken one
PACKAGE_PARENT = str(Path(__file__).resolve().parents[3])


def resolve_cli_path(cli_path: str, root: Path) -> str | None:
    """The CLI's full path (a bare name is looked up on PATH, a relative path is from ``root``), or None."""
    return resolve_command([os.path.expanduser(cli_path)], root)


def check_role(role: Role, root: Path | None = None) -> None:
    """Start-up check for a ``backend: sdk`` role; raises ``ConfigError`` with one line."""
    if importlib.util.find_spec("claude_agent_sdk") is None:
        raise ConfigError(
            f"role {role.name} uses backend: sdk but claude-agent-sdk is not installed; "
            "install it with pip install 'orchestrator[sdk]'"
        )
    if role.cli_path and resolve_cli_path(role.cli_path, root or Path.cwd()) is None:
        raise ConfigError(f"role {role.name}: cli_path {role.cli_path!r} is not an executable file")


def runner_spec(spec: LaunchSpec, cli_path: str | None, cwd: Path, transcript: Path) -> dict[str, Any]:
    """The first line the runner reads: the prompt and the role's SDK options, checked by ``RunnerSpec``."""
    role = spec.role
    prompt = role.system_prompt
    system_prompt: str | SystemPromptPreset = (
        prompt if isinstance(prompt, str) else SystemPromptPreset(preset=prompt.preset, append=prompt.append)
    )
    options = SpecOptions(
        model=role.model,
        system_prompt=system_prompt,
        permission_mode=role.permission_mode,
        allowed_tools=list(role.allowed_tools),
        disallowed_tools=list(role.disallowed_tools),
        max_turns=role.max_turns,
        max_budget_usd=role.max_budget_usd,
        setting_sources=list(role.setting_sources) if role.setting_sources is not None else None,
        cli_path=cli_path,
        add_dirs=[str((spec.root / d).resolve()) for d in role.add_dirs],
        cwd=str(cwd),
        env={**retry_environment(role), **role.env},
    )
    return RunnerSpec(
        prompt=spec.prompt,
        options=options,
        transcript=str(transcript),
        resume=spec.extra.get("resume") or None,
        per_run_usd=spec.extra.get("per_run_usd", role.budget.per_run_usd),
        price_per_mtok=(role.price_per_mtok.input, role.price_per_mtok.output) if role.price_per_mtok else None,
    ).wire()


def runner_environment(env: dict[str, str]) -> dict[str, str]:
    """The agent's environment, plus what lets ``python -m orchestrator.agents.sdk.runner`` import this package.

    The runner starts in the role's folder, where the package may not be
    importable (a checkout that is not installed); it puts the agent's own
    ``PYTHONPATH`` back before the CLI starts, so the agent's tools never see ours.
    """
    child = dict(env)
    child["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p)
    child[RUNNER_PATH_ENV] = json.dumps(env.get("PYTHONPATH"))
    return child


class SdkAgent(SdkFollow, Agent):
    """A run's sdk_runner process, with the figures its events reported so far."""

    backend = "sdk"

    def __init__(self, proc: asyncio.subprocess.Process, spec: LaunchSpec, transcript: Path) -> None:
        super().__init__(proc, spec)
        self._follow(transcript)
        self._write_lock = asyncio.Lock()

    async def interrupt(self, keep: bool = False) -> None:
        """Stop the current turn; with ``keep`` the session then waits for a ``tell`` instead of ending."""
        await self._control(Interrupt(keep=keep), "interrupt")
        self.interrupted = True

    async def tell(self, text: str) -> None:
        """A follow-up message into the session; Claude Code takes it into the running turn (or a turn of its own)."""
        try:
            message = Tell(text=text)
        except ValidationError:  # the control layer refuses blank text first; this only keeps a traceback out
            raise ControlError("nothing to tell: the text is empty") from None
        await self._control(message, "tell")
        self.interrupted = False

    async def end(self) -> None:
        """Finish once the current turn ends, answering no queued tell."""
        await self._control(End(), "end")

    async def wait(self) -> int:
        """The runner's exit status, once it has exited; an unexplained failure gets a reason pointing at the log."""
        code = await super().wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if code > 0 and code not in (EXIT_INTERRUPTED, EXIT_SIGNALLED) and self.failure_reason is None:
            self.failure_reason = (
                f"the sdk runner exited with status {code} without saying why; see {self.spec.log_path}"
            )
        return code

    async def _control(self, message: Interrupt | Tell | End, what: str) -> None:
        stdin = self.proc.stdin
        if self.closing or self.proc.returncode is not None or stdin is None or stdin.is_closing():
            raise ControlError(f"run {self.spec.run_id}'s agent session has already ended; nothing to {what}")
        try:
            async with self._write_lock:
                stdin.write(message.line().encode("utf-8"))
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise ControlError(f"run {self.spec.run_id}'s agent session has already ended; nothing to {what}") from None

    async def _read_events(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        while True:
            try:
                line = await stdout.readline()
            except ValueError:  # a line over the limit: skip it, keep the rest
                continue
            if not line:
                return
            try:
                event = parse_event(line)
            except ProtocolError:  # not a runner event: skipped, like a line over the limit
                continue
            self._apply(event)


async def start_sdk(spec: LaunchSpec, on_exit: Callable[[Agent, int], None]) -> SdkAgent:
    """Start a ``backend: sdk`` run's runner; ``on_exit`` is called in the loop when it ends."""
    role = spec.role
    cwd = (spec.root / role.cwd).resolve()
    cli_path = None
    if role.cli_path:
        cli_path = resolve_cli_path(role.cli_path, spec.root)
        if cli_path is None:
            raise SpawnError(f"cli_path {role.cli_path!r} is not an executable file (role {role.name})")
    default_transcript = spec.root / ".orchestrator" / "runs" / str(spec.run_id) / "transcript.jsonl"
    transcript = Path(spec.extra.get("transcript") or default_transcript)
    resume = spec.extra.get("resume")
    try:
        first_line = (json.dumps(runner_spec(spec, cli_path, cwd, transcript)) + "\n").encode("utf-8")
    except ValidationError as exc:
        raise SpawnError(f"cannot describe the run to the sdk runner: {explain(exc, 'the spec')}") from None
    header = f"\n=== run {spec.run_id} attempt {spec.attempt}: sdk session" + (f" resuming {resume}" if resume else "")
    log_fd = open_log(spec.log_path, header + f", transcript {transcript}\n")
    try:
        with procs.spawning():
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                RUNNER_MODULE,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log_fd,
                cwd=cwd,
                env=runner_environment(spec.env),
                start_new_session=True,
                limit=EVENT_LINE_LIMIT,
            )
            procs.spare(proc.pid)
    except OSError as exc:
        raise SpawnError(f"cannot start the sdk runner: {exc.strerror or exc}") from None
    finally:
        os.close(log_fd)
    agent = SdkAgent(proc, spec, transcript)
    agent._keep(agent._read_events())
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # a runner that died at once: its status says why
        proc.stdin.write(first_line)
        await proc.stdin.drain()
    _watch_exit(agent, on_exit)
    return agent
