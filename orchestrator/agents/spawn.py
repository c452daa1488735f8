"""The one way an agent process is started, for every local backend: under its keeper, or (no keeper) by itself."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

from orchestrator.agents import keeper, procs
from orchestrator.agents.local import EndReader, KeeperRecord, LocalProcess, record_path
from orchestrator.agents.posix_child import PosixChild, spawn, start_direct
from orchestrator.agents.spec import LaunchSpec, SpawnError, cannot_start, open_log

KILL_WAIT = 5.0  # seconds a called-off start's status pipe is read for the agent's pid


@dataclass(frozen=True)
class Launch:
    """One agent process to start for an attempt.

    ``executable`` is ``argv[0]`` resolved; ``header`` goes into the run's log before the agent's output;
    ``stdin`` is written to its stdin, which is then closed (None: its stdin is ``/dev/null``); ``pass_fds``
    are the descriptors it inherits."""

    spec: LaunchSpec
    executable: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    header: str
    stdin: bytes | None
    pass_fds: tuple[int, ...] = ()


async def start_process(launch: Launch, binary: Path | None) -> tuple[LocalProcess, asyncio.Future[None] | None]:
    """Start the agent of ``launch`` under the keeper ``binary`` (None: by itself); raises ``SpawnError`` (one line).

    Returns once the agent is exec'd: its transport, and the write of its stdin when that is still under way."""
    child, pid = _direct(launch) if binary is None else await _kept(launch, binary)
    ref = procs.ProcRef.of(pid)  # the agent, not its keeper: what a stop must reach (None: it has ended already)
    end: EndReader = child if binary is None else KeeperRecord(record_path(launch.spec), child, ref)
    writing = child.send(launch.stdin) if launch.stdin is not None else None
    return LocalProcess(launch.spec, pid, ref, end), writing


async def _kept(launch: Launch, binary: Path) -> tuple[PosixChild, int]:
    """The keeper started with the agent's argv: (the keeper, the agent's pid) once the agent is exec'd."""
    spec, role = launch.spec, launch.spec.role
    kill_after = role.timeout + role.grace + keeper.MARGIN
    log = (spec.log_path, launch.header)
    read_fd, write_fd = os.pipe()
    # the record's folder is made by the keeper, off the start's path
    command = keeper.keeper_argv(
        binary, record_path(spec), kill_after, role.grace, write_fd, log, launch.cwd, launch.pass_fds
    )
    try:
        proc = spawn(
            [*command, launch.executable, *launch.argv[1:]],
            keeper.keeper_env(launch.env),
            stdin_pipe=launch.stdin is not None,
            keep_fds=(write_fd, *launch.pass_fds),
        )
    except OSError as exc:
        os.close(read_fd)
        if exc.errno == errno.E2BIG:  # the agent's argv and environment, which the keeper is given to pass on
            raise _cannot_start(launch, exc) from None
        # the keeper is the orchestrator's own: whatever stops it starting is not the role's doing
        raise SpawnError(f"cannot start the keeper {binary}: {exc.strerror or exc}", internal=True) from None
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
    if status.agent is not None and status.exec_errno is None:
        return proc, status.agent
    proc.close_stdin()
    code = await proc.wait()
    if status.log_errno is not None:  # the state folder is the orchestrator's
        raise SpawnError(f"cannot open the run's log {spec.log_path}: {os.strerror(status.log_errno)}", internal=True)
    if status.cwd_errno is not None:
        raise _no_folder(launch, status.cwd_errno)
    if status.exec_errno is not None:
        failed = status.exec_errno
        raise cannot_start(launch.executable, launch.argv, launch.env, failed, os.strerror(failed))
    raise SpawnError(f"the keeper could not start {launch.argv[0]!r} (exit status {code})", internal=True)


def _direct(launch: Launch) -> tuple[PosixChild, int]:
    spec = launch.spec
    try:
        log_fd = open_log(spec.log_path, launch.header)
    except OSError as exc:
        raise SpawnError(f"cannot open the run's log {spec.log_path}: {exc.strerror or exc}", internal=True) from None
    try:
        child = start_direct(
            [launch.executable, *launch.argv[1:]],
            launch.env,
            cwd=launch.cwd,
            output=log_fd,
            stdin_pipe=launch.stdin is not None,
            keep_fds=launch.pass_fds,
        )
    except OSError as exc:
        if exc.filename is not None and os.fsdecode(exc.filename) == str(launch.cwd):
            raise _no_folder(launch, exc.errno or 0) from None
        raise _cannot_start(launch, exc) from None
    finally:
        os.close(log_fd)
    return child, child.pid


def _cannot_start(launch: Launch, exc: OSError) -> SpawnError:
    return cannot_start(launch.executable, launch.argv, launch.env, exc.errno, exc.strerror or str(exc))


def _no_folder(launch: Launch, code: int) -> SpawnError:
    return SpawnError(f"cannot enter the folder {launch.cwd} of role {launch.spec.role.name}: {os.strerror(code)}")


def _kill_when_said(fd: int, said: bytes) -> None:
    """A called-off start: on a thread of its own (the loop may be closing; the process waits for it at exit),
    read the rest of its status pipe, then kill the agent's group it names (its keeper records that and ends)."""

    def finish() -> None:
        data = bytearray(said)
        try:  # what is read gathers in ``data``, whether the read ends or times out
            asyncio.run(asyncio.wait_for(keeper.read_status(fd, data), KILL_WAIT))
        except (OSError, TimeoutError):
            pass
        finally:
            os.close(fd)
        agent = keeper.parse_status(bytes(data)).agent
        if agent is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(agent, signal.SIGKILL)

    threading.Thread(target=finish, name="called-off-start").start()
