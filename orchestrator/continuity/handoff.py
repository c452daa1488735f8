"""The handoff file: ``memo/<role>/handoff.md``, free Markdown the role's agents edit for the next run.

The orchestrator reads it into ``$handoff``, drops list items whose
``(until YYYY-MM-DD)`` has passed, keeps a copy of every version a run left
(``.orchestrator/handoff/<role>/<seq>.md``) and writes only one section of its
own, between ``<!-- orchestrator -->`` and ``<!-- /orchestrator -->``. A file
that is not UTF-8, a directory, or a symlink out of the root is never touched.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

from orchestrator.config import Config
from orchestrator.intake.memo import write_atomically

HANDOFF = "handoff.md"
START, END = "<!-- orchestrator -->", "<!-- /orchestrator -->"
_UNTIL = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+.*\(until (\d{4}-\d{2}-\d{2})\)\s*$")
# the section: a start marker, then no other start marker before its end marker (one the agent left without its end
# is the agent's text, not the start of ours)
_SECTION = re.compile(re.escape(START) + r"(?:(?!" + re.escape(START) + r").)*?" + re.escape(END) + r"\n?", re.DOTALL)
_VERSION = re.compile(r"^(\d+)\.md$")


@dataclass(frozen=True)
class Handoff:
    """The handoff as read: its text ("" when there is none yet), or the problem that keeps it out."""

    path: Path
    text: str
    problem: str | None = None

    @property
    def usable(self) -> bool:
        return self.problem is None


def handoff_path(config: Config, role: str) -> Path:
    return config.role_dir(role) / HANDOFF


def versions_dir(config: Config, role: str) -> Path:
    return config.state_dir / "handoff" / role


def read_handoff(config: Config, role: str) -> Handoff:
    """Read the role's handoff; a bad file gives a ``problem`` and no text, and is left as it is."""
    path = handoff_path(config, role)
    rel = f"memo/{role}/{HANDOFF}"
    try:
        info = os.lstat(path)  # most roles have no handoff: one failed lstat says so
        if stat.S_ISLNK(info.st_mode):
            target = path.resolve()
            if not target.is_relative_to(config.root):
                return Handoff(path, "", f"{rel} is a symlink out of the project root")
            path = target
            info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            return Handoff(path, "", f"{rel} is a directory")
        data = path.read_bytes()
    except FileNotFoundError:
        return Handoff(path, "")
    except OSError as exc:
        return Handoff(path, "", f"{rel} cannot be read: {exc.strerror or exc}")
    try:
        return Handoff(path, data.decode("utf-8"))
    except UnicodeDecodeError:
        return Handoff(path, "", f"{rel} is not UTF-8")


def write_handoff(handoff: Handoff, text: str, sync: bool = True) -> None:
    """Replace the handoff's text whole (never half-written); only for a usable handoff.

    ``sync=False``: no fsync yet; the caller syncs it (``handoff_writes``: once a turn for every end of it).
    """
    assert handoff.usable
    write_atomically(handoff.path, text, sync)


_ANY_DATE = re.compile(r"\(until (\d{4}-\d{2}-\d{2})\)", re.MULTILINE)


def expire(text: str, today: date) -> tuple[str, list[str]]:
    """Drop list items ending in ``(until YYYY-MM-DD)`` whose date has passed; (new text, dropped lines)."""
    # the common case, every date still to come: one scan of the text (ISO dates compare as strings)
    cutoff = today.isoformat()
    if all(found.group(1) >= cutoff for found in _ANY_DATE.finditer(text)):
        return text, []
    kept: list[str] = []
    dropped: list[str] = []
    ours = _SECTION.search(text)  # only the orchestrator's own section is left as it is (a start marker the agent
    at = 0  # left without its end is the agent's text, as ``section`` has it)
    for line in text.splitlines(keepends=True):
        inside = ours is not None and ours.start() <= at < ours.end()
        at += len(line)
        match = None if inside else _UNTIL.match(line.rstrip("\n"))
        if match:
            try:
                until = date.fromisoformat(match.group(1))
            except ValueError:
                until = None
            if until is not None and until < today:
                dropped.append(line.rstrip("\n"))
                continue
        kept.append(line)
    return "".join(kept), dropped


def section(text: str) -> str | None:
    """The orchestrator's section, markers included, or None."""
    match = _SECTION.search(text)
    return match.group(0).rstrip("\n") if match else None


def put_section(text: str, body: str) -> str:
    """The text with the orchestrator's section replaced by ``body`` (added at the end when there is none)."""
    block = f"{START}\n{body.strip()}\n{END}\n"
    if _SECTION.search(text):
        return _SECTION.sub(lambda _m: block, text, count=1)
    if text and not text.endswith("\n"):
        text += "\n"
    return text + ("\n" if text.strip() else "") + block


def agents_bytes(text: str) -> int:
    """The size of the agent's own part of a handoff (what ``handoff_max_bytes`` caps): the orchestrator's note
    is not the agent's to compact."""
    return len(remove_section(text).encode("utf-8"))


def remove_section(text: str) -> str:
    """The text without the orchestrator's section (and the blank line it was given before it)."""
    match = _SECTION.search(text)
    if not match:
        return text
    before, after = text[: match.start()], text[match.end() :]
    if before.endswith("\n\n") and not after.strip():
        before = before[:-1]
    return before + after


# ------------------------------------------------------------------ versions
def versions(config: Config, role: str) -> list[tuple[int, Path]]:
    """(seq, path) of every kept version, oldest first."""
    folder = versions_dir(config, role)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = [(int(m.group(1)), folder / n) for n in names if (m := _VERSION.match(n))]
    return sorted(found)


def _last_version(folder: Path) -> Path | None:
    """The newest kept version in ``folder``: at every run's end, so one pass over the names and no sort (a role
    that ends 300 runs at once keeps 300 versions)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    newest = max((int(m.group(1)) for n in names if (m := _VERSION.match(n))), default=None)
    return None if newest is None else folder / f"{newest}.md"


def snapshot(config: Config, role: str, seq: int, text: str) -> bool:
    """Keep ``text`` as the version written by run ``seq`` when it differs from the last kept one."""
    folder = versions_dir(config, role)
    last = _last_version(folder)
    if last is not None:
        try:
            if last.read_text(encoding="utf-8") == text:
                return False
        except (OSError, UnicodeDecodeError):
            pass
    elif not text:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    write_atomically(folder / f"{seq}.md", text)
    return True


def keep_replaced(config: Config, role: str, text: str, now: datetime) -> Path | None:
    """Before a restore: the current text, when no version holds it, is kept beside the versions."""
    for _, path in reversed(versions(config, role)):
        try:
            if path.read_text(encoding="utf-8") == text:
                return None
        except (OSError, UnicodeDecodeError):
            continue
    if not text:
        return None
    folder = versions_dir(config, role)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"replaced-{now.strftime('%Y%m%d-%H%M%S')}.md"
    write_atomically(path, text)
    return path
