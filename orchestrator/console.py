"""The one printer: every line for people, on the terminal and in the log file.

Commands print through the module functions here (``say``, ``fail``,
``print_json``, ``print_status``, ``print_history``); ``orchestrator up`` prints
through a ``Console``. On a TTY ``up`` shows the running agents, queue lengths and
the last events, redrawn from the supervisor's loop (never from another thread);
otherwise it prints plain lines such as
``2026-11-30 09:12:01 [builder] start B-031 "three articles" (run 7)``.
Every line of ``up`` also goes to ``.orchestrator/orchestrator.log``, which rotates
at ``LOG_MAX_BYTES`` keeping ``LOG_BACKUPS`` older files.

This module imports only the standard library at its top: the client commands (``status``, ``cancel``,
``stop``, ...) print through it, ``status``'s tables drawn by ``tables``; rich is imported where ``up``'s live
view or ``history``'s tables are drawn.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from orchestrator import tables
from orchestrator.core.text import printable as _printable
from orchestrator.core.turn import at_turn_end

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from rich.console import Console as RichConsole
    from rich.console import Group
    from rich.live import Live

    from orchestrator.core.run import Run
    from orchestrator.core.snapshot import Snapshot
    from orchestrator.core.states import RunState

RECENT_EVENTS = 12
REFRESH = 0.25
LOG_MAX_BYTES = 10 * 1024 * 1024
LOG_BACKUPS = 5
NOT_A_TTY_WIDTH = tables.NOT_A_TTY_WIDTH


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


# ---------------------------------------------------------------- commands
def say(text: str = "", stream: TextIO | None = None) -> None:
    """One line for people on standard output (or ``stream``)."""
    print(text, file=stream or sys.stdout, flush=True)


def fail(message: str) -> None:
    """A command's error: one line ``orchestrator: <message>`` on standard error."""
    print(f"orchestrator: {message}", file=sys.stderr, flush=True)


def print_json(data: Any) -> None:
    """A command's answer as indented JSON (``--json``)."""
    say(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def _rich(stream: TextIO | None = None) -> RichConsole:
    from rich.console import Console as RichConsole

    out = stream or sys.stdout
    return RichConsole(file=out, width=None if is_tty(out) else NOT_A_TTY_WIDTH)


def print_status(snap: dict[str, Any], stream: TextIO | None = None) -> None:
    """``orchestrator status`` for people: the orchestrator, its current runs, queues, pauses and recent runs.

    Drawn by ``tables`` as rich would draw it (the same text): status is a client command and starts without rich.
    """
    out = stream or sys.stdout
    for line in tables.render(status_view(snap), tables.width_of(out, is_tty(out))):
        say(line, out)


def print_history(report: dict[str, Any], stream: TextIO | None = None) -> None:
    """``orchestrator history`` for people: every run, then totals per role and per day."""
    console = _rich(stream)
    for part in history_view(report):
        console.print(part)


def print_schedule(report: dict[str, Any], stream: TextIO | None = None) -> None:
    """``orchestrator schedule``: per role its tick, its tasks and what its last wake did."""
    out = stream or sys.stdout
    say(f"time zone {report['timezone']}, now {report['now']}", out)
    for role, info in report["roles"].items():
        tick = f"every {info['every']:g}s, next tick {info['next_tick']}" if info["every"] else "woken by due tasks"
        skips = ", ".join(f"{k} {v}" for k, v in sorted(info["skips"].items())) or "none"
        say(f"{role}: {tick}; last: {info['last'] or '-'} {info['last_reason'] or ''}; skips: {skips}", out)
        for task in info["tasks"]:
            last = f"last done {task['last_done']} (run {task['last_seq']})" if task["last_done"] else "never done"
            due = "DUE NOW" if task["due_now"] else f"next due {task['next_due'] or 'never'}"
            say(f"  {task['name']}: {task['rule']}, priority {task['priority']}; {due}; {last}", out)


def print_journal(entries: list[dict[str, Any]], stream: TextIO | None = None) -> None:
    """``orchestrator journal`` for people: each entry's Markdown, under its role and date."""
    if not entries:
        say("no journal entries", stream)
    for entry in entries:
        say(f"# {entry['role']} {entry['date']}", stream)
        say(_printable_block(entry["text"]) + "\n", stream)


def print_handoff(result: dict[str, Any] | list[dict[str, Any]], stream: TextIO | None = None) -> None:
    """``orchestrator handoff`` for people: the text, a version, the list of versions or what a restore did."""
    if isinstance(result, list):
        if not result:
            say("no versions kept yet", stream)
        for item in result:
            say(f"run {item['seq']:>5}  {item['bytes']:>7} bytes  kept {item['saved_at']}", stream)
    elif "replaced_kept_at" in result:
        kept = result["replaced_kept_at"]
        say(
            f"restored version {result['seq']} into {result['path']}"
            + (f"; the text it replaced is kept at {kept}" if kept else ""),
            stream,
        )
    else:
        if "cap" in result:
            say(f"{result['path']}: {result['bytes']} bytes (cap {result['cap']})", stream)
        say(_printable_block(result["text"]) if result["text"] else "(empty)", stream)


def _printable_block(text: str) -> str:
    return "\n".join(_printable(line) for line in text.splitlines())


def _money(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _run_json(run: Any) -> dict[str, Any]:
    """A run of a snapshot as its JSON (``RunView.to_json``), whether it came as JSON or as a view."""
    return run if isinstance(run, dict) else run.to_json()


def _label(run: dict[str, Any]) -> str:
    """How people name a run's memo: its front-matter id, else its file name (``RunView.label``)."""
    return str(run.get("memo_id") or run.get("memo") or "")


def status_view(snap: dict[str, Any]) -> list[str | tables.Table]:
    """The parts of ``print_status``, in order (lines and tables)."""
    parts: list[str | tables.Table] = []
    if snap["running"]:
        parts.append(
            f"orchestrator running for {snap['root']} (pid {snap['pid']})"
            + (f", ENDING ({snap['ending']})" if snap.get("ending") else "")
        )
        if snap.get("recovery"):
            parts.append(snap["recovery"]["summary"])
    else:
        parts.append(
            f"no orchestrator running for {snap['root']}"
            + (" (runs below are as last recorded)" if snap["runs"] else "")
        )
    if snap.get("runs"):
        table = tables.Table(title="current runs")
        for col in ("run", "role", "memo", "state", "attempt", "pid", "elapsed / next", "cost $", "subject / activity"):
            table.add_column(col)
        nodes = snap.get("nodes") or {}  # executor: ray, where each agent runs
        for run in map(_run_json, snap["runs"]):
            elapsed = run.get("elapsed")
            when = f"{elapsed:.0f}s" if elapsed is not None else (run.get("next_attempt_at") or "")
            about = run.get("subject") or ""
            if run.get("activity"):
                about = f"{about} | {run['activity']}"
            run_id = str(run["run_id"])
            table.add_row(
                run_id,
                run["role"],
                _label(run),
                run["state"],
                str(run.get("attempt") or ""),
                str(run.get("pid") or "") + (f" on {nodes[run_id]}" if run_id in nodes else ""),
                when,
                _money(run.get("cost_usd")),
                about,
            )
        parts.append(table)
    queued = snap.get("queued") or {}
    if queued:
        parts.append("queued: " + ", ".join(f"{role} {n}" for role, n in queued.items()))
    if snap.get("crash_counts"):
        parts.append(
            "critical roles, crashes in a row: " + ", ".join(f"{r} {n}" for r, n in snap["crash_counts"].items())
        )
    for role, why in (snap.get("budget_blocks") or {}).items():
        parts.append(f"paused by budget: {role}: {why}")
    parts += pause_lines(snap)
    for role, held in (snap.get("holds") or {}).items():
        parts.append(f"held: {role}: " + "; ".join(held.values()))
    for role, wake in (snap.get("wakes") or {}).items():
        skips = ", ".join(f"{k} {v}" for k, v in sorted((wake.get("skips") or {}).items()))
        parts.append(
            f"wakes: {role}: next tick {wake.get('next_tick') or '-'}; last: {wake.get('last') or '-'} "
            f"{wake.get('last_reason') or ''}".rstrip()
            + (f"; skips: {skips}" if skips else "")
        )
    for role, why in (snap.get("journal_problems") or {}).items():
        parts.append(f"journal: {role}: {why}")
    if snap.get("held"):
        held = ", ".join(f"{role} {n}" for role, n in snap["held"].items())
        parts.append(f"held by the loop breaker: {held} (memo/<role>/held/; `orchestrator release` runs them)")
    parts += memory_lines(snap.get("memory"))
    if snap.get("recent"):
        table = tables.Table(title="recent")
        for col in ("run", "role", "memo", "state", "exit", "ended", "cost $", "tokens in/out", "reason"):
            table.add_column(col)
        for run in map(_run_json, snap["recent"]):
            tokens = ""
            tokens_in, tokens_out = run.get("input_tokens"), run.get("output_tokens")
            if tokens_in is not None or tokens_out is not None:
                tokens = f"{tokens_in or 0}/{tokens_out or 0}"
            pruned = run.get("log_pruned_at")
            table.add_row(
                str(run["run_id"]),
                run["role"],
                _label(run),
                run["state"],
                "" if run.get("exit_code") is None else str(run["exit_code"]),
                (run.get("ended_at") or "")[:19],
                _money(run.get("cost_usd")),
                tokens,
                (run.get("reason") or "") + (f" (log pruned {pruned[:10]})" if pruned else ""),
            )
        parts.append(table)
    return parts


def history_view(report: dict[str, Any]) -> list[Any]:
    """The parts of ``print_history``, in order (rich tables and the total line)."""
    from rich.table import Table

    from orchestrator.core.view import RunView

    table = Table(title="runs", title_justify="left")
    for col in ("run", "role", "memo", "state", "backend", "cost $", "in tok", "out tok", "turns", "started"):
        table.add_column(col)
    for run in map(RunView.of, report["runs"]):
        table.add_row(
            str(run.run_id),
            run.role,
            run.label,
            run.state + (" (log pruned)" if run.log_pruned_at else ""),
            run.backend or "",
            _money(run.cost_usd),
            str(run.input_tokens or ""),
            str(run.output_tokens or ""),
            str(run.num_turns or ""),
            (run.started_at or "")[:19],
        )
    parts: list[Any] = [table]
    for title, key in (("per role", "by_role"), ("per day", "by_day")):
        totals = Table(title=title, title_justify="left")
        for col in (title.split()[1], "runs", "cost $", "in tok", "out tok"):
            totals.add_column(col)
        for name, entry in report["totals"][key].items():
            totals.add_row(
                name,
                str(entry["runs"]),
                f"{entry['cost_usd']:.4f}",
                str(entry["input_tokens"]),
                str(entry["output_tokens"]),
            )
        parts.append(totals)
    parts.append(f"total: {report['totals']['runs']} runs, ${report['totals']['cost_usd']:.4f}")
    note = (report.get("window") or {}).get("note")
    if note:
        parts.append(note)
    return parts


# ---------------------------------------------------------------- orchestrator up
class RotatingLog:
    """The orchestrator's log file: appended to, rotated at ``maxBytes`` into ``path.1`` ... ``path.<backupCount>``.

    A plain buffered file and a byte count (the standard ``RotatingFileHandler`` costs about 100 us a
    line, a third of the CPU the loop spends on a memo). Inside the running loop the lines of one turn of
    the loop go out in one write at its end; elsewhere each line at once. A line that cannot be written is
    dropped without a traceback: a full disk must not stop the work.
    """

    def __init__(self, path: Path, max_bytes: int = LOG_MAX_BYTES, backups: int = LOG_BACKUPS) -> None:
        self.path = path
        self.maxBytes = max_bytes  # the names of logging.handlers.RotatingFileHandler
        self.backupCount = backups
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO | None = None
        self._size = 0
        self._flush_due = False
        self._open()

    def _open(self) -> None:
        try:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open, flushed by write
            self._size = self._file.tell()
        except OSError:
            self._file = None

    def write(self, line: str) -> None:
        """Append one line, rotating first when it would pass the size."""
        data = line + "\n"
        size = len(data.encode("utf-8", "replace"))
        if self._file is None:
            return
        if self._size and self._size + size > self.maxBytes:
            self._rotate()
            if self._file is None:
                return
        try:
            self._file.write(data)
            self._size += size
        except (OSError, ValueError):
            return
        if self._flush_due:
            return
        self._flush_due = at_turn_end(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        if self._file is not None:
            with contextlib.suppress(OSError, ValueError):
                self._file.flush()

    def _rotate(self) -> None:
        self.close()
        with contextlib.suppress(OSError):
            for number in range(self.backupCount - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{number}")
                if older.exists():
                    os.replace(older, self.path.with_name(f"{self.path.name}.{number + 1}"))
            if self.backupCount > 0:
                os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
            else:
                self.path.unlink()
        self._open()

    def flush(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError, ValueError):
                self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError, ValueError):
                self._file.close()
            self._file = None


def open_log(path: Path, max_bytes: int = LOG_MAX_BYTES, backups: int = LOG_BACKUPS) -> RotatingLog:
    """The orchestrator's rotating log file at ``path``."""
    return RotatingLog(path, max_bytes, backups)


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
        out = _printable(f"{stamp()} [{role}] {text}" if role else f"{stamp()} {text}")
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
        first = text.splitlines()[0] if text else "error"
        self._write_log(f"{stamp()} ERROR {text}")
        self.recent.append(f"{stamp()} ERROR {first}")
        if self._live is None:
            say(f"{stamp()} ERROR {first} (details in the log)", self.stream)

    def event(self, run: Run, old: RunState, new: RunState) -> None:
        """A run's state change: always in the log file."""
        self._write_log(f"{stamp()} [{run.role.name}] run {run.run_id} {run.label}: {old.value} -> {new.value}")

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
        return render_view(snapshot.to_json())


def render_view(snap: dict[str, Any]) -> Group:
    """The live view from a status snapshot, whose runs are ``RunView``s or their JSON."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from orchestrator.core.view import RunView

    table = Table(title=f"agents ({snap['limits']['running']}/{snap['limits']['max_concurrent']} running)", expand=True)
    for col in ("run", "role", "memo", "subject", "state", "attempt", "elapsed", "pid", "activity / cost"):
        table.add_column(col, overflow="ellipsis", no_wrap=True)
    for run in map(RunView.of, snap["runs"]):
        style = {"running": "green", "cancelling": "red", "timing_out": "red", "retry_wait": "yellow"}.get(
            run.state, ""
        )
        elapsed = f"{run.elapsed:.0f}s" if run.elapsed is not None else ""
        if run.state == "retry_wait" and run.next_attempt_at:
            elapsed = f"next {run.next_attempt_at[11:19]}"
        activity = run.activity or ""
        if run.cost_usd is not None:
            activity = f"${run.cost_usd:.4f} {activity}"
        table.add_row(
            str(run.run_id),
            run.role,
            run.label,
            run.subject or "",
            Text(run.state, style=style),
            str(run.attempt),
            elapsed,
            str(run.pid or ""),
            activity,
        )
    queued = ", ".join(f"{role} {n}" for role, n in snap["queued"].items()) or "none"
    extra = []
    if snap.get("crash_counts"):
        extra.append("crashes in a row: " + ", ".join(f"{r} {n}" for r, n in snap["crash_counts"].items()))
    if snap.get("budget_blocks"):
        extra.append("paused by budget: " + "; ".join(f"{r}: {w}" for r, w in snap["budget_blocks"].items()))
    extra += pause_lines(snap)
    if snap.get("ending"):
        extra.append(f"ENDING ({snap['ending']}): nothing new starts")
    parts: list[Any] = [table, Text(f"queued: {queued}")]
    parts += [Text(line, style="bold yellow") for line in extra]
    parts.append(Text("last events:", style="bold"))
    parts += [Text(line) for line in snap.get("events", [])]
    return Group(*parts)


def memory_lines(memory: dict[str, Any] | None) -> list[str]:
    """Status's lines of the memory part of a snapshot (``memory.status``'s JSON), none when nothing waits.

    Drawn here from the JSON, as wakes and pauses are, so the printer needs no feature below it.
    """
    if not memory:
        return []
    if "unavailable" in memory:
        return [f"memory: unavailable: {memory['unavailable']}"]
    out = []
    for key, count in (memory.get("waiting_for_summary") or {}).items():
        layer, period = key.split(" ", 1)
        summary = "weekly" if layer == "daily" else "monthly"  # the layer whose summary a waiting entry needs
        out.append(f"memory: {count} {layer} entries past retention wait for a {summary} summary of {period}")
    return out


def pause_lines(snap: dict[str, Any]) -> list[str]:
    """``paused: usage limit (five_hour) until 14:10``, one line per account a usage limit paused."""

    def clock(stamp: str) -> str:
        return stamp[11:16] if len(stamp) >= 16 else stamp

    lines = []
    for account, pause in (snap.get("paused") or {}).items():
        if pause.get("until"):
            when = f"until {clock(pause['until'])}"
        elif pause.get("probing") is not None:
            when = f"until a probe run gets through (run {pause['probing']} probes now)"
        elif pause.get("probe_at"):
            when = f"until a probe run gets through (next probe at {clock(pause['probe_at'])})"
        else:
            when = "until a probe run gets through (the next run to start probes)"
        roles = ", ".join(pause.get("roles") or [])
        lines.append(f"paused: {pause.get('reason')} {when}; account {account}: {roles}")
    return lines
