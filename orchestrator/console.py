"""The one printer: timestamped log lines, and a live rich view on a terminal.

On a TTY ``orchestrator up`` shows the running agents, queue lengths and the
last events, redrawn from the supervisor's loop (never from another thread);
otherwise it prints plain lines such as
``2026-11-30 09:12:01 [builder] start B-031 "three articles" (run 7)``.
Every line also goes to ``.orchestrator/orchestrator.log``.
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console as RichConsole
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from orchestrator.core.run import Run
    from orchestrator.core.states import RunState
    from orchestrator.supervisor.loop import Supervisor

RECENT_EVENTS = 12
REFRESH = 0.25


def stamp() -> str:
    return datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def _printable(text: str) -> str:
    """Text every UTF-8 stream takes: the bytes of a file name that are not UTF-8 shown as ``\\xff``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate no file name holds: shown as its code point
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


class Console:
    """Where every line of ``up`` goes: the log file always, the terminal as a list or a live view."""

    def __init__(self, log_path: Path | None, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.live_wanted = self.stream.isatty() if live is None else live
        self.recent: deque[str] = deque(maxlen=RECENT_EVENTS)
        self._log = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(log_path, "a", encoding="utf-8", buffering=1)
        self._live: Live | None = None
        self._task: asyncio.Task[None] | None = None

    def line(self, text: str, role: str | None = None) -> None:
        """One event, for people: the log file, and the terminal."""
        out = _printable(f"{stamp()} [{role}] {text}" if role else f"{stamp()} {text}")
        self._write_log(out)
        self.recent.append(out)
        if self._live is None:
            print(out, file=self.stream, flush=True)

    def error(self, text: str) -> None:
        text = _printable(text)
        first = text.splitlines()[0] if text else "error"
        self._write_log(f"{stamp()} ERROR {text}")
        self.recent.append(f"{stamp()} ERROR {first}")
        if self._live is None:
            print(f"{stamp()} ERROR {first} (details in the log)", file=self.stream, flush=True)

    def event(self, run: Run, old: RunState, new: RunState) -> None:
        """A run's state change: always in the log file."""
        self._write_log(f"{stamp()} [{run.role.name}] run {run.run_id} {run.label}: {old.value} -> {new.value}")

    def _write_log(self, text: str) -> None:
        if self._log is not None:
            try:
                self._log.write(text + "\n")
            except (OSError, ValueError):
                pass

    # live view ---------------------------------------------------------
    def start_live(self, sup: Supervisor) -> None:
        if not self.live_wanted:
            return
        self._live = Live(self.render(sup), console=RichConsole(file=self.stream), auto_refresh=False, transient=False)
        self._live.start()

        async def refresh() -> None:
            while True:
                await asyncio.sleep(REFRESH)
                if self._live is not None:
                    self._live.update(self.render(sup), refresh=True)

        self._task = asyncio.ensure_future(refresh())

    def stop_live(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._log is not None:
            self._log.flush()

    def render(self, sup: Supervisor) -> Group:
        return render_view(sup.snapshot_light())


def render_view(snap: dict[str, Any]) -> Group:
    """The live view from a status snapshot (also used by ``status`` on a terminal)."""
    table = Table(title=f"agents ({snap['limits']['running']}/{snap['limits']['max_concurrent']} running)", expand=True)
    for col in ("run", "role", "memo", "subject", "state", "attempt", "elapsed", "pid", "activity / cost"):
        table.add_column(col, overflow="ellipsis", no_wrap=True)
    for run in snap["runs"]:
        state = run["state"]
        style = {"running": "green", "cancelling": "red", "timing_out": "red", "retry_wait": "yellow"}.get(state, "")
        elapsed = f"{run['elapsed']:.0f}s" if run.get("elapsed") is not None else ""
        if state == "retry_wait" and run.get("next_attempt_at"):
            elapsed = f"next {run['next_attempt_at'][11:19]}"
        activity = run.get("activity") or ""
        if run.get("cost_usd") is not None:
            activity = f"${run['cost_usd']:.4f} {activity}"
        table.add_row(
            str(run["run_id"]), run["role"], run.get("memo_id") or run["memo"] or "", run.get("subject") or "",
            Text(state, style=style), str(run["attempt"]), elapsed, str(run.get("pid") or ""), activity,
        )  # fmt: skip
    queued = ", ".join(f"{role} {n}" for role, n in snap["queued"].items()) or "none"
    extra = []
    if snap.get("crash_counts"):
        extra.append("crashes in a row: " + ", ".join(f"{r} {n}" for r, n in snap["crash_counts"].items()))
    if snap.get("budget_blocks"):
        extra.append("paused by budget: " + "; ".join(f"{r}: {w}" for r, w in snap["budget_blocks"].items()))
    if snap.get("ending"):
        extra.append(f"ENDING ({snap['ending']}): nothing new starts")
    parts: list[Any] = [table, Text(f"queued: {queued}")]
    parts += [Text(line, style="bold yellow") for line in extra]
    parts.append(Text("last events:", style="bold"))
    parts += [Text(line) for line in snap.get("events", [])]
    return Group(*parts)
