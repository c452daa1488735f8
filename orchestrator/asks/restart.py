"""What a start of ``up`` puts right in the asks feature's records, the memo folders being the truth: a restart may
have cut any step short between a record and the move of a memo it names.

- an ``asked`` row whose run is not running: that run ended (its end, not its parking, was committed);
- a ``waiting`` row none of whose memos is in ``waiting/``: its run's end never moved them there (or its cancel did);
- an ``answered`` row no memo carries any more: the run that took it ended (other than returned to its inbox), or
  its memo left the inbox and ``held/``;
- a memo in ``waiting/`` that no row names: its question is read back from ``<stem>.question`` (or said lost), so it
  can still be answered, cancelled or timed out.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Collection
from datetime import datetime
from pathlib import Path

from orchestrator.asks import records
from orchestrator.asks.moving import any_in
from orchestrator.asks.records import Ask
from orchestrator.asks.texts import question_path
from orchestrator.config import Config
from orchestrator.intake.memo import HELD, INBOX, WAITING

LOST = "(its question was lost in a restart of up: answer it to run the memo again, or cancel it)"


def heal(
    db: sqlite3.Connection, config: Config, live: Collection[int], now: datetime, say: Callable[[str], None]
) -> None:
    """Forget the rows nothing stands for, and record a question for each waiting memo no row names."""
    for ask in records.every(db):
        if ask.role not in config.roles:  # kept as it is, for the role to be added back
            continue
        waiting = config.role_dir(ask.role) / WAITING
        if ask.state == "asked":
            over = ask.run_id not in live
        elif ask.state == "waiting":
            over = not any_in(waiting, ask.memos)
        else:
            over = ask.taken_by not in live and not _still_carried(db, config, ask)
        if over:
            records.forget(db, ask.ask_id)
            with contextlib.suppress(OSError):
                (config.state_dir / "asks" / f"{ask.ask_id}.json").unlink()
            for name in ask.memos if ask.state == "waiting" else ():  # its question is no later namesake's
                with contextlib.suppress(OSError):
                    question_path(waiting / name).unlink()
    named = {(ask.role, name) for ask in records.every(db, "waiting") for name in ask.memos}
    for role in config.roles:
        waiting = config.role_dir(role) / WAITING
        memos = sorted(waiting.glob("*.md"))
        questions = {question_path(memo).name for memo in memos}
        # a question whose memo is not there is no one's; a hidden temporary, a write cut short by a kill
        for left in [*waiting.glob("*.question"), *waiting.glob(".*.question.*.tmp")]:
            if left.name not in questions:
                with contextlib.suppress(OSError):
                    left.unlink()
        for memo in memos:
            if (role, memo.name) not in named:
                found = found_ask(role, memo, now, config.roles[role].ask_timeout)
                records.insert(db, found)
                said = (
                    "its question read back from its .question file" if found.question != LOST else "its question lost"
                )
                say(f"{memo.name} waits in memo/{role}/{WAITING}/ with no record ({said}): a restart cut its end short")


def found_ask(role: str, memo: Path, now: datetime, timeout: float) -> Ask:
    """The waiting ask of a memo found in ``waiting/`` with no record, from the ``.question`` file beside it: its kind
    and question (the call an approval waits on is not resumed: its answer runs the memo again)."""
    kind, question, run_id = "question", LOST, 0
    with contextlib.suppress(OSError, UnicodeDecodeError):
        lines = question_path(memo).read_text(encoding="utf-8").splitlines()
        said, _, text = lines[0].partition(": ")
        if said in ("question", "approval") and text:
            kind, question = said, text
        for line in lines[1:]:
            key, _, value = line.partition(": ")
            if key == "run" and value.isdigit():
                run_id = int(value)
    stamp = now.isoformat(timespec="seconds")
    return Ask(0, role, memo.name, [memo.name], None, None, run_id, kind, question, None, None, stamp,
               now.timestamp() + timeout, "waiting", None, None, None)  # fmt: skip


def _still_carried(db: sqlite3.Connection, config: Config, ask: Ask) -> bool:
    """An answered ask whose memo still waits to run with it: in its inbox or ``held/``, and either not taken yet or
    taken by a run that was returned to its inbox (which carries its answer on)."""
    memo = ask.memo
    if ask.taken_by is not None:
        row = db.execute("SELECT state, memos, reason FROM runs WHERE run_id = ?", (ask.taken_by,)).fetchone()
        if row is None or row[0] != "returned" or (row[2] or "").startswith(f"{WAITING}:"):
            return False  # ended, or parked again: its answer was used
        names = json.loads(row[1] or "[]")
        if len(names) == 1 and names[0] != memo:  # returned under another name, before its answer could follow it
            memo = names[0]
            records.moved_to(db, ask.ask_id, memo)
    role_dir = config.role_dir(ask.role)
    return (role_dir / INBOX / memo).exists() or (role_dir / HELD / memo).exists()
