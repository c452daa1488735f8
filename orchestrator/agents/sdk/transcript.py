"""The runner's only writer: events to the socket channel, notes and the CLI's stderr to stderr, and the transcript.

The CLI's stderr is copied line by line and its tail kept, because the SDK's ``ProcessError`` holds only a
placeholder.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import deque
from pathlib import Path
from typing import IO, Any

from orchestrator.agents.sdk.broadcast import Broadcast
from orchestrator.agents.sdk.protocol import AnyEvent

STDERR_TAIL_LINES = 20


class Output:
    """Events to the socket channel, notes and CLI stderr to stderr, and the transcript file."""

    def __init__(self) -> None:
        self.transcript: IO[str] | None = None
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self.stderr_lines = 0
        self.channel: Broadcast | None = None  # the socket channel, once the spec has named it

    def open_transcript(self, path: str) -> None:
        """Append to the transcript at ``path`` from now on (a resumed run adds to its file)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        self.transcript = open(target, "a", encoding="utf-8")  # noqa: SIM115 - open for the whole run

    def event(self, event: AnyEvent) -> None:
        """One event for the orchestrator, on the socket channel; before it is open (a bad spec), in the log."""
        if self.channel is not None:
            self.channel.publish(event)
        else:
            self.note(event.line().rstrip("\n"))

    def note(self, text: str) -> None:
        """A line for the run's log, from the runner itself."""
        _write_all(2, f"sdk_runner: {text}\n")

    def cli_stderr(self, line: str) -> None:
        """The SDK's ``stderr`` callback: one line the CLI wrote."""
        self.stderr_tail.append(line)
        self.stderr_lines += 1
        _write_all(2, line + "\n")

    def record(self, entry: dict[str, Any]) -> None:
        """One transcript line, time-stamped; a transcript that cannot be written is noted once and dropped."""
        if self.transcript is None:
            return
        try:
            self.transcript.write(json.dumps({"ts": round(time.time(), 3), **entry}, default=repr) + "\n")
            self.transcript.flush()
        except OSError as exc:
            self.note(f"cannot write the transcript any more: {exc}")
            self.transcript = None

    def close(self, code: int) -> None:
        """Settle the socket channel with the exit ``code`` and close the transcript; safe to call twice."""
        if self.channel is not None:
            self.channel.settle(code)
        if self.transcript is not None:
            with contextlib.suppress(OSError):
                self.transcript.close()
            self.transcript = None


def _write_all(fd: int, text: str) -> None:
    """Unbuffered, so nothing is lost at exit; a reader that went away is not an error."""
    data = text.encode("utf-8", "replace")
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass
