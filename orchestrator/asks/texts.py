"""What the asks feature writes for people and agents (``$answers``, the ``<stem>.question`` file beside a waiting
memo, the command that answers it), and the record of what a run asks."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.asks.records import Ask
from orchestrator.config import RoleRun
from orchestrator.intake.memo import fit_name


@dataclass(frozen=True)
class Pending:
    """What a run's end will park: decided by ``decide_end``, recorded once its memos are in ``waiting/``."""

    kind: str
    question: str
    tool: dict[str, Any] | None
    session_id: str | None
    at: str | None = None  # when it was asked (ISO 8601), when not as the run ends


def answers_text(asks: list[Ask]) -> str:
    """``$answers``: each question the agent asked and the person's answer (one per memo of its run that asked)."""
    lines = []
    for ask in asks:
        answer = ask.answer or {}
        said = answer.get("text") or ""
        denied = answer.get("decision") == "deny"
        if ask.kind == "approval":
            said = f"denied ({answer.get('note') or 'a person denied this call'})" if denied else "allowed"
        elif denied:
            said = f"(no answer: {answer.get('note') or 'a person declined to answer'})"
        lines.append(f"You asked a person: {ask.question}\nThe answer ({ask.answered_by}): {said}\n")
    return "# Answers\n\n" + "\n".join(lines)


def answer_how(kind: str, memo: str) -> str:
    """The command that answers a question (or an approval) of ``memo`` (a name, or a path when the name is not
    enough), as a shell reads it: quoted when it holds a space or a character the shell would act on."""
    memo = shlex.quote(memo)
    if kind == "approval":
        return f"orchestrator answer {memo} --allow (or --deny --note TEXT)"
    return f'orchestrator answer {memo} "YOUR ANSWER"'


def question_text(run: RoleRun, pending: Pending, memo: str, when: datetime) -> str:
    """``<stem>.question``: the question (or the call), who asked and when, and how to answer."""
    asked = pending.at or when.isoformat(timespec="seconds")
    return (
        f"{pending.kind}: {pending.question}\nrole: {run.role.name}\nrun: {run.run_id}\nasked: {asked}\n"
        f"answer: {answer_how(pending.kind, memo)}\n"
    )


def question_path(memo: Path) -> Path:
    """``waiting/<stem>.question`` beside ``waiting/<stem>.md``, the stem cut to fit ``NAME_MAX`` (``.question`` is
    longer than ``.md``)."""
    return memo.with_name(fit_name(memo.name.removesuffix(".md"), ".question"))


def new_ask(run: RoleRun, state: str, pending: Pending, names: list[str], now: datetime) -> Ask:
    """The record of what ``run`` asks (``pending``), in ``state``; ``names``: its memos' (default: as they are)."""
    first = run.memos[0] if run.memos else None
    names = names or [memo.name for memo in run.memos]
    return Ask(
        0,
        run.role.name,
        names[0] if names else "",
        names,
        first.memo_id if first else None,
        first.subject if first else None,
        run.run_id,
        pending.kind,
        pending.question,
        pending.tool,
        pending.session_id,
        pending.at or now.isoformat(timespec="seconds"),
        now.timestamp() + run.role.ask_timeout,
        state,
        None,
        None,
        None,
    )
