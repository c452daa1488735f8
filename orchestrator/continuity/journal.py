"""The journal: one entry per ended run, written by the orchestrator before the run's memos move.

Entries are appended to ``memo/<role>/journal/YYYY-MM-DD.md`` (the local date
the run ended). Each starts with a marker line keyed by run id and attempt, so a
run finished twice (a crash between the entry and the memo move, then recovery)
is recorded once: the entry is written only when no journal file holds its key.
Files are only ever appended to.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from orchestrator.agents.claude_errors import ATTEMPT_HEADER

JOURNAL = "journal"
CLOSING_LINES = 40
CLOSING_MAX_BYTES = 4096
PROMPT_MAX_BYTES = 8192
_HEADER = re.compile(rf"^{ATTEMPT_HEADER}\b")
_MARKER = re.compile(
    r"^<!-- journal run_id=(?P<run_id>\d+) attempt=(?P<attempt>\d+) seq=(?P<seq>\d+|-) "
    r"state=(?P<state>[a-z_]+) start=(?P<start>[0-9:-]+) end=(?P<end>[0-9:]+) -->$",
    re.MULTILINE,
)
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")


@dataclass(frozen=True)
class Entry:
    """One journal entry as read back: its key, heading fields and Markdown text (without the marker)."""

    role: str
    date: str
    run_id: int
    attempt: int
    seq: int | None
    state: str
    start: str
    end: str
    text: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def marker(run_id: int, attempt: int, seq: int | None, state: str, start: str, end: str) -> str:
    """The first line of an entry: its key and heading fields, machine-readable."""
    return f"<!-- journal run_id={run_id} attempt={attempt} seq={seq if seq is not None else '-'} state={state} start={start} end={end} -->"


def _key(run_id: int, attempt: int) -> str:
    return f"<!-- journal run_id={run_id} attempt={attempt} "


def day_file(folder: Path, day: date) -> Path:
    return folder / f"{day.isoformat()}.md"


_KEYS: dict[Path, tuple[int, set[tuple[int, int]]]] = {}  # journal file -> (bytes read, keys seen in them)
_KEY = re.compile(r"^<!-- journal run_id=(\d+) attempt=(\d+) ", re.MULTILINE)
TAIL_BYTES = 256 * 1024  # the newest entries are read from this much of a file's end


def _keys(path: Path) -> set[tuple[int, int]]:
    """The (run id, attempt) keys in a journal file, reading only what was appended since the last call."""
    done, keys = _KEYS.get(path, (0, set()))
    try:
        if done and os.stat(path).st_size == done:  # nothing appended since: one stat, no read
            return keys
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            if size < done:  # replaced or cut by hand: read it again
                done, keys = 0, set()
            handle.seek(done)
            data = handle.read()
    except OSError:
        return set()
    cut = data.rfind(b"\n") + 1  # only whole lines; a partial last line is read next time
    keys.update((int(a), int(b)) for a, b in _KEY.findall(data[:cut].decode("utf-8", "replace")))
    _KEYS[path] = (done + cut, keys)
    return keys


def has_entry(folder: Path, run_id: int, attempt: int, days: Iterable[date]) -> bool:
    """Whether a journal file of one of ``days`` already holds the entry of this run and attempt."""
    return any((run_id, attempt) in _keys(day_file(folder, day)) for day in days)


def append_entry(folder: Path, day: date, run_id: int, attempt: int, text: str, since: date | None = None) -> bool:
    """Append ``text`` (beginning with its ``marker``) to the day's file unless the entry exists; True if written.

    ``since`` is the first day a file holding the entry could be dated (the run's start): a recovery
    after midnight still finds the entry written the day before. Raises ``OSError`` when the folder
    cannot be written.
    """
    first = since if since is not None and since <= day else day
    days = [first + timedelta(days=n) for n in range(min((day - first).days, 7) + 1)]
    if has_entry(folder, run_id, attempt, days):
        return False
    data = (text if text.endswith("\n") else text + "\n").encode("utf-8")
    # one write on an O_APPEND descriptor: the entry lands whole after whatever is there; no fsync, because
    # the crash to survive is the orchestrator's (the page cache outlives it), and a sync would stall the loop
    path = day_file(folder, day)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except FileNotFoundError:  # the first entry: the folder is made then, not looked for at every entry
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    done, keys = _KEYS.get(path, (-1, set()))
    if done == start:  # the file was as last read: our own entry is known without reading it back
        keys.add((run_id, attempt))
        _KEYS[path] = (start + len(data), keys)
    return True


def quote(text: str) -> str:
    """Text of an agent as a Markdown quote: nothing it says can look like an entry's marker or heading."""
    return "\n".join(f"> {line}".rstrip() for line in text.splitlines())


def agents_lines(lines: list[str]) -> list[str]:
    """Of a log's last lines, the last attempt's own: after the orchestrator's header of that attempt (``=== run N
    attempt M: ...``), at most ``CLOSING_LINES``."""
    heads = [i for i, line in enumerate(lines) if _HEADER.match(line)]
    return (lines[heads[-1] + 1 :] if heads else lines)[-CLOSING_LINES:]


def capped(lines: list[str], limit: int = CLOSING_MAX_BYTES) -> str:
    """The last lines, within ``limit`` bytes; a note says when the start was cut."""
    text = "\n".join(lines).strip("\n")
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    kept = data[-limit:].decode("utf-8", "ignore")
    kept = kept.split("\n", 1)[1] if "\n" in kept else kept
    return f"[cut: only the last {len(kept.encode('utf-8'))} of {len(data)} bytes are kept]\n{kept}"


# ------------------------------------------------------------------ reading back
def parse(role: str, day: str, text: str, last: int | None = None) -> list[Entry]:
    """The entries of one journal file, in the order they were written (only the newest ``last``, if given)."""
    found = list(_MARKER.finditer(text))
    first = max(0, len(found) - last) if last is not None else 0
    out = []
    for index, match in enumerate(found):
        if index < first:
            continue
        end = found[index + 1].start() if index + 1 < len(found) else len(text)
        body = text[match.end() : end].strip("\n")
        seq = match.group("seq")
        out.append(
            Entry(
                role=role,
                date=day,
                run_id=int(match.group("run_id")),
                attempt=int(match.group("attempt")),
                seq=None if seq == "-" else int(seq),
                state=match.group("state"),
                start=match.group("start"),
                end=match.group("end"),
                text=body,
            )
        )
    return out


def day_files(folder: Path, since: str | None = None) -> list[Path]:
    """The role's journal files, oldest first; ``since`` (YYYY-MM-DD) leaves out older days."""
    try:
        names = sorted(n for n in os.listdir(folder) if _DAY.match(n))
    except OSError:
        return []
    return [folder / n for n in names if since is None or n[:10] >= since]


def read_entries(role: str, folder: Path, since: str | None = None, last: int | None = None) -> list[Entry]:
    """The role's entries, oldest first; ``last`` keeps the newest N, read from the newest files' ends only."""
    files = day_files(folder, since)
    out: list[Entry] = []
    for path in reversed(files):
        want = None if last is None else last - len(out)
        entries = _read_file(role, path, want)
        out = entries + out
        if last is not None and len(out) >= last:
            break
    return out[-last:] if last is not None else out


def _read_file(role: str, path: Path, want: int | None) -> list[Entry]:
    """One file's entries; with ``want``, the newest ``want`` from as little of its end as holds them."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            chunk = 16 * 1024 if want is not None else size
            while True:
                start = max(0, size - min(chunk, TAIL_BYTES)) if want is not None else 0
                handle.seek(start)
                text = handle.read().decode("utf-8", "replace")
                # one marker more than wanted proves the newest ``want`` entries are whole in this chunk
                if want is None or start == 0 or chunk >= TAIL_BYTES or len(_MARKER.findall(text)) > want:
                    return parse(role, path.name[:10], text, want)
                chunk *= 4
    except OSError:
        return []


def prompt_text(entries: list[Entry], limit: int = PROMPT_MAX_BYTES) -> str:
    """``$journal``: the entries (newest last) within ``limit`` bytes, the first kept and each day's first under a
    line that says the day (``On 2026-11-30:``); older ones go first, a cut is said."""
    kept: list[Entry] = []
    used = 0
    for entry in reversed(entries):
        block = f"On {entry.date}:\n\n{entry.text}\n\n"  # each measured with its day's line: never over the cap
        size = len(block.encode("utf-8"))
        if used + size > limit:
            if not kept:  # the newest alone is too big: its end is what matters least, keep its start
                room = max(0, limit - 80)
                cut = block.encode("utf-8")[:room].decode("utf-8", "ignore")
                return cut + f"\n[cut: this entry is {size} bytes, over the journal's {limit} bytes]\n\n"
            break
        kept.append(entry)
        used += size
    kept.reverse()
    return "".join(
        (f"On {entry.date}:\n\n" if i == 0 or kept[i - 1].date != entry.date else "") + f"{entry.text}\n\n"
        for i, entry in enumerate(kept)
    )
