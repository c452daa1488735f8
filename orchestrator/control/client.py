"""The client of the control channel: one request to the orchestrator of a root, its answer or its refusal.

Standard library only, and nothing of the orchestrator above ``core``: the
client commands (``status``, ``cancel``, ``stop``, ...) start from this module, so
their start-up is Python's own plus a few milliseconds. A request is the JSON
object the server's ``protocol`` validates (``{"op": "cancel", "memo": ...}``); an
answer is ``{"ok": true, "result": {...}}`` or ``{"ok": false, "code": ..., "error":
...}``, its shape checked here by hand and a refusal raised as the error class its
code names (``errors.CONTROL_ERRORS``). Every wait has a deadline: past it the client raises ``DeadlineError``
(exit 11) naming the request it still waited for; the orchestrator answers a ``cancel``, ``interrupt`` or ``tell``
within ``ANSWER_WITHIN`` itself, saying what it still waits for, so ``LONG_WAIT`` only ends a reply that was lost.
"""

from __future__ import annotations

import _socket  # the C module under `socket`: what a client needs, without the wrapper's enums (about 4 ms a start)
import contextlib
import json
import os
import time
from collections.abc import Iterator

from orchestrator.core.errors import (
    CONTROL_ERRORS,
    ControlError,
    DeadlineError,
    NotRunningError,
    UnreachableError,
    UsageError,
)
from orchestrator.core.text import printable

TYPE_CHECKING = False  # typing's flag without importing typing: see tests/test_client_imports.py
if TYPE_CHECKING:
    from typing import Any, TypeAlias

    Root: TypeAlias = str | os.PathLike[str]  # a Path on the orchestrator's side, a path text in a client command

SOCKET_NAME = "control.sock"
UNIX_PATH_MAX = 100
CONNECT_PATIENCE = 2.0  # how long the client retries while the socket's backlog is full
CONNECT_RETRY = 0.05
ANSWER_WITHIN = 60.0  # the orchestrator's own deadline for a cancel, interrupt or tell: then it says what it awaits
LONG_WAIT = ANSWER_WITHIN + 10.0  # how long the client waits for those: their answer is due before


def socket_path(root: Root) -> str:
    """Where the orchestrator of ``root`` listens."""
    return os.path.join(root, ".orchestrator", SOCKET_NAME)


@contextlib.contextmanager
def short_path(path: Root) -> Iterator[str]:
    """A path short enough for AF_UNIX (108 bytes): long ones go through /proc/self/fd of their folder."""
    where = os.fspath(path)
    if len(os.fsencode(where)) < UNIX_PATH_MAX:
        yield where
        return
    folder, name = os.path.split(where)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)


def _connect(root: Root, patience: float) -> _socket.socket:
    """A socket connected to the orchestrator of ``root``, retrying up to ``patience`` seconds while its backlog
    is full (it is stopped, or swamped by connections it has not accepted yet)."""
    path = socket_path(root)
    deadline = time.monotonic() + patience
    while True:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        # never a blocking connect: on a full backlog it would wait for as long as the orchestrator does not accept
        sock.setblocking(False)
        try:
            with short_path(path) as where:
                sock.connect(where)
            return sock
        except BlockingIOError:
            sock.close()
            if time.monotonic() >= deadline:
                raise DeadlineError(
                    f"the orchestrator of {root} does not answer: its control socket has accepted no connection "
                    f"for {patience:g}s (is the process stopped or overloaded?)"
                ) from None
            time.sleep(CONNECT_RETRY)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            sock.close()
            raise NotRunningError(f"no orchestrator is running for {root}; start one with `orchestrator up`") from None
        except PermissionError:
            sock.close()
            raise UnreachableError(f"cannot reach the orchestrator of {root}: {_denied_why(path)}") from None
        except OSError as exc:  # the path itself is wrong (a symlink loop, a name too long): said with the path
            sock.close()
            raise UnreachableError(f"no orchestrator can be reached at {path}: {exc.strerror or exc}") from None
        except BaseException:
            sock.close()
            raise


def _denied_why(path: str) -> str:
    """Why connecting to the control socket was denied: another user's orchestrator, else a sandbox around this
    process (Codex's ``workspace-write`` shuts sockets unless its ``network_access`` is on)."""
    try:
        found = os.stat(path)
    except PermissionError:  # its folder shuts us out: whose it is says why
        try:
            mine = os.stat(os.path.dirname(path)).st_uid == os.getuid()
        except OSError:
            mine = False
        if mine:
            return f"permission denied on {os.path.dirname(path)} (its mode shuts you out; it should be 0700)"
        return "permission denied (it belongs to another user)"
    except OSError:
        return "permission denied"
    if found.st_uid != os.getuid():
        return "permission denied (it belongs to another user)"
    if found.st_mode & 0o600 != 0o600:
        return f"permission denied by its mode ({found.st_mode & 0o777:o}; it should be 600)"
    return (
        "the connection was denied by a sandbox around this process (for a Codex role: "
        "config: {sandbox_workspace_write.network_access: true})"
    )


def call(root: Root, op: str, timeout: float = 30.0, **args: Any) -> dict[str, Any]:
    """Send one request to the orchestrator of ``root``; raise ``NotRunningError`` or the refusal.

    ``timeout`` bounds the wait for the answer (``LONG_WAIT`` for a request that waits for runs to end); a socket
    whose backlog stays full is given up on after ``CONNECT_PATIENCE`` seconds either way.
    """
    try:
        line = (json.dumps({"op": op, **args}, ensure_ascii=False) + "\n").encode()
    except UnicodeEncodeError:  # a path resolved into a folder whose name is not UTF-8: no request can carry it
        said = ", ".join(f"'{printable(v)}'" for v in args.values() if isinstance(v, str) and printable(v) != v)
        raise UsageError(
            f"orchestrator {op}: {said} is not UTF-8 text (names and paths sent are); nothing was done"
        ) from None
    patience = min(CONNECT_PATIENCE, timeout)
    sock = _connect(root, patience)
    sock.settimeout(timeout)
    try:
        try:
            sock.sendall(line)
        except (BrokenPipeError, ConnectionResetError):
            pass  # it refused us and closed before reading; its one-line answer is still there to read
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                raise DeadlineError(_unanswered(root, op, args, "closed the connection without answering"))
            data += chunk
    except TimeoutError:
        raise DeadlineError(_unanswered(root, op, args, "did not answer", f" within {timeout:g}s")) from None
    except ConnectionError as exc:
        how = f"lost the connection ({exc.strerror or exc}) before answering"
        raise DeadlineError(_unanswered(root, op, args, how)) from None
    finally:
        sock.close()
    return _result(root, data)


def _unanswered(root: Root, op: str, args: dict[str, Any], how: str, after: str = "") -> str:
    """The line of a request sent and never answered (exit 11): it may have taken effect, or yet take it (a cancel
    of an orchestrator that crashed is finished by its next start)."""
    return (
        f"the orchestrator of {root} {how} `{_request(op, args)}`{after}: the request may have taken effect or yet "
        "take it (`orchestrator status` shows what runs, .orchestrator/orchestrator.log what it did)"
    )


def _request(op: str, args: dict[str, Any]) -> str:
    """A request as a person would have typed it, for the line of a wait that ran out."""
    target = args.get("memo") or (f"--role {args['role']}" if args.get("role") else None)
    return f"{op} {target}" if isinstance(target, str) else op


def _result(root: Root, data: bytes) -> dict[str, Any]:
    """The result of an answer line, or its refusal raised as the error class its code names."""
    try:
        answer = json.loads(data)
    except (ValueError, RecursionError):
        answer = None
    if isinstance(answer, dict) and answer.get("ok") is True and isinstance(answer.get("result") or {}, dict):
        return dict(answer.get("result") or {})
    if isinstance(answer, dict) and answer.get("ok") is False:
        code, error = answer.get("code"), answer.get("error")
        cls = CONTROL_ERRORS.get(code, ControlError) if isinstance(code, str) else ControlError
        raise cls(str(error) if error else "refused")
    raise ControlError(f"the orchestrator of {root} sent an answer that is not one: {data[:80]!r}")
