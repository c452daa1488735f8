"""The ``sdk`` backend inside the orchestrator: start a run's runner process and follow its events.

The session runs in a runner process under its keeper, so the kill ladder reaches the CLI below it and a misbehaving
SDK cannot stall the supervisor's loop; the runner and its socket outlive an orchestrator that dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.agents import procs
from orchestrator.agents.claude_cli import resolve_cli_path
from orchestrator.agents.handle import TASK_WAIT, Agent, OnExit
from orchestrator.agents.local import LocalProcess
from orchestrator.agents.sdk import channel
from orchestrator.agents.sdk.channel import RunFiles
from orchestrator.agents.sdk.follow import SdkFollow
from orchestrator.agents.sdk.protocol import (
    RUNNER_PATH_ENV,
    AnyControl,
    RunnerSpec,
    SpecOptions,
    explain,
    read_lines,
)
from orchestrator.agents.spawn import Launch, start_process
from orchestrator.agents.spec import LaunchSpec, SpawnError, retry_environment, transcript_path
from orchestrator.core.agent import Capabilities
from orchestrator.core.errors import ControlError

RUNNER_MODULE = "orchestrator.agents.sdk.runner"
CONNECT_WAIT = 5.0  # how long a control waits for the socket of a runner just started or adopted
EVENT_LINE_LIMIT = 4 * 1024 * 1024  # one event line; the runner keeps them small, this only bounds a broken one
PACKAGE_PARENT = str(Path(__file__).resolve().parents[3])


def runner_spec(
    spec: LaunchSpec, cli_path: str | None, cwd: Path, transcript: Path, transport: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The spec the runner reads: the prompt, the role's SDK options and ``transport`` (the channel's keys, which
    a Ray worker fills in). Argument additions are refused: the SDK starts the CLI with arguments of its own."""
    role = spec.role
    if spec.args:
        raise SpawnError(
            f"argument additions {list(spec.args)!r} are for `command` roles; role {role.name} has backend: sdk"
        )
    options = SpecOptions.of(
        role,
        cli_path=cli_path,
        add_dirs=[str((spec.root / d).resolve()) for d in role.add_dirs],
        cwd=str(cwd),
        env={**retry_environment(role), **role.env},
    )
    return RunnerSpec(
        prompt=spec.prompt,
        options=options,
        transcript=str(transcript),
        resume=spec.resume,
        per_run_usd=role.budget.per_run_usd,
        carried_usd=spec.carried_usd,
        price_per_mtok=(role.price_per_mtok.input, role.price_per_mtok.output) if role.price_per_mtok else None,
        on_denied=role.on_denied,
        **(transport or {}),
    ).wire()


def runner_environment(env: dict[str, str]) -> dict[str, str]:
    """The agent's environment, plus what lets ``python -m orchestrator.agents.sdk.runner`` import this package.

    The runner starts in the role's folder, where a checkout that is not installed cannot be imported; it puts the
    agent's own ``PYTHONPATH`` back before the CLI starts, so the agent's tools never see ours.
    """
    child = dict(env)
    child["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p)
    child[RUNNER_PATH_ENV] = json.dumps(env.get("PYTHONPATH"))
    return child


def session_header(spec: LaunchSpec, where: str = "") -> str:
    """The run log's line before an sdk attempt's output (``where`` it runs, when not here), without its end."""
    resuming = f" resuming {spec.resume}" if spec.resume else ""
    head = f"\n=== run {spec.run_id} attempt {spec.attempt}{where}: sdk session{resuming}"
    return f"{head}, transcript {transcript_path(spec)}"


class SocketChannel:
    """The local runner's Unix socket (``channel``): its events in, controls out; its files once it has ended."""

    def __init__(self, files: RunFiles, ended: bool = False) -> None:
        self.files = files
        self.exited = ended  # the runner has ended: controls are refused
        self._controls_out: asyncio.StreamWriter | None = None
        self._connected = asyncio.Event()  # the socket is open (or could not be): controls may be tried
        self._write_lock = asyncio.Lock()
        self._reading: asyncio.Future[None] | None = None

    def follow(self, sock: socket.socket | None, follow: SdkFollow) -> None:
        """Read the runner's events from ``sock`` into ``follow``, in a task (None: nobody listens there)."""
        if sock is None:
            self._connected.set()
            return
        self._reading = asyncio.ensure_future(self._read(sock, follow))

    async def send(self, follow: SdkFollow, message: AnyControl, what: str) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), CONNECT_WAIT)
        out = self._controls_out
        if self.exited or out is None or out.is_closing():
            raise ControlError(follow.ended_line(what))
        try:
            async with self._write_lock:
                out.write(message.line().encode("utf-8"))
                await out.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise ControlError(follow.ended_line(what)) from None

    async def settle(self, follow: SdkFollow) -> None:
        """Refuse controls from now on, and read from the run's files what the socket did not bring (the
        orchestrator was down, or the runner died before it could say)."""
        self.exited = True
        if self._reading is not None:  # the socket's end of file follows the runner's exit
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._reading, TASK_WAIT)
        if not follow.closing:
            follow.restore(channel.recorded_events(self.files))
        if self._controls_out is not None:
            self._controls_out.close()

    async def _read(self, sock: socket.socket, follow: SdkFollow) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=EVENT_LINE_LIMIT)
        except OSError:
            sock.close()
            self._connected.set()
            return
        self._controls_out = writer
        self._connected.set()
        async for line in read_lines(reader):  # until the runner goes away: its exit status and files tell the rest
            follow.apply_line(line)


async def start_sdk(spec: LaunchSpec, on_exit: OnExit, keeper: Path | None, *, capabilities: Capabilities) -> Agent:
    """Start a ``backend: sdk`` run's runner (under the ``keeper`` binary when there is one), on a socket made
    here and inherited, so we are connected before it even runs; ``on_exit`` is called with its verdict."""
    role = spec.role
    cwd = spec.cwd
    cli_path = None
    if role.cli_path:
        cli_path = resolve_cli_path(role.cli_path, spec.root)
        if cli_path is None:
            raise SpawnError(f"cli_path {role.cli_path!r} is not an executable file (role {role.name})")
    transcript = transcript_path(spec)
    files = channel.run_files(spec.root, spec.run_id, spec.attempt)
    try:
        listener, client, transport = channel.open_channel(files)
    except OSError as exc:
        raise SpawnError(
            f"cannot make the sdk runner's socket {files.socket}: {exc.strerror or exc}", internal=True
        ) from None
    try:
        try:
            first_line = (json.dumps(runner_spec(spec, cli_path, cwd, transcript, transport)) + "\n").encode("utf-8")
        except ValidationError as exc:
            raise SpawnError(f"cannot describe the run to the sdk runner: {explain(exc, 'the spec')}") from None
        launch = Launch(
            spec,
            sys.executable,
            [sys.executable, "-m", RUNNER_MODULE],
            runner_environment(spec.env),
            cwd,
            session_header(spec) + f", socket {files.socket}\n",
            first_line,  # the spec, then end of file: stdin carries nothing more
            (listener.fileno(),),
        )
        process, writing = await start_process(launch, keeper)
    except BaseException:
        client.close()
        raise
    finally:
        listener.close()  # the runner (and its keeper) hold it now
    follower = _followed(spec, files, client)
    agent = Agent(spec, process, capabilities=capabilities, follower=follower, outputs=(transcript, files.events))
    agent.keep(writing)
    agent.watch(on_exit)
    return agent


def adopt_sdk(spec: LaunchSpec, ref: procs.ProcRef, keeper_pid: int | None, *, capabilities: Capabilities) -> Agent:
    """A live runner of an orchestrator that died: reconnected to its socket, which replays its latest events.

    Call ``watch`` on it to learn its end. A runner whose socket is gone (it is exiting) gets its figures from
    its files instead, and takes no more controls.
    """
    files = channel.run_files(spec.root, spec.run_id, spec.attempt)
    try:
        sock = channel.connect(files)
    except OSError:
        sock = None
    process = LocalProcess.adopted(spec, ref, keeper_pid)
    return Agent(spec, process, capabilities=capabilities, follower=_followed(spec, files, sock))


def recorded_sdk(spec: LaunchSpec, pid: int | None, *, capabilities: Capabilities) -> Agent:
    """An attempt whose runner ended while the orchestrator was down, with the figures its files hold."""
    files = channel.run_files(spec.root, spec.run_id, spec.attempt)
    follower = _followed(spec, files, None, ended=True)
    return Agent(spec, LocalProcess.recorded(spec, pid), capabilities=capabilities, follower=follower)


def _followed(spec: LaunchSpec, files: RunFiles, sock: socket.socket | None, ended: bool = False) -> SdkFollow:
    carrier = SocketChannel(files, ended)
    follow = SdkFollow(spec.run_id, transcript_path(spec), spec.log_path, carrier)
    if sock is None:
        follow.restore(channel.recorded_events(files))
    carrier.follow(sock, follow)
    return follow
