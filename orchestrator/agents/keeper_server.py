"""The keeper server: one long-lived process that starts the keepers, so the loop never waits for their exec.

``os.posix_spawn`` is a ``vfork`` that returns once the child has exec'd, and CPython
holds its lock all that while: a start on any thread stopped the loop for about half a
millisecond, more on a busy machine where the child waits for a CPU. The server
(``orchestrator-keeper --serve``, the keeper binary itself) takes each start as one
message on a socket, with the keeper's status pipe and stdin attached, and forks the
keeper without an exec (a fork of a small C process; an exec cost a static binary's
start-up as well, about 0.3 ms of it in glibc's CPU checks on this VM). The keeper
writes "K<pid>" first on its status pipe, which the start reads anyway for the agent's
pid (so a server killed just after its fork still leaves the keeper known), and the
server reports every keeper's end as "X PID STATUS" on its one socket, so ends need no
pidfd each and come in batches. A forked keeper shows its run's marks in its environment
(``/proc/PID/environ``, where adoption looks for them): the server is started with one
padding variable, whose block each keeper overwrites.

A keeper started so is the server's child, not ours: nothing about it changes for a
restart (it outlives the server as it outlives the orchestrator), for adoption or for
the kill ladder. When the server is gone (it exits at the socket's end of file; a crash
or a stray signal is the rest), the keepers it started become ours, as subreaper, and
are watched with pidfds again; the next start starts a new server. A start it cannot
take (an SDK run's passed descriptors, a request over the socket's size, no server on
this system) is spawned by the orchestrator as before.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from orchestrator.agents.posix_child import PosixChild, null_fd

STATUS_FD = 3  # where a served keeper finds its status pipe (the server puts it there)
MAX_REQUEST = 200_000  # bytes; a start with more (a long prompt given as an argument) is spawned directly
SLOT = 16384  # bytes of the server's environment that a keeper it forks overwrites with its marks
_BUFFER = 1 << 20  # asked of the socket; the system may give less, and then a large start goes the direct way


class ServedChild(PosixChild):
    """A keeper started by the server: its end comes from the server's report (or a pidfd once it is gone)."""

    def __init__(self, pid: int, stdin: int | None, server: KeeperServer, sent_at: float) -> None:
        self._server = server
        self.sent_at = sent_at  # when its request went out: no end reported before that can be its own
        super().__init__(pid, stdin)

    def _watch(self) -> None:
        self._server.watch(self)

    def watch_alone(self) -> None:
        """The server is gone: this keeper is (or soon is) our child, as subreaper; watched with a pidfd."""
        PosixChild._watch(self)


class KeeperServer:
    """The server process, its socket in the loop's selector, and the keepers it started that have not ended."""

    def __init__(self, binary: Path, loop: asyncio.AbstractEventLoop) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with contextlib.suppress(OSError):
                ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _BUFFER)
                theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _BUFFER)
            null = null_fd()
            actions = [(os.POSIX_SPAWN_DUP2, null, n) for n in (0, 1, 2)] + [(os.POSIX_SPAWN_DUP2, theirs.fileno(), 3)]
            self.pid = os.posix_spawn(
                str(binary),
                [str(binary), "--serve", "3"],
                {"ORCHESTRATOR_KEEPER_SLOT": " " * SLOT},  # the block each forked keeper shows its marks in
                file_actions=actions,
                setsid=True,
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD),  # ignored SIGCHLD: ends never seen
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self.sock = ours
        self.loop = loop
        self.alive = True
        self.watched: dict[int, ServedChild] = {}
        self.ended: dict[int, tuple[int, float]] = {}  # (code, when): ends reported before their start read the pid
        self.waiting: dict[float, int] = {}  # send time -> starts sent then whose status pipe is still being read
        loop.add_reader(ours.fileno(), self._read)

    def send(self, argv: Sequence[str], env: dict[str, str], status: int, stdin: int | None) -> float | None:
        """Ask for one keeper: the time it was sent (give it to ``done``), or None when this start cannot go
        this way (then spawn it directly)."""
        if not self.alive:
            return None
        variables = [os.fsencode(f"{k}={v}") for k, v in env.items()]
        words = [os.fsencode(word) for word in argv] + variables
        head = f"{int(stdin is not None)} {len(argv)} {len(env)}".encode()
        data = b"\0".join([head, *words]) + b"\0"
        if len(data) > MAX_REQUEST or data.count(b"\0") != len(words) + 1:  # too big, or a NUL inside a word
            return None
        if sum(len(v) + 1 for v in variables if v.startswith(b"KEEPER_")) > SLOT:
            return None  # the marks would not all show in the keeper's environment, where adoption looks for them
        fds = array.array("i", [status] if stdin is None else [status, stdin])
        sent_at = time.monotonic()
        try:
            self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds.tobytes())])
        except OSError:  # full (the server is behind) or too large for the socket: the direct way this time
            return None
        self.waiting[sent_at] = self.waiting.get(sent_at, 0) + 1
        return sent_at

    def done(self, sent_at: float) -> None:
        """The start sent at ``sent_at`` has read its status pipe (or given up on it)."""
        left = self.waiting.get(sent_at, 0) - 1
        if left > 0:
            self.waiting[sent_at] = left
        else:
            self.waiting.pop(sent_at, None)

    def watch(self, child: ServedChild) -> None:
        found = self.ended.get(child.pid)
        if found is not None and found[1] >= child.sent_at:  # else an earlier keeper's, whose pid it now has
            del self.ended[child.pid]
            child._ended(found[0])
        elif self.alive:
            self.watched[child.pid] = child
        else:
            child.watch_alone()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._lost(expected=False)
                return
            kind, pid, status = data.split()
            if kind != b"X":
                continue
            code = os.waitstatus_to_exitcode(int(status))
            child = self.watched.pop(int(pid), None)
            if child is not None:
                child._ended(code)
                continue
            # its start has not read the keeper's pid yet (two channels, either may be read first): kept for it,
            # and dropped once no start sent before it is still waiting (the end of a start called off)
            now = time.monotonic()
            oldest = min(self.waiting, default=now)
            self.ended = {p: e for p, e in self.ended.items() if e[1] >= oldest}
            self.ended[int(pid)] = (code, now)

    def _lost(self, expected: bool) -> None:
        """The server ended: what it started is watched one by one from now on."""
        global _losses
        _losses += 0 if expected else 1
        self.alive = False
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()
        with contextlib.suppress(ChildProcessError):  # or later, by the orphan reaper
            os.waitpid(self.pid, os.WNOHANG)
        watched, self.watched = self.watched, {}
        if self.loop.is_closed():
            return
        for child in watched.values():
            child.watch_alone()

    def close(self) -> None:
        """End the server (it exits at end of file); keepers it started are not touched."""
        if self.alive:
            self._lost(expected=True)


_servers: dict[int, KeeperServer] = {}
_losses = 0  # servers that ended on their own; past LOSSES_ALLOWED, every keeper is spawned directly
LOSSES_ALLOWED = 3


def server_for(binary: Path) -> KeeperServer | None:
    """The running loop's keeper server, started on first use; None where there can be none."""
    if not sys.platform.startswith("linux") or _losses >= LOSSES_ALLOWED:
        return None
    loop = asyncio.get_running_loop()
    server = _servers.get(id(loop))
    if server is not None and server.alive and server.loop is loop:
        return server
    for key, old in list(_servers.items()):  # servers of closed loops (tests run many) end here
        if old.loop.is_closed() or old.loop is loop:
            old.close()
            del _servers[key]
    try:
        server = KeeperServer(binary, loop)
    except OSError:
        return None
    _servers[id(loop)] = server
    return server
