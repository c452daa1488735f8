"""Writing a new memo into a role's inbox, complete or not at all: what ``orchestrator send`` and the breaker's notices use.

The id is the corpus' style, the millisecond clock in hex (``19c57853c37``),
with a suffix (``19c57853c37-2``) when a memo file already carries it; the file
name is ``<id>-<slug of subject>.md``. Ids are chosen under a lock file
(``memo/.send.lock``), so two senders in the same millisecond never share one.
The text goes to a hidden temporary name and is renamed into the inbox, so a
watcher never sees half a memo.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from filelock import FileLock

from orchestrator.intake import catalog
from orchestrator.intake.memo import INBOX, fit_name, render_memo, slug, write_atomically

LOCK_NAME = ".send.lock"


@dataclass(frozen=True)
class Sent:
    """A memo just written: its id and where it lies."""

    memo_id: str
    path: Path


def first_line(text: str, limit: int = 120) -> str:
    """The first line of ``text`` that holds anything, without Markdown heading marks, cut to ``limit``."""
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:limit]
    return ""


def _taken(root: Path) -> set[str]:
    """Every id the memo files' names carry, in the corpus style (``<id>-<slug>.md`` or ``<id>.md``)."""
    out: set[str] = set()
    for _, _, path in catalog.memo_files(root):
        stem = path.name.removesuffix(".md")
        out.add(stem)
        # ``19c5-2-fix.md`` carries ``19c5-2``; every prefix ending before a dash might be its id
        parts = stem.split("-")
        out.update("-".join(parts[:n]) for n in range(1, len(parts)))
    return out


def free_id(now: datetime, taken: set[str] | Callable[[str], bool]) -> str:
    """The millisecond clock in hex, with ``-2``, ``-3``, ... while that id is taken (a set, or a question)."""
    is_taken = taken.__contains__ if isinstance(taken, set) else taken
    base = format(int(now.timestamp() * 1000), "x")
    memo_id, n = base, 1
    while is_taken(memo_id):
        n += 1
        memo_id = f"{base}-{n}"
    return memo_id


def write_memo(
    root: Path,
    to: str,
    body: str,
    *,
    subject: str,
    sender: str,
    now: datetime,
    reply_to: str | None = None,
    tags: Sequence[str] = (),
    taken: Callable[[str], bool] | None = None,
    workspace: str | None = None,
) -> Sent:
    """Write one memo into ``memo/<to>/inbox/`` with full front matter; returns its id and path. ``taken``: whether
    an id is carried already (``send`` asks the memo index); by default every memo file's name is read.
    ``workspace``: the workspace the memo is worked on in (``send`` from a run in one)."""
    memo_dir = root / "memo"
    memo_dir.mkdir(parents=True, exist_ok=True)
    inbox = memo_dir / to / INBOX
    with FileLock(str(memo_dir / LOCK_NAME)):
        memo_id = free_id(now, taken or _taken(root))
        header = {
            "id": memo_id,
            "subject": subject,
            "from": sender,
            "to": to,
            "created_at": now.astimezone().isoformat(timespec="milliseconds"),
            "tags": list(tags),
            "reply_to": reply_to,
        }
        if workspace:
            header["workspace"] = workspace
        path = inbox / fit_name(f"{memo_id}-{slug(subject)}", ".md")
        write_atomically(path, render_memo(header, body))
    return Sent(memo_id, path)
