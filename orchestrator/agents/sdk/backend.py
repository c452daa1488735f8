"""The ``sdk`` backend inside the orchestrator: start a run's runner process and follow its events.

The Claude session itself lives in ``orchestrator.agents.sdk.runner``, a child process
started in its own session like every agent, so the kill ladder reaches the CLI
below it and a misbehaving SDK cannot stall the supervisor's loop. This module
writes the runner's spec, reads its events into an ``SdkAgent``, and turns
``interrupt`` and ``tell`` into control lines to the runner.

With the keeper binary (``agents/keeper.py``) the runner runs under a keeper,
like a command agent, and talks over a Unix socket of its own with an event log
and a result file beside it (``channel``), so it outlives an orchestrator that
dies: at the restart ``adopt_sdk`` reconnects to a live runner and
``recorded_sdk`` reads what an ended one left. Without the keeper it talks over
its stdin and stdout, as a child of this process only.

API used by the supervisor:

``check_role(role, root=None)``
    Start-up check: raises ``ConfigError`` when claude-agent-sdk is not installed
    or ``cli_path`` is not an executable file (relative paths are from ``root``).
``await start_sdk(spec, on_exit, keeper_binary=None) -> SdkAgent``
    Like ``runner.start_command``; under ``keeper_binary`` when given. ``spec.extra`` may hold ``resume`` (a session
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
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.agents import procs
from orchestrator.agents.claude_cli import retry_environment
from orchestrator.agents.command import (
    Agent,
    LaunchSpec,
    SpawnError,
    _watch_exit,
    open_log,
    resolve_command,
    role_folder,
)
from orchestrator.agents.kept import adopted_exit, kept_exit, spawn_kept
from orchestrator.agents.posix_child import PosixChild
from orchestrator.agents.sdk import channel
from orchestrator.agents.sdk.channel import RunFiles
from orchestrator.agents.sdk.follow import SdkFollow
from orchestrator.agents.sdk.protocol import (
    EXIT_INTERRUPTED,
    EXIT_SIGNALLED,
    RUNNER_PATH_ENV,
    AnyEvent,
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
CONNECT_WAIT = 5.0  # how long a control waits for the socket of a runner just started or adopted
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


def runner_spec(
    spec: LaunchSpec, cli_path: str | None, cwd: Path, transcript: Path, transport: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The first line the runner reads: the prompt, the role's SDK options and ``transport`` (the channel's keys)."""
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
        **(transport or {}),
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

    def __init__(
        self,
        proc: asyncio.subprocess.Process | PosixChild | None,
        spec: LaunchSpec,
        transcript: Path,
        files: RunFiles | None = None,
        agent_pid: int | None = None,
        keeper_pid: int | None = None,
    ) -> None:
        if proc is not None:
            super().__init__(proc, spec)
        else:  # adopted: the runner is not our child
            self.spec = spec
            self.ref = None  # set by ``_transport``
            self.activity = self.cost_usd = self.failure_reason = None
            self.result = {}
            self._tasks = []
            self.waiter = None
        self._transport(proc, files, agent_pid, keeper_pid)
        self._follow(transcript)
        self._write_lock = asyncio.Lock()

    def _transport(
        self,
        proc: asyncio.subprocess.Process | PosixChild | None,
        files: RunFiles | None,
        agent_pid: int | None,
        keeper_pid: int | None,
    ) -> None:
        """Where events come from and controls go: the runner's pipes, or (``files``) its socket."""
        self.files = files  # the socket channel's files; None: the runner's stdin and stdout
        self.agent_pid = agent_pid  # the runner, when ``proc`` is its keeper (or None: adopted)
        self.keeper_pid = keeper_pid
        self.adopted = proc is None
        self.exited = False
        piped = proc if isinstance(proc, asyncio.subprocess.Process) and files is None else None
        self._events_in: asyncio.StreamReader | None = piped.stdout if piped is not None else None
        self._controls_out: asyncio.StreamWriter | None = piped.stdin if piped is not None else None
        self._connected = asyncio.Event()  # the socket is open (or could not be): controls may be tried
        if files is None:
            self._connected.set()
        if agent_pid is not None:
            self.ref = procs.ProcRef.of(agent_pid)  # the runner, not its keeper: what a stop must reach

    @property
    def pid(self) -> int:
        if self.agent_pid is not None:
            return self.agent_pid
        return self.proc.pid

    async def wait(self) -> int:
        """The runner's exit status, once it has exited; an unexplained failure gets a reason pointing at the log.

        Under a keeper, the status is the keeper's record, and what the socket did not bring (the
        orchestrator was down, or the runner died before it could say) is read from the run's files.
        """
        if self.files is None:
            code = await super().wait()
        else:
            if self.adopted:
                assert self.agent_pid is not None
                code = await adopted_exit(self.spec, self.agent_pid, self.keeper_pid)
            else:
                code = await kept_exit(self.spec, await self.proc.wait(), self.ref)
            self.exited = True
            for task in self._tasks:  # the socket's end of file follows the runner's exit
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(task, 2)
            if not self.closing:
                self.restore(channel.recorded_events(self.files))
        self.exited = True
        if self._controls_out is not None:
            self._controls_out.close()
        if code > 0 and code not in (EXIT_INTERRUPTED, EXIT_SIGNALLED) and self.failure_reason is None:
            self.failure_reason = (
                f"the sdk runner exited with status {code} without saying why; see {self.spec.log_path}"
            )
        return code

    async def _control(self, message: Interrupt | Tell | End, what: str) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), CONNECT_WAIT)
        out = self._controls_out
        gone = self.exited or (not self.adopted and self.proc.returncode is not None)
        if self.closing or gone or out is None or out.is_closing():
            raise ControlError(f"run {self.spec.run_id}'s agent session has already ended; nothing to {what}")
        try:
            async with self._write_lock:
                out.write(message.line().encode("utf-8"))
                await out.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise ControlError(f"run {self.spec.run_id}'s agent session has already ended; nothing to {what}") from None

    def restore(self, events: list[AnyEvent]) -> None:
        """Apply events the runner left on disk (``on_update`` is not told: they are old news)."""
        view, self.on_update = self.on_update, None
        try:
            for event in events:
                self._apply(event)
        finally:
            self.on_update = view

    async def _follow_socket(self, sock: socket.socket) -> None:
        """Open the connection to the runner's socket, then read its events until it closes."""
        try:
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=EVENT_LINE_LIMIT)
        except OSError:
            sock.close()
            self._connected.set()
            return
        self._events_in, self._controls_out = reader, writer
        self._connected.set()
        try:
            await self._read_events()
        except (ConnectionError, OSError):
            pass  # the runner went away: its exit status and its files tell the rest

    async def _read_events(self) -> None:
        stdout = self._events_in
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


async def start_sdk(
    spec: LaunchSpec, on_exit: Callable[[Agent, int], None], keeper_binary: Path | None = None
) -> SdkAgent:
    """Start a ``backend: sdk`` run's runner (under ``keeper_binary`` when given); ``on_exit`` is called when it ends."""
    role = spec.role
    cwd = role_folder(spec.root, role.cwd)
    cli_path = None
    if role.cli_path:
        cli_path = resolve_cli_path(role.cli_path, spec.root)
        if cli_path is None:
            raise SpawnError(f"cli_path {role.cli_path!r} is not an executable file (role {role.name})")
    transcript = transcript_path(spec)
    resume = spec.extra.get("resume")
    if keeper_binary is not None:
        return await _start_kept(spec, on_exit, keeper_binary, cli_path, cwd, transcript)
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
        raise SpawnError.of_errno(f"cannot start the sdk runner: {exc.strerror or exc}", exc.errno) from None
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


def transcript_path(spec: LaunchSpec) -> Path:
    """The run's transcript: ``spec.extra["transcript"]``, or ``runs/<run_id>/transcript.jsonl``."""
    default = spec.root / ".orchestrator" / "runs" / str(spec.run_id) / "transcript.jsonl"
    return Path(spec.extra.get("transcript") or default)


async def _start_kept(
    spec: LaunchSpec,
    on_exit: Callable[[Agent, int], None],
    binary: Path,
    cli_path: str | None,
    cwd: Path,
    transcript: Path,
) -> SdkAgent:
    """The runner under a keeper, on a socket made here and inherited, so we are connected before it even runs."""
    files = channel.run_files(spec.root, spec.run_id, spec.attempt)
    try:
        listener = channel.listen(files)
    except OSError as exc:
        raise SpawnError(f"cannot make the sdk runner's socket {files.socket}: {exc.strerror or exc}") from None
    client: socket.socket | None = None
    try:
        client = channel.connect(files)  # queued until the runner accepts: no event can be missed
        if client is None:
            raise SpawnError(f"cannot connect to the sdk runner's socket {files.socket}")
        transport = {
            "channel": "socket",
            "listen_fd": listener.fileno(),
            "socket_path": str(files.socket),
            "events_path": str(files.events),
            "result_path": str(files.result),
        }
        try:
            first_line = (json.dumps(runner_spec(spec, cli_path, cwd, transcript, transport)) + "\n").encode("utf-8")
        except ValidationError as exc:
            raise SpawnError(f"cannot describe the run to the sdk runner: {explain(exc, 'the spec')}") from None
        resume = spec.extra.get("resume")
        header = f"\n=== run {spec.run_id} attempt {spec.attempt}: sdk session" + (
            f" resuming {resume}" if resume else ""
        )
        proc, runner_pid = await spawn_kept(
            spec,
            binary,
            sys.executable,
            [sys.executable, "-m", RUNNER_MODULE],
            stdin_pipe=True,
            env=runner_environment(spec.env),
            cwd=cwd,
            pass_fds=(listener.fileno(),),
            log=(spec.log_path, header + f", transcript {transcript}, socket {files.socket}\n"),
        )
    except BaseException:
        if client is not None:
            client.close()
        raise
    finally:
        listener.close()  # the runner (and its keeper) hold it now
    agent = SdkAgent(proc, spec, transcript, files=files, agent_pid=runner_pid, keeper_pid=proc.pid)
    agent._keep(agent._follow_socket(client))
    if (rest := proc.send(first_line)) is not None:  # the spec, then end of file: stdin carries nothing more
        agent._keep(rest)

    def exited(done: Agent, code: int) -> None:
        procs.unspare(proc.pid)
        on_exit(done, code)

    _watch_exit(agent, exited)
    return agent


def adopt_sdk(spec: LaunchSpec, ref: procs.ProcRef, keeper_pid: int | None) -> SdkAgent:
    """A live runner of an orchestrator that died: reconnected to its socket, which replays its latest events.

    Call ``command.watch_exit`` on it to learn its end. A runner whose socket is gone (it is exiting) gets
    its figures from its files instead, and takes no more controls.
    """
    files = channel.run_files(spec.root, spec.run_id, spec.attempt)
    agent = SdkAgent(None, spec, transcript_path(spec), files=files, agent_pid=ref.pid, keeper_pid=keeper_pid)
    agent.ref = ref
    try:
        sock = channel.connect(files)
    except OSError:
        sock = None
    if sock is None:
        agent.restore(channel.recorded_events(files))
        agent._connected.set()
    else:
        agent._keep(agent._follow_socket(sock))
    return agent


def recorded_sdk(spec: LaunchSpec, pid: int) -> SdkAgent:
    """An attempt whose runner ended while the orchestrator was down, with the figures its files hold."""
    files = channel.run_files(spec.root, spec.run_id, spec.attempt)
    agent = SdkAgent(None, spec, transcript_path(spec), files=files, agent_pid=pid)
    agent.restore(channel.recorded_events(files))
    agent.exited = True
    agent._connected.set()
    return agent
