"""Agents under a keeper: started through it, or adopted at a restart from an orchestrator that died.

``KeptAgent`` is the ``command`` backend's agent when the keeper binary exists:
its pid is the agent's (a session leader, as without a keeper), its exit status
is the one its keeper wrote to disk. ``AdoptedAgent`` is a live agent found at
start-up: it is not our child, so its end is seen through a pidfd, and its
status is read from the keeper's file the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.agents import keeper, posix_child, procs
from orchestrator.agents.command import Agent, LaunchSpec, SpawnError, cannot_start, watch_exit
from orchestrator.agents.posix_child import PosixChild

UNKNOWN_EXIT = -signal.SIGKILL  # no record and no keeper: it was most likely killed with its keeper


def exit_record_path(spec: LaunchSpec) -> Path:
    return keeper.exit_path(spec.root / ".orchestrator", spec.run_id, spec.attempt)


class KeptAgent(Agent):
    """An agent started under a keeper; ``proc`` is the keeper, ``pid`` the agent."""

    def __init__(self, proc: PosixChild, spec: LaunchSpec, agent_pid: int) -> None:
        super().__init__(proc, spec, agent_pid)
        self.agent_pid = agent_pid
        self.keeper_pid = proc.pid
        self.explain_from_log: int | None = None  # set for the Claude CLI: where this attempt's output starts
        self.permanent_failure = False

    @property
    def pid(self) -> int:
        return self.agent_pid

    async def wait(self) -> int:
        code = await self._wait()
        if code > 0 and self.failure_reason is None and self.explain_from_log is not None:
            from orchestrator.agents.claude_cli import explain_exit

            explain_exit(self, code, self.explain_from_log)
        return code

    async def _wait(self) -> int:
        return await kept_exit(self.spec, await super().wait(), self.ref)


async def spawn_kept(
    spec: LaunchSpec,
    binary: Path,
    executable: str,
    argv: list[str],
    *,
    stdin_pipe: bool,
    env: dict[str, str],
    cwd: Path,
    log: tuple[Path, str],
    pass_fds: tuple[int, ...] = (),
) -> tuple[PosixChild, int]:
    """Start the keeper with the agent's argv: (the keeper, the agent's pid) once it is exec'd, or ``SpawnError``.

    ``log`` is (the run's log, this attempt's header): the keeper opens it and gives it to the agent;
    ``cwd`` is where the agent starts (the keeper enters it)."""
    role = spec.role
    record = exit_record_path(spec)  # its folder is made by the keeper, off the start's path
    kill_after = role.timeout + role.grace + keeper.MARGIN
    read_fd, write_fd = os.pipe()
    command = keeper.keeper_argv(binary, record, kill_after, role.grace, write_fd, log, cwd, pass_fds)
    try:
        proc = await posix_child.spawn(
            [*command, executable, *argv[1:]],
            keeper.keeper_env(env),
            stdin_pipe=stdin_pipe,
            keep_fds=(write_fd, *pass_fds),
        )
    except OSError as exc:
        os.close(read_fd)
        raise SpawnError(f"cannot start the keeper {binary}: {exc.strerror or exc}") from None
    finally:
        os.close(write_fd)
    said = bytearray()
    try:
        status = await keeper.read_status(read_fd, said)
    except BaseException:  # called off: whatever it started is killed once it is said
        _kill_when_said(os.dup(read_fd), bytes(said))
        proc.close_stdin()
        raise
    finally:
        os.close(read_fd)
    return await _agent_of(proc, status, spec, argv, executable, log[0], cwd)


KILL_WAIT = 5.0  # seconds a called-off start's status pipe is read for the agent's pid


def _kill_when_said(fd: int, said: bytes) -> None:
    """A called-off start: on a thread of its own (the loop may be closing; the process waits for it at exit),
    read the rest of its status pipe, then kill the agent's group it names (its keeper records that and ends)."""

    def finish() -> None:
        data = bytearray(said)
        deadline = time.monotonic() + KILL_WAIT
        poller = select.poll()  # not select(): a descriptor above 1023 is fine here
        poller.register(fd, select.POLLIN)
        try:
            os.set_blocking(fd, False)
            while (left := deadline - time.monotonic()) > 0:
                if not poller.poll(left * 1000):
                    break
                chunk = os.read(fd, 256)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        finally:
            os.close(fd)
        agent = keeper.parse_status(bytes(data)).agent
        if agent is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(agent, signal.SIGKILL)

    threading.Thread(target=finish, name="called-off-start").start()


async def _agent_of(
    proc: PosixChild, status: keeper.Status, spec: LaunchSpec, argv: list[str], executable: str, log: Path, cwd: Path
) -> tuple[PosixChild, int]:
    """(the keeper, the agent's pid) when its status says the agent is exec'd, else the ``SpawnError`` it says."""
    if status.agent is not None and status.exec_errno is None:
        return proc, status.agent
    if status.log_errno is not None:
        error = SpawnError(f"cannot open the run's log {log}: {os.strerror(status.log_errno)}")
    elif status.cwd_errno is not None:
        error = SpawnError(f"cannot enter the folder {cwd} of role {spec.role.name}: {os.strerror(status.cwd_errno)}")
    elif status.exec_errno is not None:
        error = cannot_start(argv[0], executable, status.exec_errno, os.strerror(status.exec_errno))
    else:
        proc.close_stdin()
        code = await proc.wait()
        procs.unspare(proc.pid)
        raise SpawnError(f"the keeper could not start {argv[0]!r} (exit status {code})")
    raise await _refused(proc, error) from None


async def _refused(proc: PosixChild, error: SpawnError) -> SpawnError:
    """The keeper said it cannot start the agent: ``error``, to raise once the keeper has exited."""
    proc.close_stdin()
    await proc.wait()
    procs.unspare(proc.pid)
    return error


async def start_kept(
    spec: LaunchSpec,
    binary: Path,
    executable: str,
    argv: list[str],
    prompt: bytes,
    header: str,
    on_exit: Callable[[Agent, int], None],
    cwd: Path,
) -> Agent:
    """Start the keeper with the agent's argv; return once the agent is exec'd (or raise ``SpawnError``).

    The keeper opens the run's log itself and writes ``header`` to it first."""
    role = spec.role
    proc, agent_pid = await spawn_kept(
        spec,
        binary,
        executable,
        argv,
        stdin_pipe=role.prompt_via == "stdin",
        env=spec.env,
        cwd=cwd,
        log=(spec.log_path, header),
    )
    agent = KeptAgent(proc, spec, agent_pid)
    if role.prompt_via == "stdin" and (rest := proc.send(prompt)) is not None:
        agent._keep(rest)

    def exited(done: Agent, code: int) -> None:
        procs.unspare(proc.pid)
        on_exit(done, code)

    watch_exit(agent, exited)
    return agent


async def kept_exit(spec: LaunchSpec, keeper_code: int, agent_ref: procs.ProcRef | None) -> int:
    """An agent's status once its keeper (our child) exited with ``keeper_code``: the keeper's record, if any."""
    record = keeper.read_exit(exit_record_path(spec))
    if record is not None:
        return record.returncode
    if agent_ref is not None and agent_ref.process() is not None:
        # the keeper was killed on its own: the agent lives on (now our child, as subreaper); its end counts
        await keeper.wait_pid(agent_ref.pid)
    return keeper_code


async def adopted_exit(spec: LaunchSpec, agent_pid: int, keeper_pid: int | None) -> int:
    """The status of an agent that is not our child: its keeper's record once the keeper has ended."""
    path = exit_record_path(spec)
    if keeper_pid is not None:
        await keeper.wait_pid(keeper_pid)
        record = keeper.read_exit(path)
        if record is not None:
            return record.returncode
    await keeper.wait_pid(agent_pid)
    record = keeper.read_exit(path)
    return record.returncode if record is not None else UNKNOWN_EXIT


class AdoptedAgent:
    """A live agent of an earlier orchestrator, watched again; ``waiter`` ends when its exit status is known."""

    backend = "command"

    def __init__(self, spec: LaunchSpec, ref: procs.ProcRef, keeper_pid: int | None) -> None:
        self.spec = spec
        self.ref: procs.ProcRef | None = ref
        self.agent_pid = ref.pid
        self.keeper_pid = keeper_pid
        self.activity: str | None = None
        self.cost_usd: float | None = None
        self.result: dict[str, Any] = {}
        self.failure_reason: str | None = None
        self.waiter: asyncio.Future[None] | None = None

    @property
    def pid(self) -> int:
        return self.agent_pid

    async def wait(self) -> int:
        """The agent's exit status: its keeper's record once the keeper has ended (or the agent, without one)."""
        return await adopted_exit(self.spec, self.agent_pid, self.keeper_pid)

    def watch(self, on_exit: Callable[[Any, int], None]) -> None:
        """Report the exit through ``on_exit`` (in the loop), as a started agent's exit watcher does."""

        async def waiter() -> None:
            on_exit(self, await self.wait())

        self.waiter = asyncio.ensure_future(waiter())

    async def interrupt(self, keep: bool = False) -> None:
        await Agent.interrupt(self, keep)  # type: ignore[arg-type]

    async def tell(self, text: str) -> None:
        await Agent.tell(self, text)  # type: ignore[arg-type]
