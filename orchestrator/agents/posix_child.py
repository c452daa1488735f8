"""Child processes started and watched without asyncio's subprocess layer: a keeper, or an agent without one.

``create_subprocess_exec`` costs the loop's thread about 0.2 ms a start more than the spawn, for pipes, a transport and
a child watcher that a keeper does not need. A child's end is a pidfd in the loop's selector, or a look every ``POLL``
seconds where there is no pidfd (Linux before 5.3, a seccomp filter).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from orchestrator.agents import procs

POLL = 0.05  # seconds between looks for a process's end where there is no pidfd


@functools.cache
def null_fd() -> int:
    """``/dev/null``, opened once for every spawn's stdin, stdout and stderr."""
    return _above_stdio(os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC))


def _above_stdio(fd: int) -> int:
    """``fd`` moved to 3 or above (an orchestrator started with a closed stdin gets 0 back from ``open``): a dup2
    onto itself would leave its close-on-exec flag set."""
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


async def fd_ready(fd: int, write: bool = False) -> None:
    """Return once ``fd`` is readable (or, with ``write``, writable), in the running loop's selector."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    add, remove = (loop.add_writer, loop.remove_writer) if write else (loop.add_reader, loop.remove_reader)
    add(fd, wake)
    try:
        await ready
    finally:
        remove(fd)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


async def process_ended(ref: procs.ProcRef) -> None:
    """Return once the process ``ref`` (not necessarily our child) has ended: a pidfd, or a look every ``POLL``."""
    fd = _pidfd(ref.pid) if ref.process() is not None else None
    if fd is None:
        while ref.process() is not None:
            await asyncio.sleep(POLL)
        return
    try:
        await fd_ready(fd)
    finally:
        os.close(fd)


Reap = Callable[[], "int | None"]


class PosixChild:
    """A child of ours: its pid, its exit status once it has exited, and its stdin pipe.

    ``reap`` collects its status once it has ended (None: not yet); by default ``waitpid``. The child is
    spared from ``procs.reap_orphans`` until then."""

    def __init__(self, pid: int, stdin: int | None, reap: Reap | None = None) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._stdin = stdin
        self._collect = reap or self._waitpid
        self._loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = self._loop.create_future()
        procs.spare(pid)
        self._watch()

    async def wait(self) -> int:
        """The exit status as asyncio gives it: the code, or minus the signal that ended it."""
        return await asyncio.shield(self._exited)

    def send(self, data: bytes) -> asyncio.Future[None] | None:
        """Write ``data`` to the child's stdin, then close it: at once when the pipe takes it all (None), or in a
        task that finishes the write (returned)."""
        fd, self._stdin = self._stdin, None
        if fd is None:
            return None
        view = memoryview(data)
        try:
            view = view[os.write(fd, view) :] if view else view
        except BlockingIOError:
            pass
        except OSError:  # it closed its stdin already: its exit status tells the rest
            os.close(fd)
            return None
        if not view:
            os.close(fd)
            return None
        return asyncio.ensure_future(self._send_rest(fd, view))

    async def _send_rest(self, fd: int, view: memoryview) -> None:
        try:
            while view:
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    await fd_ready(fd, write=True)
        except OSError:
            pass  # the child did not read all of it
        finally:
            os.close(fd)

    def close_stdin(self) -> None:
        fd, self._stdin = self._stdin, None
        if fd is not None:
            os.close(fd)

    def _watch(self) -> None:
        pidfd = _pidfd(self.pid)
        if pidfd is None:
            self._loop.call_later(POLL, self._reap, POLL)
            return

        def readable() -> None:
            self._loop.remove_reader(pidfd)
            os.close(pidfd)
            self._reap(0.005)

        self._loop.add_reader(pidfd, readable)

    def _reap(self, again: float) -> None:
        code = self._collect()
        if code is None:  # not ended yet (or a readable pidfd, no zombie yet): look again in a moment
            self._loop.call_later(again, self._reap, again)
            return
        procs.unspare(self.pid)
        self.returncode = code
        if not self._exited.done():
            self._exited.set_result(code)

    def _waitpid(self) -> int | None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else: its status is lost (a keeper's record is not)
            return 255
        return os.waitstatus_to_exitcode(status) if pid else None


def spawn(argv: Sequence[str], env: dict[str, str], *, stdin_pipe: bool, keep_fds: Sequence[int] = ()) -> PosixChild:
    """Start ``argv[0]`` (a full path) in a session of its own, in our folder, with ``env``; raises ``OSError``.

    Its stdin is a pipe (``PosixChild.send``) or ``/dev/null``, its stdout and stderr ``/dev/null``; it inherits
    ``keep_fds`` and none of ours else (Python opens every descriptor close-on-exec; what our parent left inheritable,
    the keeper closes). Returns once the child has exec'd (glibc's ``posix_spawn`` is a vfork), the child spared from
    ``procs.reap_orphans`` on this same thread, so no reaper runs between."""
    null = null_fd()
    with _stdin_pipe(stdin_pipe, above_stdio=True) as (read_end, write_end):
        actions = [
            (os.POSIX_SPAWN_DUP2, null if read_end is None else read_end, 0),
            (os.POSIX_SPAWN_DUP2, null, 1),
            (os.POSIX_SPAWN_DUP2, null, 2),
        ]
        for fd in keep_fds:  # only for this spawn: subprocess closes what it does not pass
            os.set_inheritable(fd, True)
        try:
            pid = os.posix_spawn(
                argv[0], list(argv), env, file_actions=actions, setsid=True, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ)
            )
        finally:
            for fd in keep_fds:
                os.set_inheritable(fd, False)
    return PosixChild(pid, write_end)


def start_direct(
    argv: Sequence[str],
    env: dict[str, str],
    *,
    cwd: Path,
    output: int,
    stdin_pipe: bool,
    keep_fds: Sequence[int] = (),
) -> PosixChild:
    """Start ``argv`` (``argv[0]`` a full path) in a session of its own and in ``cwd``, which ``posix_spawn`` cannot
    enter; raises ``OSError`` (its ``filename`` names the folder when that could not be entered). The status is
    collected by ``Popen.poll``, so the ``Popen`` never reaps a pid that is no longer its own."""
    with _stdin_pipe(stdin_pipe) as (read_end, write_end):
        proc = popen_session(argv, env, cwd, read_end if read_end is not None else subprocess.DEVNULL, output, keep_fds)
    return PosixChild(proc.pid, write_end, proc.poll)


def popen_session(
    argv: Sequence[str], env: dict[str, str], cwd: Path, stdin: int, output: int, pass_fds: Sequence[int] = ()
) -> subprocess.Popen[bytes]:
    """``argv`` started in ``cwd`` and a session of its own, its stdout and stderr both ``output`` (a descriptor, or
    ``subprocess.PIPE``): every agent without a keeper, here or on a Ray worker. Raises ``OSError``."""
    return subprocess.Popen(
        list(argv),
        stdin=stdin,
        stdout=output,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=env,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )


@contextlib.contextmanager
def _stdin_pipe(wanted: bool, above_stdio: bool = False) -> Iterator[tuple[int | None, int | None]]:
    """A child's stdin pipe (read end, non-blocking write end), or (None, None). The read end is closed once the
    start is over (the child has its copy); the write end only when the start fails (else the ``PosixChild``
    owns it). ``above_stdio``: the read end moved to 3 or above, for a ``posix_spawn`` dup2 onto 0."""
    if not wanted:
        yield None, None
        return
    read_end, write_end = os.pipe()
    if above_stdio:
        read_end = _above_stdio(read_end)
    os.set_blocking(write_end, False)
    try:
        yield read_end, write_end
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
