"""The runner's socket channel: its events to every connected orchestrator and to disk, controls back into the loop.

A connection that goes away is only dropped: the session goes on, and an orchestrator may come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable

from orchestrator.agents.sdk.protocol import AnyEvent, RunnerResult, RunnerSpec, read_lines

CONTROL_LINE_LIMIT = 4 * 1024 * 1024  # a tell can be long; this only bounds a broken client


class Broadcast:
    """The event log, the latest events, and the connected orchestrators."""

    def __init__(self, spec: RunnerSpec, on_control: Callable[[str], None]) -> None:
        """``on_control`` is given each line a connected orchestrator sends (it posts it to the session's queue)."""
        if spec.listen_fd is None or spec.events_path is None or spec.result_path is None:
            raise ValueError("the spec names no socket channel (listen_fd, events_path and result_path)")
        self.spec = spec
        self.on_control = on_control
        self.latest: dict[str, tuple[int, AnyEvent]] = {}  # kind -> (its number, the event)
        self.count = 0
        self.clients: set[asyncio.StreamWriter] = set()
        self.listener = socket.socket(fileno=spec.listen_fd)
        self.listener.set_inheritable(False)  # the CLI and its tools must not keep the socket alive
        self.server: asyncio.AbstractServer | None = None
        self.log_fd: int | None = os.open(
            spec.events_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
        )
        self.result_path = spec.result_path
        self.settled = False

    async def start(self) -> None:
        """Accept connections from now on."""
        self.server = await asyncio.start_unix_server(self._serve, sock=self.listener, limit=CONTROL_LINE_LIMIT)

    def publish(self, event: AnyEvent) -> None:
        """One event: to the log, into the latest, and to every connected orchestrator."""
        line = event.line().encode("utf-8")
        self.count += 1
        self.latest[event.wire()["event"]] = (self.count, event)
        if self.log_fd is not None:
            try:
                os.write(self.log_fd, line)  # one write of a line under O_APPEND: a reader never sees half of it
            except OSError:
                self.log_fd = None
        for writer in list(self.clients):
            self._send(writer, line)

    def backlog(self) -> list[AnyEvent]:
        """The latest event of each kind, in the order they happened: enough to restore every figure."""
        return [event for _n, event in sorted(self.latest.values(), key=lambda item: item[0])]

    def settle(self, code: int) -> None:
        """At exit: the result file (atomically), then the socket and the log closed; safe to call twice."""
        if self.settled:
            return
        self.settled = True
        result = RunnerResult(code=code, events=self.backlog())
        tmp = f"{self.result_path}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, result.model_dump_json().encode("utf-8"))
            finally:
                os.close(fd)
            os.replace(tmp, self.result_path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if self.spec.socket_path:
            with contextlib.suppress(OSError):
                os.unlink(self.spec.socket_path)
        with contextlib.suppress(OSError):
            self.listener.close()
        if self.log_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.log_fd)
            self.log_fd = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # the backlog and the registration happen with no await between: no event is missed or sent twice
        for event in self.backlog():
            self._send(writer, event.line().encode("utf-8"))
        self.clients.add(writer)
        try:
            async for line in read_lines(reader):
                if line.strip():
                    self.on_control(line.decode("utf-8", "replace"))
        finally:
            self.clients.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    def _send(self, writer: asyncio.StreamWriter, line: bytes) -> None:
        if writer.is_closing():
            self.clients.discard(writer)
            return
        try:
            writer.write(line)  # buffered by the transport; an orchestrator that went away is dropped
        except (ConnectionError, OSError, RuntimeError):
            self.clients.discard(writer)
