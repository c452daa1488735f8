"""The orchestrator's end of an SDK run's socket channel: where its files are, the socket, and what is on disk.

A socket's path holds at most 107 bytes and a project root can be longer, so every bind and connect goes through the
short ``/proc/self/fd/<the folder's fd>/<name>`` (a ``chdir`` would move all the orchestrator's threads).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.agents.sdk.protocol import AnyEvent, ProtocolError, parse_event, parse_result

BACKLOG = 8


@dataclass(frozen=True)
class RunFiles:
    """One attempt's socket, event log and result file."""

    folder: Path
    attempt: int

    @property
    def socket(self) -> Path:
        return self.folder / f"{self.attempt}.sock"

    @property
    def events(self) -> Path:
        return self.folder / f"{self.attempt}.events.jsonl"

    @property
    def result(self) -> Path:
        return self.folder / f"{self.attempt}.result.json"


def run_files(root: Path, run_id: int, attempt: int) -> RunFiles:
    """Where the runner of this attempt keeps its socket and its records."""
    return RunFiles(root / ".orchestrator" / "runs" / str(run_id), attempt)


@contextlib.contextmanager
def _in_folder(folder: Path) -> Iterator[tuple[int, str]]:
    """The folder open, and the short path prefix that reaches into it."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd, f"/proc/self/fd/{fd}/"
    finally:
        os.close(fd)


def listen(files: RunFiles) -> socket.socket:
    """A listening socket at ``files.socket``, owner-only, for the runner to inherit (raises ``OSError``)."""
    files.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(files.folder, 0o700)  # made earlier by someone else with a looser umask: ours alone now
    name = files.socket.name
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _in_folder(files.folder) as (fd, prefix):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=fd)  # left by an attempt of a database that was reset
            listener.bind(prefix + name)
            os.chmod(name, 0o600, dir_fd=fd)  # the folder keeps others out meanwhile
        listener.listen(BACKLOG)
    except OSError:
        listener.close()
        raise
    return listener


def connect(files: RunFiles) -> socket.socket | None:
    """A connection to the runner's socket, made at once (non-blocking), or None when nobody listens there."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.setblocking(False)
    try:
        with _in_folder(files.folder) as (_fd, prefix):
            client.connect(prefix + files.socket.name)
    except OSError as exc:
        client.close()
        if exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN, errno.ENOTDIR):
            return None
        raise
    return client


def open_channel(files: RunFiles) -> tuple[socket.socket, socket.socket, dict[str, Any]]:
    """A runner's channel before it starts: the listening socket for it to inherit, a blocking connection to it
    (queued until the runner accepts, so no event is missed), and the spec's keys that name it to the runner.

    Raises ``OSError``; the caller closes the listener once the runner is started."""
    listener = listen(files)
    try:
        client = connect(files)
        if client is None:
            raise OSError(errno.ECONNREFUSED, "nobody listens on it")
    except OSError:
        listener.close()
        raise
    client.setblocking(True)
    keys = {"listen_fd": listener.fileno(), "socket_path": str(files.socket), "events_path": str(files.events)}
    return listener, client, {**keys, "result_path": str(files.result)}


def recorded_events(files: RunFiles) -> list[AnyEvent]:
    """What the runner left on disk: its result's latest events, else every whole line of its event log."""
    try:
        return list(parse_result(files.result.read_bytes()).events)
    except (OSError, ProtocolError):
        pass
    try:
        data = files.events.read_bytes()
    except OSError:
        return []
    events = []
    for line in data.split(b"\n")[:-1]:  # the last piece is empty, or a line the runner died writing
        try:
            events.append(parse_event(line))
        except ProtocolError:
            continue
    return events
