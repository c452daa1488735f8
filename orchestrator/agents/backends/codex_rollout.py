"""What a Codex thread spent, as Codex's own record of it says: for a turn that failed or was stopped.

``codex exec --json`` gives a turn's tokens only in its ``turn.completed``: a turn that failed (a server error after
the model had answered and a command had run) or was stopped (a cancel, a timeout) says nothing of what it spent,
although each model response in it was paid for. Codex writes every thread to a rollout file,
``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl``, and after each response a ``token_count``
event there holds the thread's running totals (``info.total_token_usage``), the same totals a ``turn.completed``
gives. Read at the attempt's end, in its worker thread; a thread Codex keeps no file of (``--ephemeral``), or one
whose file cannot be read, reads as nothing, as before.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

TAIL_BYTES = 4 * 1024 * 1024  # a rollout read back at most this far: a token count follows every model response
_THREAD = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,127}")


def codex_home(env: dict[str, str]) -> Path:
    """Where Codex keeps its configuration and threads for an agent with environment ``env``."""
    return Path(env.get("CODEX_HOME") or Path(env.get("HOME") or Path.home()) / ".codex")


def thread_spent(home: Path, thread_id: str, keys: tuple[str, ...]) -> dict[str, int]:
    """The thread's running token totals (``keys`` of them) by its rollout's last ``token_count``; empty when there
    is no such file or count, or it cannot be read (never raises: the attempt's verdict does not depend on it)."""
    if not _THREAD.fullmatch(thread_id):
        return {}
    try:
        return _last_totals(_tail(home, thread_id), keys)
    except (OSError, ValueError):
        return {}


def _tail(home: Path, thread_id: str) -> list[bytes]:
    """The lines of the end of the thread's newest rollout (none when it has none); a regular file only."""
    found = sorted((home / "sessions").glob(f"*/*/*/rollout-*-{thread_id}.jsonl"), key=_modified)
    if not found:
        return []
    fd = os.open(found[-1], os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO put there must not hang us
    with open(fd, "rb") as rollout:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return []
        rollout.seek(max(0, info.st_size - TAIL_BYTES))
        return rollout.read().splitlines()


def _last_totals(lines: list[bytes], keys: tuple[str, ...]) -> dict[str, int]:
    for line in reversed(lines):
        if b'"token_count"' not in line:
            continue
        try:
            payload = json.loads(line).get("payload") or {}
            totals = (payload.get("info") or {}).get("total_token_usage")
        except (ValueError, AttributeError):
            continue
        if payload.get("type") == "token_count" and isinstance(totals, dict):  # Codex writes some with no info
            return {k: v for k in keys if isinstance(v := totals.get(k), int)}
    return {}


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
