"""The one printer: every line for people, on the terminal and in the log file.

Commands print through the functions here (``say``, ``fail``, ``print_json``; a feature's own view sits beside its
command and prints through them); ``orchestrator up`` prints through a ``Console``, whose lines go to the log file
(``console.log``, rotated) and to the terminal, as plain lines such as
``2026-11-30 09:12:01 [builder] start B-031 "three articles" (run 7)`` or, on a TTY, as the live view
(``console.live``), redrawn from the supervisor's loop (never from another thread).

This package imports only the standard library at its top: the client commands (``status``, ``cancel``,
``stop``, ...) print through it; rich is imported where ``up``'s live view or a rich table is drawn.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from collections import deque

from orchestrator import tables
from orchestrator.console.log import LOG_BACKUPS, LOG_MAX_BYTES, RotatingLog, open_log
from orchestrator.core.text import one_event
from orchestrator.core.text import printable as _printable
from orchestrator.core.turn import at_turn_end

TYPE_CHECKING = False  # typing's flag without importing typing: see tests/test_client_imports.py
if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable, Iterable
    from pathlib import Path
    from typing import Any, TextIO

    from rich.console import Group
    from rich.live import Live

    from orchestrator.core.run import Run
    from orchestrator.core.snapshot import Snapshot
    from orchestrator.core.states import RunState

RECENT_EVENTS = 12
REFRESH = 0.25
NOT_A_TTY_WIDTH = tables.NOT_A_TTY_WIDTH
__all__ = ["LOG_BACKUPS", "LOG_MAX_BYTES", "Console", "RotatingLog", "fail", "print_json", "say", "stamp"]


_stamped: tuple[int, str] = (-1, "")


def stamp() -> str:
    """The local time as log lines show it (formatted once a second: a drain writes thousands of lines)."""
    global _stamped
    now = time.time()
    second = int(now)
    if second != _stamped[0]:
        _stamped = (second, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second)))
    return _stamped[1]


def is_tty(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (a closed or odd stream is not)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def say(text: str = "", stream: TextIO | None = None) -> None:
    """One line for people on standard output (or ``stream``)."""
    print(text, file=stream or sys.stdout, flush=True)


def fail(message: str) -> None:
    """A command's error: one line ``orchestrator: <message>`` on standard error; a message that names the program
    itself already (``orchestrator stop: --timeout: ...``, ``orchestrator (pid 7) still runs ...``) as it is."""
    named = _NAMES_ITSELF.match(message) is not None
    print(message if named else f"orchestrator: {message}", file=sys.stderr, flush=True)


# "orchestrator stop: ...", "orchestrator task add: ...", "orchestrator up --web ADDRESS: ...", "orchestrator (pid 7)
# ...": not a branch or a memo named orchestrator that begins a line
_NAMES_ITSELF = re.compile(r"orchestrator(:| [a-z][a-z-]*( [a-z][a-z-]*)?( --[a-z-]+ \S+)?:| \(pid \d+\)) ")


def print_json(data: Any) -> None:
    """A command's answer as indented JSON (``--json``)."""
    say(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def print_rich(parts: Iterable[Any], stream: TextIO | None = None) -> None:
    """Rich renderables (tables, lines) one after another, as wide as the terminal (``NOT_A_TTY_WIDTH`` when
    the output is not one)."""
    from rich.console import Console as RichConsole

    out = stream or sys.stdout
    rich = RichConsole(file=out, width=None if is_tty(out) else NOT_A_TTY_WIDTH)
    for part in parts:
        rich.print(part)


def printable_block(text: str) -> str:
    """Each line of ``text`` made safe for a terminal (``core.text.printable``)."""
    return "\n".join(_printable(line) for line in text.splitlines())


def money(value: float | None, estimated: bool = False) -> str:
    """Dollars as the tables show them: four decimals, blank when unknown, ``~`` before an estimate (a cost reckoned
    from `prices`, as for Codex, which reports only tokens)."""
    return "" if value is None else f"{'~' if estimated else ''}{value:.4f}"


class Console:
    """Where every line of ``up`` goes: the log file always, the terminal as a list or a live view."""

    def __init__(
        self,
        log_path: Path | None,
        stream: TextIO | None = None,
        live: bool | None = None,
        *,
        max_log_bytes: int = LOG_MAX_BYTES,
        log_backups: int = LOG_BACKUPS,
    ) -> None:
        self.stream = stream or sys.stdout
        self.live_wanted = is_tty(self.stream) if live is None else live
        self.recent: deque[str] = deque(maxlen=RECENT_EVENTS)
        self._log: RotatingLog | None = None
        if log_path is not None:
            self._log = open_log(log_path, max_log_bytes, log_backups)
        self._live: Live | None = None
        self._task: asyncio.Task[None] | None = None
        self._stream_flush_due = False

    def line(self, text: str, role: str | None = None) -> None:
        """One event, for people: the log file, and the terminal."""
        out = one_event(_printable(f"{stamp()} [{role}] {text}" if role else f"{stamp()} {text}"))
        self._write_log(out)
        self.recent.append(out)
        if self._live is None:
            self._print(out)

    def _print(self, out: str) -> None:
        """A line on the terminal, flushed with the others of the loop's turn."""
        try:
            self.stream.write(out + "\n")
        except (OSError, ValueError):
            return
        if not self._stream_flush_due:
            self._stream_flush_due = at_turn_end(self._flush_stream)

    def _flush_stream(self) -> None:
        self._stream_flush_due = False
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()

    def error(self, text: str) -> None:
        """An internal error: its first line on the terminal, the whole text (a traceback) in the log file."""
        text = _printable(text)
        first = one_event(text.splitlines()[0]) if text else "error"
        self._write_log(f"{stamp()} ERROR {text}")
        self.recent.append(f"{stamp()} ERROR {first}")
        if self._live is None:
            say(f"{stamp()} ERROR {first} (details in the log)", self.stream)

    def event(self, run: Run, old: RunState, new: RunState) -> None:
        """A run's state change: always in the log file."""
        label = one_event(_printable(run.label))
        self._write_log(f"{stamp()} [{run.role.name}] run {run.run_id} {label}: {old.value} -> {new.value}")

    def _write_log(self, text: str) -> None:
        if self._log is not None:
            self._log.write(text)

    def close(self) -> None:
        """Close the log file (the live view, if any, is stopped first)."""
        self._flush_stream()
        self.stop_live()
        if self._log is not None:
            with contextlib.suppress(OSError, ValueError):  # what could not be written is lost, not raised
                self._log.close()
            self._log = None

    # live view ---------------------------------------------------------
    def start_live(self, view: Callable[[], Snapshot]) -> None:
        """Start the live view on a terminal (nothing otherwise), redrawn every ``REFRESH`` seconds from ``view``
        (the supervisor's light snapshot, taken on the loop's thread)."""
        if not self.live_wanted:
            return
        import asyncio

        from rich.console import Console as RichConsole
        from rich.live import Live

        self._live = Live(
            self.render(view()), console=RichConsole(file=self.stream), auto_refresh=False, transient=False
        )
        self._live.start()

        async def refresh() -> None:
            while True:
                await asyncio.sleep(REFRESH)
                if self._live is not None:
                    self._live.update(self.render(view()), refresh=True)

        self._task = asyncio.ensure_future(refresh())

    def stop_live(self) -> None:
        """End the live view (its last frame stays on screen) and flush the log file."""
        if self._task is not None:
            self._task.cancel()
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._log is not None:
            with contextlib.suppress(OSError, ValueError):
                self._log.flush()

    def render(self, snapshot: Snapshot) -> Group:
        """The live view of one snapshot."""
        from orchestrator.console.live import render_view

        return render_view(snapshot.to_json())
