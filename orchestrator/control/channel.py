"""The control channel: a Unix socket under ``.orchestrator/``, one JSON object per line, each answered.

Only the owner can use it: the folder is mode 0700, the socket 0600, and the
server also checks the peer's uid (SO_PEERCRED). A request is
``{"op": "status" | "stop" | "cancel" | "interrupt" | "tell", ...}``; the answer is
``{"ok": true, "result": {...}}`` or ``{"ok": false, "code": "...", "error": "..."}``.
A malformed request gets an error answer and never stops the loop; a silent
client is dropped after ``IDLE_TIMEOUT`` and never blocks another client.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.core.errors import CONTROL_ERRORS, ControlError, NotRunningError, OrchestratorError, control_code

if TYPE_CHECKING:
    import asyncio  # imported where the server runs: the CLI client never needs it (about 30 ms)

    from orchestrator.supervisor.loop import Supervisor

SOCKET_NAME = "control.sock"
IDLE_TIMEOUT = 30.0
CLOSE_GRACE = 5.0  # how long closing waits for answers still being sent
MAX_LINE = 4 * 1024 * 1024
UNIX_PATH_MAX = 100


def socket_path(root: Path) -> Path:
    return root / ".orchestrator" / SOCKET_NAME


@contextlib.contextmanager
def _short(path: Path):  # type: ignore[no-untyped-def]
    """A path short enough for AF_UNIX (108 bytes): long ones go through /proc/self/fd of their folder."""
    if len(os.fsencode(str(path))) < UNIX_PATH_MAX:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


class ControlServer:
    """Serves the socket from the supervisor's loop."""

    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup
        self.path = socket_path(sup.root)
        self.server: asyncio.AbstractServer | None = None
        self.clients: set[asyncio.Task[Any]] = set()
        self.writers: set[asyncio.StreamWriter] = set()
        self.answering: set[asyncio.Future[None]] = set()

    async def start(self) -> None:
        import asyncio

        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # we hold the root's lock, so a socket left here is stale
        old_umask = os.umask(0o177)
        try:
            with _short(self.path) as where:
                self.server = await asyncio.start_unix_server(self._client, path=where, limit=MAX_LINE)
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)

    async def close(self) -> None:
        import asyncio

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
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import asyncio

        task = asyncio.current_task()
        if task is not None:
            self.clients.add(task)
        self.writers.add(writer)
        try:
            if not _peer_allowed(writer):
                await _send(writer, {"ok": False, "code": "error", "error": "permission denied: not the socket's owner"})
                return
            while True:
                try:
                    line = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT)
                except asyncio.TimeoutError:
                    return
                except (ValueError, asyncio.LimitOverrunError):
                    await _send(writer, {"ok": False, "code": "error", "error": f"request longer than {MAX_LINE} bytes"})
                    return
                if not line:
                    return
                answered = asyncio.get_running_loop().create_future()
                self.answering.add(answered)
                try:
                    await _send(writer, await self._answer(line))
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

    async def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            request = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            return {"ok": False, "code": "error", "error": "malformed request: expected one JSON object per line"}
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            return {"ok": False, "code": "error", "error": 'malformed request: expected {"op": "..."}'}
        try:
            result = await self.sup.request(request["op"], request)
        except OrchestratorError as exc:
            return {"ok": False, "code": control_code(exc), "error": str(exc)}
        except Exception:  # noqa: BLE001 - a bad request must never stop the loop
            self.sup.console.error(f"control request {request.get('op')!r} failed:\n{traceback.format_exc()}")
            return {"ok": False, "code": "error", "error": "internal error; see .orchestrator/orchestrator.log"}
        return {"ok": True, "result": result}


def _peer_allowed(writer: asyncio.StreamWriter) -> bool:
    sock = writer.get_extra_info("socket")
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return True
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return True
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid in (os.getuid(), 0)


async def _send(writer: asyncio.StreamWriter, answer: dict[str, Any]) -> None:
    writer.write((json.dumps(answer, ensure_ascii=False, default=str) + "\n").encode())
    await writer.drain()


def call(root: Path, op: str, timeout: float | None = 30.0, **args: Any) -> dict[str, Any]:
    """Send one request to the orchestrator of ``root``; raise ``NotRunningError`` or the refusal."""
    path = socket_path(root)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        with _short(path) as where:
            sock.connect(where)
    except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
        sock.close()
        raise NotRunningError(f"no orchestrator is running for {root}; start one with `orchestrator up`") from None
    except PermissionError:
        sock.close()
        raise NotRunningError(f"cannot reach the orchestrator of {root}: permission denied (it belongs to another user)") from None
    try:
        try:
            sock.sendall((json.dumps({"op": op, **args}, ensure_ascii=False) + "\n").encode())
        except (BrokenPipeError, ConnectionResetError):
            pass  # it refused us and closed before reading; its one-line answer is still there to read
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                raise ControlError(f"the orchestrator of {root} closed the connection without an answer")
            data += chunk
    except socket.timeout:
        raise ControlError(f"the orchestrator of {root} did not answer within {timeout:g}s") from None
    except ConnectionError as exc:
        raise ControlError(f"lost the connection to the orchestrator of {root}: {exc.strerror or exc}") from None
    finally:
        sock.close()
    answer = json.loads(data)
    if answer.get("ok"):
        return dict(answer.get("result") or {})
    raise CONTROL_ERRORS.get(answer.get("code", "error"), ControlError)(answer.get("error", "refused"))
