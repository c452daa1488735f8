"""An answered memo's way back from ``waiting/`` to its inbox, after its answer is on record (``Asks._answer``), or
at a start of ``up`` when a restart cut the move short."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from orchestrator.asks import records
from orchestrator.asks.records import Ask
from orchestrator.asks.texts import question_path
from orchestrator.config import Config
from orchestrator.intake import memo_index
from orchestrator.intake.memo import ACTIVE, INBOX, WAITING, free_name


def send_back(db: sqlite3.Connection, config: Config, ask: Ask, now: float) -> list[Path]:
    """Move the answered ask's memos from ``waiting/`` to its inbox, the first under ``ask.memo`` (the name on record,
    or the next one free in the inbox and in ``active/``, then on record); the paths moved."""
    role_dir = config.role_dir(ask.role)
    inbox = role_dir / INBOX
    back: list[Path] = []
    for index, name in enumerate(ask.memos):
        src = role_dir / WAITING / name
        target = free_name(inbox, ask.memo if index == 0 else name, also=[role_dir / ACTIVE])
        try:
            os.rename(src, target)
        except FileNotFoundError:
            continue
        memo_index.moved(db, src, target, now)
        with contextlib.suppress(FileNotFoundError):
            question_path(src).unlink()
        back.append(target)
    if back and back[0].name != ask.memo:
        records.moved_to(db, ask.ask_id, back[0].name)
    return back


def left_waiting(config: Config, ask: Ask, waiting: list[Ask]) -> bool:
    """An answered ask whose memos a restart left in ``waiting/`` (no ``waiting`` ask of its role names them)."""
    folder = config.role_dir(ask.role) / WAITING
    claimed = {name for other in waiting if other.role == ask.role for name in other.memos}
    return any((folder / name).exists() and name not in claimed for name in ask.memos)


def any_in(folder: Path, names: list[str]) -> bool:
    """Whether one of the memos ``names`` is in ``folder``."""
    return any((folder / name).exists() for name in names)
