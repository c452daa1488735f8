"""Memo files: which names count, how they are read and written, and moves between folders.

A memo lives in ``memo/<role>/<folder>/``; the folder, never the front matter,
decides its role and its stage. Moves are atomic renames that keep the file
name and never overwrite: a clash gets a numbered suffix. Every name made here
fits in ``NAME_MAX`` bytes. Their front matter is read by ``front_matter``, with limits, never raising:
whatever a person or an agent wrote, the memo is still delivered.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from orchestrator.intake.front_matter import (  # noqa: F401 - reading a memo's header is part of what memo offers
    FRONT_MATTER_MAX_ALIASES,
    FRONT_MATTER_MAX_CHARS,
    FRONT_MATTER_MAX_DEPTH,
    MemoHeader,
    front_matter_problem,
    header_tasks,
    is_utf8,
    parse_front_matter,
)
from orchestrator.intake.names import (  # noqa: F401 - the names of memo files are part of what memo offers
    ACTIVE,
    ARCHIVE,
    CANCELLED,
    FAILED,
    FINISHED_FOLDERS,
    FOLDERS,
    HELD,
    INBOX,
    WAITING,
    is_memo_name,
)

NAME_MAX = 255  # bytes in one file name on Linux file systems


def fit_name(stem: str, tail: str = "", limit: int = NAME_MAX) -> str:
    """``stem + tail``, the stem cut at a character boundary when the whole would pass ``limit`` bytes."""
    budget = limit - len(os.fsencode(tail))
    if len(os.fsencode(stem)) <= budget:
        return stem + tail
    used = 0
    for index, char in enumerate(stem):
        used += len(os.fsencode(char))
        if used > budget:
            return stem[:index] + tail
    return stem + tail  # not reached: the loop passes the budget


class BadMemo(Exception):
    """A memo that must never reach an agent; the message says why."""


def open_for_writing(paths: list[Path]) -> set[Path]:
    """Which of ``paths`` some process still holds open for writing (read from Linux ``/proc``).

    A writer may pause longer than any settle time with the memo open; the memo is
    complete only when it closes it. Processes we may not look into count as not writing.
    """
    wanted: dict[str, Path] = {}
    folders: dict[str, str] = {}  # each folder resolved once: a realpath per memo took 160 ms for 10,000 memos
    for path in paths:
        text = str(path)
        wanted[text] = path
        parent, name = os.path.split(text)
        real = folders.get(parent)
        if real is None:
            real = folders[parent] = os.path.realpath(parent)
        if real != parent:  # a symlinked memo is refused at its claim anyway
            wanted[os.path.join(real, name)] = path
    busy: set[Path] = set()
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return busy
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = wanted.get(os.readlink(f"/proc/{pid}/fd/{fd}"))
                if target is None or target in busy:
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as handle:
                    flags = next(int(line.split()[1], 8) for line in handle if line.startswith("flags:"))
            except (OSError, StopIteration, ValueError, IndexError):
                continue
            if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
                busy.add(target)
    return busy


def read_memo(path: Path, max_bytes: int) -> str:
    """The memo's text, or ``BadMemo`` when it must not be delivered.

    ``FileNotFoundError`` passes through: a memo deleted before its claim is simply gone.
    """
    info = os.lstat(path)
    if not is_utf8(path.name):
        raise BadMemo("its file name is not UTF-8; rename it to UTF-8 text and put it back in the inbox")
    if stat.S_ISLNK(info.st_mode):
        raise BadMemo("it is a symbolic link; memos must be regular files")
    if not stat.S_ISREG(info.st_mode):
        raise BadMemo("it is not a regular file")
    if info.st_size > max_bytes:
        raise BadMemo(f"it is {info.st_size} bytes, larger than max_memo_bytes ({max_bytes})")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:  # plain reads: a buffered file object added five system calls and a max_bytes buffer per memo
        parts: list[bytes] = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(fd, min(max_bytes + 1 - total, max(info.st_size + 1 - total, 65536)))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(parts)
    if len(data) > max_bytes:
        raise BadMemo(f"it grew past max_memo_bytes ({max_bytes})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadMemo(f"it is not UTF-8 text (byte {exc.start})") from None


def free_name(folder: Path, name: str, also: Sequence[Path] = ()) -> Path:
    """``folder/name``, or ``folder/<stem>.<n>.md`` when that name is taken (the stem cut to fit ``NAME_MAX``); a
    name taken in one of the folders ``also`` counts as taken too."""

    def taken(candidate: str) -> bool:
        return any(os.path.lexists(where / candidate) for where in (folder, *also))

    if not taken(name):
        return folder / name
    stem, dot, suffix = name.rpartition(".")
    if not dot:
        stem, suffix = name, ""
    for number in range(1, 100_000):
        candidate = fit_name(stem, f".{number}.{suffix}" if suffix else f".{number}")
        if not taken(candidate):
            return folder / candidate
    raise OSError(f"no free name for {name} in {folder}")


def move_memo(src: Path, folder: Path, before: Callable[[Path], None] | None = None) -> Path:
    """Atomically rename ``src`` into ``folder``, keeping its name unless it clashes.

    ``before(target)`` runs just before the rename (a reason file that must be
    there when the memo appears). Raises ``FileNotFoundError`` when ``src`` is
    gone: the rename is the arbiter between two attempts to move the same memo.
    """
    try:
        return _move(src, folder, before)
    except FileNotFoundError:
        if not os.path.lexists(src) or os.path.isdir(folder):
            raise  # the memo is gone (the arbiter spoke), not the folder
    folder.mkdir(parents=True, exist_ok=True)  # made when missing, not looked for at every move
    return _move(src, folder, before)


def _move(src: Path, folder: Path, before: Callable[[Path], None] | None) -> Path:
    target = free_name(folder, src.name)
    if before is not None:
        if not os.path.lexists(src):
            raise FileNotFoundError(src)
        before(target)
    os.rename(src, target)
    return target


def write_atomically(path: Path, text: str, sync: bool = True) -> None:
    """Write a file whole or not at all: a hidden temporary (its name cut to fit ``NAME_MAX``), fsync, rename.

    ``sync=False``: no fsync; the caller syncs the file soon after (``sync_file``), several writes with one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / fit_name(f".{path.name}", f".{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            if sync:
                handle.flush()
                os.fsync(handle.fileno())
        os.rename(tmp, path)
    except BaseException:  # a full disk, a name too long for its folder: nothing half-done is left behind
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def sync_file(path: Path) -> None:
    """Make what was written to ``path`` durable (an fsync of the file as it is now)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def new_memo_id() -> str:
    """An id in the corpus' style: milliseconds since the epoch, in hex."""
    return format(time.time_ns() // 1_000_000, "x")


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: the same text, six times faster


def render_memo(header: dict[str, Any], body: str) -> str:
    """Markdown with YAML front matter, keys in the given order."""
    front = yaml.dump(header, Dumper=_DUMPER, allow_unicode=True, sort_keys=False, default_flow_style=None, width=1000)
    return f"---\n{front}---\n\n{body.rstrip()}\n"


def slug(text: str, limit: int = 40) -> str:
    """A file-name-safe fragment of ``text`` (ASCII letters, digits and dashes)."""
    out = []
    for char in text.lower():
        if char.isascii() and char.isalnum():
            out.append(char)
        elif out and out[-1] != "-":
            out.append("-")
    return "".join(out).strip("-")[:limit].strip("-") or "memo"


HEAD_BYTES = 16 * 1024  # front matter lies at the start; the rest of a memo is not read for it


def read_head(path: Path) -> str:
    """The start of a regular file, or "" (never opens a FIFO or device, which could block the loop)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return ""
        with open(path, "rb") as handle:
            return handle.read(HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""
