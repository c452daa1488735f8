"""Memo files: which names count, their front matter, and moves between folders.

A memo lives in ``memo/<role>/<folder>/``; the folder, never the front matter,
decides its role and its stage. Moves are atomic renames that keep the file
name and never overwrite: a clash gets a numbered suffix. Every name made here
fits in ``NAME_MAX`` bytes. Front matter is read with limits, and reading it
never raises: whatever a person or an agent wrote, the memo is still delivered.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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
# front matter beyond these is not read (a warning): a few aliases expanding into millions of items is a YAML bomb
FRONT_MATTER_MAX_CHARS = 64 * 1024
FRONT_MATTER_MAX_DEPTH = 32
FRONT_MATTER_MAX_ALIASES = 100
FRONT_MATTER_MAX_EXPANDED = 1024 * 1024  # nodes plus characters of scalars, with every alias expanded
_BIG_SCALAR = 100  # an integer written with more characters than this stays text (str() refuses > 4300 digits)


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8: a file name whose bytes are not UTF-8 holds lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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


@dataclass(frozen=True)
class MemoHeader:
    """The front matter fields the orchestrator reads; all optional."""

    id: str | None = None
    subject: str | None = None
    sender: str | None = None
    to: str | None = None
    created_at: str | None = None
    reply_to: str | None = None
    tags: tuple[str, ...] = ()
    warning: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


class _HeaderLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader, but timestamps stay the text written, and a number Python refuses stays text too.

    A date YAML accepts may not exist (``2026-02-30``), and Python refuses integers of more than
    4300 digits: to us these fields are text, so reading them must not fail.
    """


def _as_text(loader: Any, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


def _lenient(construct: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def build(loader: Any, node: Any) -> Any:
        if isinstance(node, yaml.ScalarNode) and len(node.value) > _BIG_SCALAR:
            return _as_text(loader, node)
        try:
            return construct(loader, node)
        except (ValueError, KeyError, TypeError, OverflowError):  # ``!!int abc``, ``!!bool maybe``
            return _as_text(loader, node)

    return build


_HeaderLoader.add_constructor("tag:yaml.org,2002:timestamp", _as_text)
for _tag, _construct in (
    ("int", yaml.SafeLoader.construct_yaml_int),
    ("float", yaml.SafeLoader.construct_yaml_float),
    ("bool", yaml.SafeLoader.construct_yaml_bool),
):
    _HeaderLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _lenient(_construct))


def front_matter_problem(block: str) -> str | None:
    """Why a front matter block is too big to read (a YAML bomb, say), or None; never builds the data.

    One pass over the parser's events, which leave aliases unexpanded, tracks the nesting depth and
    the size every anchor would expand to, and stops at the first limit passed.
    """
    if len(block) > FRONT_MATTER_MAX_CHARS:
        return f"front matter is longer than {FRONT_MATTER_MAX_CHARS} characters"
    if "&" not in block and "*" not in block and sum(map(block.count, "-:?[{")) < FRONT_MATTER_MAX_DEPTH:
        # no anchor, so no alias to expand; and each collection starts at one of these indicators, so fewer
        # of them than the depth limit cannot nest that deep: the common header needs no pass over its events
        return None
    sizes: dict[str, int] = {}  # expanded size (nodes and characters) of each finished anchor
    stack: list[list[Any]] = []  # per open collection: [anchor, expanded size of what it holds so far]
    done = aliases = 0  # the size of what is outside every open collection
    for event in yaml.parse(block, Loader=_HeaderLoader):
        size = 0
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= FRONT_MATTER_MAX_DEPTH:
                return f"front matter nests deeper than {FRONT_MATTER_MAX_DEPTH} levels"
            stack.append([event.anchor, 1])
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, size = stack.pop()
            if anchor is not None:
                sizes[anchor] = size
        elif isinstance(event, yaml.ScalarEvent):
            size = 1 + len(event.value)
            if event.anchor is not None:
                sizes[event.anchor] = size
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > FRONT_MATTER_MAX_ALIASES:
                return f"front matter has more than {FRONT_MATTER_MAX_ALIASES} aliases"
            if event.anchor not in sizes:  # unknown, or a collection that contains itself
                return f"front matter has an alias (*{event.anchor}) to no finished anchor"
            size = sizes[event.anchor]
        else:
            continue
        if stack:
            stack[-1][1] += size
        else:
            done += size
        if done + sum(entry[1] for entry in stack) > FRONT_MATTER_MAX_EXPANDED:
            return (
                f"front matter would expand past {FRONT_MATTER_MAX_EXPANDED} nodes and characters through its aliases"
            )
    return None


def _clean(text: str) -> str:
    """Text SQLite and the terminal accept: a lone surrogate (YAML's ``"\\ud800"``) becomes U+FFFD."""
    return text if is_utf8(text) else "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return _clean(str(value).strip()) or None


def _yaml_warning(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 2}" if mark else ""
    return f"front matter is not valid YAML{where}: {getattr(exc, 'problem', None) or exc}"


def parse_front_matter(text: str) -> MemoHeader:
    """The YAML block between leading ``---`` lines; never raises.

    A block that is broken, too big to read (``front_matter_problem``) or not a mapping gives a
    header with a ``warning`` and no fields: the memo is still delivered.
    """
    try:
        return _parse_front_matter(text)
    except Exception as exc:  # noqa: BLE001 - the last guard: a memo is delivered whatever its header holds
        return MemoHeader(warning=f"front matter could not be read: {type(exc).__name__}: {exc}"[:300])


def _parse_front_matter(text: str) -> MemoHeader:
    if not text.startswith("---"):
        return MemoHeader()
    lines = text.split("\n")
    if lines[0].strip() != "---":
        return MemoHeader()
    for end, line in enumerate(lines[1:], start=1):  # noqa: B007 - ``end`` is read after the loop
        if line.strip() in ("---", "..."):
            break
    else:
        return MemoHeader(warning="front matter has no closing '---' line")
    block = "\n".join(lines[1:end])
    try:
        problem = front_matter_problem(block)
        if problem:
            return MemoHeader(warning=f"{problem}; its fields are not read")
        data = yaml.load(block, Loader=_HeaderLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        return MemoHeader(warning=_yaml_warning(exc))
    if data is None:
        return MemoHeader()
    if not isinstance(data, dict):
        return MemoHeader(warning="front matter is not a mapping of keys")
    tags = data.get("tags") or ()
    if isinstance(tags, str):
        tags = (tags,)
    elif not isinstance(tags, (list, tuple)):
        tags = (str(tags),)
    return MemoHeader(
        id=_text(data.get("id")),
        subject=_text(data.get("subject")),
        sender=_text(data.get("from")),
        to=_text(data.get("to")),
        created_at=_text(data.get("created_at")),
        reply_to=_text(data.get("reply_to")),
        tags=tuple(_clean(str(t)) for t in tags),
        extra=data,
    )


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


def free_name(folder: Path, name: str) -> Path:
    """``folder/name``, or ``folder/<stem>.<n>.md`` when that name is taken (the stem cut to fit ``NAME_MAX``)."""
    target = folder / name
    if not os.path.lexists(target):
        return target
    stem, dot, suffix = name.rpartition(".")
    if not dot:
        stem, suffix = name, ""
    for number in range(1, 100_000):
        candidate = folder / fit_name(stem, f".{number}.{suffix}" if suffix else f".{number}")
        if not os.path.lexists(candidate):
            return candidate
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
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        if sync:
            handle.flush()
            os.fsync(handle.fileno())
    os.rename(tmp, path)


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


def header_tasks(extra: dict[str, Any]) -> tuple[str, ...]:
    """The ``tasks:`` of a wake memo's front matter (a list, or one name), as names."""
    tasks = extra.get("tasks")
    if isinstance(tasks, list):
        return tuple(str(t) for t in tasks)
    if isinstance(tasks, str):
        return (tasks,)
    return ()
