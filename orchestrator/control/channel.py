"""The control channel: a Unix socket under ``.orchestrator/``, one JSON object per line, each answered.

Only the owner can use it: the folder is mode 0700, the socket 0600, and the
server also checks the peer's uid (SO_PEERCRED). That check fails closed: a peer
whose credentials cannot be read (no SO_PEERCRED, an error reading it) is refused
like another user's, with one line in the log saying why. The peer's pid (the
same credentials) goes to ``handle`` with each request: the supervisor's gate
tells a person from an agent by it (``callers``). Requests and answers are the
models of ``protocol``; the server validates each line into a request model and
hands it to the ``handle`` it was given, so it never dispatches on a raw dict. A
malformed request (too long, too deeply nested, not JSON, a field of the wrong
type) gets an error answer and never stops the loop; a silent client is dropped
after ``IDLE_TIMEOUT`` and never blocks another client.

The client side is ``control.client`` (standard library only); this module is the
server, imported by the supervisor, never by a client command.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.control.client import (  # noqa: F401 - call and socket_path: one import for the supervisor
    SOCKET_NAME,
    call,
    short_path,
    socket_path,
)
from orchestrator.control.protocol import Answer, FeatureRequest, Request, parse_request
from orchestrator.core.errors import OrchestratorError, control_code

IDLE_TIMEOUT = 30.0
CLOSE_GRACE = 5.0  # how long closing waits for answers still being sent
MAX_LINE = 4 * 1024 * 1024
INTERNAL_ERROR = "internal error; see .orchestrator/orchestrator.log"


class ControlServer:
    """Serves the socket at ``path`` from the supervisor's loop.

    ``handle`` answers one validated request, given with its ``Peer``, with the result dict; an
    ``OrchestratorError`` it raises becomes a refusal with its wire code, any
    other exception is logged through ``log_error`` (traceback included) and
    answered as an internal error. ``peer_uid`` reads a connection's uid (None: no credentials to be had); a
    refused connection gets one line through ``log`` (``log_error`` when not given); ``more``: the requests features
    registered, by ``op``.
    """

    def __init__(
        self,
        path: str | Path,
        handle: Callable[[Request | FeatureRequest, Peer], Awaitable[dict[str, Any]]],
        log_error: Callable[[str], None],
        *,
        log: Callable[[str], None] | None = None,
        peer_uid: Callable[[socket.socket | None], int | None] | None = None,
        more: Mapping[str, type[FeatureRequest]] | None = None,
    ) -> None:
        self.path = Path(path)
        self.more = more  # the features' requests, by ``op``
        self.handle = handle
        self.log_error = log_error
        self.log = log or log_error
        self.peer_uid = peer_uid or read_peer_uid
        self.server: asyncio.AbstractServer | None = None
        self.clients: set[asyncio.Task[Any]] = set()
        self.writers: set[asyncio.StreamWriter] = set()
        self.answering: set[asyncio.Future[None]] = set()

    async def start(self) -> None:
        """Listen on ``path``: a folder of mode 0700, a socket of mode 0600."""
        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # we hold the root's lock, so a socket left here is stale
        # bound under a name of its own and renamed into place once it listens: a client that finds the socket
        # is never refused by one bound but not yet listening (and told that no orchestrator runs)
        binding = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        with contextlib.suppress(FileNotFoundError):
            binding.unlink()
        old_umask = os.umask(0o177)
        try:
            with short_path(binding) as where:
                self.server = await asyncio.start_unix_server(self._client, path=where, limit=MAX_LINE)
        finally:
            os.umask(old_umask)
        os.chmod(binding, 0o600)
        os.replace(binding, self.path)

    async def close(self) -> None:
        """Stop listening, let answers being sent go out, drop idle clients, remove the socket."""
        if self.server is not None:
            self.server.close()
        # a request already answered (say the cancel that ended the last run, and so the orchestrator) still gets its
        # answer out; idle clients are simply dropped
        if self.answering:
            await asyncio.wait(list(self.answering), timeout=CLOSE_GRACE)
        # end idle clients by closing their connection (their read then ends) rather than by cancelling their
        # task: asyncio 3.11's done-callback for a connection task raises on a cancelled one and prints it
        for writer in list(self.writers):
            writer.close()
        if self.clients:
            await asyncio.wait(list(self.clients), timeout=CLOSE_GRACE)
        for task in list(self.clients):
            task.cancel()  # only a task still stuck after that; it swallows the cancel, see _client
        self.remove_file()

    def remove_file(self) -> None:
        """Remove the socket's file (closing does; the shutdown asks again should closing have raised), so that no
        client is told an orchestrator runs here."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.clients.add(task)
        self.writers.add(writer)
        try:
            sock = writer.get_extra_info("socket")
            refusal = peer_refusal(sock, self.peer_uid)
            if refusal is not None:
                self.log(f"control: refused a connection: {refusal}")
                await self._send(writer, Answer.failure("error", f"permission denied: {refusal}"))
                return
            peer = Peer(read_peer_pid(sock))
            while True:
                try:
                    line = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT)
                except TimeoutError:
                    return
                except (ValueError, asyncio.LimitOverrunError):
                    # the rest of the line may still be arriving: nothing after it could be read as a request
                    await self._send(
                        writer, Answer.failure("usage", f"malformed request: longer than {MAX_LINE} bytes")
                    )
                    return
                if not line:
                    return
                answered = asyncio.get_running_loop().create_future()
                self.answering.add(answered)
                try:
                    await self._send(writer, await self._answer(line, peer))
                finally:
                    self.answering.discard(answered)
                    answered.set_result(None)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the connection ends here either way; nothing is left to answer
        finally:
            self.writers.discard(writer)
            if task is not None:
                self.clients.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _answer(self, line: bytes, peer: Peer) -> Answer:
        """The answer to one request line; never raises (but for the connection's own cancellation)."""
        op = "?"
        try:
            request = parse_request(line, self.more)
            op = request.op
            return Answer.success(await self.handle(request, peer))
        except OrchestratorError as exc:
            return Answer.failure(control_code(exc), str(exc))
        except Exception:  # noqa: BLE001 - a bad request (or a bad result) must never stop the loop
            self.log_error(f"control request {op!r} failed:\n{traceback.format_exc()}")
            return Answer.failure("error", INTERNAL_ERROR)

    async def _send(self, writer: asyncio.StreamWriter, answer: Answer) -> None:
        try:
            line = answer.to_line()
        except Exception:  # noqa: BLE001 - a result JSON cannot hold (a cycle, say) is this server's fault
            self.log_error(f"control answer could not be sent:\n{traceback.format_exc()}")
            line = (json.dumps({"ok": False, "code": "error", "error": INTERNAL_ERROR}) + "\n").encode()
        writer.write(line)
        await writer.drain()


@dataclass(frozen=True)
class Peer:
    """The process at the other end of a connection, as the kernel names it (pid 0: it could not)."""

    pid: int


def read_peer_pid(sock: socket.socket | None) -> int:
    """The pid of the process that connected ``sock`` (SO_PEERCRED); 0 when it cannot be had (no credentials,
    or a process in a pid namespace this one cannot see)."""
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return 0
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return 0
    return int(struct.unpack("3i", creds)[0])


def read_peer_uid(sock: socket.socket | None) -> int | None:
    """The uid of the process at the other end of ``sock`` (SO_PEERCRED); None when the platform or the
    connection gives no credentials; an ``OSError`` reading them is raised."""
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def peer_refusal(sock: socket.socket | None, peer_uid: Callable[[socket.socket | None], int | None]) -> str | None:
    """Why the peer of ``sock`` may not use the channel, or None when it is the owner (or root).

    Any doubt refuses: the channel can stop every agent, so a peer that cannot be identified is not let in.
    """
    try:
        uid = peer_uid(sock)
    except OSError as exc:
        return f"could not check who is connecting (SO_PEERCRED failed: {exc.strerror or exc})"
    if uid is None:
        return "could not check who is connecting (no peer credentials on this socket)"
    if uid not in (os.getuid(), 0):
        return f"uid {uid} is not the socket's owner (uid {os.getuid()})"
    return None
