"""A ``backend: sdk`` attempt under the wrapper on a Ray worker: the sdk runner, its events, transcript and controls.

The runner starts as it does locally, by this worker's Python, and the wrapper is its socket's one client. The spec is
the head's, with what only the worker knows filled in: the working folder, the transcript, the socket and ``cli_path``.
"""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.agents.claude_cli import resolve_cli_path
from orchestrator.agents.posix_child import popen_session
from orchestrator.agents.ray.wire import ControlAnswer, Payload, SdkEvent, TranscriptLines
from orchestrator.agents.sdk import channel
from orchestrator.agents.sdk.backend import RUNNER_MODULE, runner_environment
from orchestrator.agents.sdk.protocol import DoneEvent, ProtocolError, parse_event

TRANSCRIPT_CHUNK = 1024 * 1024  # the most transcript text one message carries


class SdkSession:
    """One sdk runner on this worker and what it has said that the head has not been sent yet."""

    def __init__(self, payload: Payload, folder: Path, wake: queue.Queue[bytes | None]) -> None:
        self.payload = payload
        self.transcript = folder / "transcript.jsonl"
        self.wake = wake  # the wrapper's output queue: an empty chunk makes its poll return at once
        self.events: queue.Queue[str] = queue.Queue()
        self.answers: list[ControlAnswer] = []
        self.closing = False  # the runner said ``done``: controls are refused from now on
        self.proc: subprocess.Popen[bytes] | None = None
        self.files = channel.RunFiles(folder, payload.attempt)
        self._socket: socket.socket | None = None
        self._offset = 0
        self._send = threading.Lock()
        self._reader: threading.Thread | None = None

    def start(self, env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen[bytes], bytes]:
        """Start the runner in ``cwd``, connected to its socket; return it and the spec for its stdin. Raises
        ``ValueError`` when ``cli_path`` is not on this node, ``OSError`` when the runner cannot start."""
        payload = self.payload
        assert payload.sdk_spec is not None
        cli_path = None
        if payload.cli_path:
            cli_path = resolve_cli_path(payload.cli_path, Path(payload.root))
            if cli_path is None:
                raise ValueError(f"cli_path {payload.cli_path!r} is not an executable file on this node")
        spec = dict(payload.sdk_spec)
        spec["options"] = {**(spec.get("options") or {}), "cwd": str(cwd), "cli_path": cli_path}
        spec["transcript"] = str(self.transcript)
        listener, client, transport = channel.open_channel(self.files)
        spec.update(transport)
        try:
            argv, pipe = [sys.executable, "-m", RUNNER_MODULE], subprocess.PIPE
            proc = popen_session(argv, runner_environment(env), cwd, pipe, pipe, (listener.fileno(),))
        except BaseException:
            client.close()
            raise
        finally:
            listener.close()  # the runner holds it now
        self.proc, self._socket = proc, client
        self._reader = threading.Thread(target=self._read_events, args=(client,), daemon=True)
        self._reader.start()
        return proc, (json.dumps(spec) + "\n").encode("utf-8")

    # ------------------------------------------------------------ runner -> head
    def _read_events(self, client: socket.socket) -> None:
        for raw in client.makefile("rb"):
            try:
                event = parse_event(raw)
            except ProtocolError:  # not a runner event: skipped, as the local backend does
                continue
            if isinstance(event, DoneEvent):
                self.closing = True
            self.events.put(json.dumps(event.wire()))
            self.wake.put(b"")

    def tick(self) -> Iterator[SdkEvent | TranscriptLines | ControlAnswer]:
        """What the runner said since the last tick: its events, whole new transcript lines, control answers."""
        lease = self.payload.lease
        while True:
            try:
                yield SdkEvent(lease=lease, line=self.events.get_nowait())
            except queue.Empty:
                break
        yield from self._transcript(final=False)
        answers, self.answers = self.answers, []
        yield from answers

    def finish(self) -> Iterator[SdkEvent | TranscriptLines | ControlAnswer]:
        """Every event and transcript line the runner left; call it once the runner's tree is dead, before ``Ended``."""
        if self._reader is not None:
            self._reader.join(timeout=2)
        if self._socket is not None:
            self._socket.close()
        yield from self.tick()
        yield from self._transcript(final=True)

    def _transcript(self, final: bool) -> Iterator[TranscriptLines]:
        try:
            with open(self.transcript, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read(TRANSCRIPT_CHUNK if not final else -1)
        except OSError:
            return
        if not final and len(data) < TRANSCRIPT_CHUNK:
            data = data[: data.rfind(b"\n") + 1]  # whole lines only: the runner may be writing the next one
        if data:
            self._offset += len(data)
            yield TranscriptLines(lease=self.payload.lease, data=data.decode("utf-8", errors="replace"))

    # ------------------------------------------------------------ head -> runner
    def deliver(self, controls: list[dict[str, Any]]) -> None:
        """Write each control line from the mailbox to the runner; its answer goes out at the next tick."""
        for control in controls:
            what, ident = str(control.get("what", "control")), str(control.get("id", ""))
            refused = None
            if self.closing or self.proc is None or self.proc.poll() is not None or not self._write(control["line"]):
                refused = f"run {self.payload.run_id}'s agent session has already ended; nothing to {what}"
            self.answers.append(ControlAnswer(lease=self.payload.lease, id=ident, refused=refused))

    def _write(self, line: str) -> bool:
        """One line to the runner's socket; False when it is closed (the runner has gone)."""
        if self._socket is None:
            return False
        with self._send:
            try:
                self._socket.sendall(line.encode("utf-8"))
            except OSError:
                return False
        return True
