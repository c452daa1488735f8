"""What the asks feature writes for people and agents: ``$answers``, the ``<stem>.question`` file beside a waiting
memo, and the command that answers it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.asks.records import Ask
from orchestrator.config import RoleRun


@dataclass(frozen=True)
class Pending:
    """What a run's end will park: decided by ``decide_end``, recorded once its memos are in ``waiting/``."""

    kind: str
    question: str
    tool: dict[str, Any] | None
    session_id: str | None


def answers_text(ask: Ask) -> str:
    """``$answers``: the question the agent asked and the person's answer."""
    answer = ask.answer or {}
    said = answer.get("text") or ""
    if answer.get("decision") == "deny":
        said = f"(no answer: {answer.get('note') or 'a person declined to answer'})"
    return f"# Answers\n\nYou asked a person: {ask.question}\nThe answer ({ask.answered_by}): {said}\n"


def answer_how(kind: str, memo: str) -> str:
    """The command that answers a question (or an approval) of ``memo``."""
    if kind == "approval":
        return f"orchestrator answer {memo} --allow (or --deny --note TEXT)"
    return f'orchestrator answer {memo} "YOUR ANSWER"'


def question_text(run: RoleRun, pending: Pending, memo: str, when: datetime) -> str:
    """``<stem>.question``: the question (or the call), who asked and when, and how to answer."""
    asked = when.isoformat(timespec="seconds")
    return (
        f"{pending.kind}: {pending.question}\nrole: {run.role.name}\nrun: {run.run_id}\nasked: {asked}\n"
        f"answer: {answer_how(pending.kind, memo)}\n"
    )


def question_path(memo: Path) -> Path:
    """``waiting/<stem>.question`` beside ``waiting/<stem>.md``."""
    return memo.with_name(memo.name.removesuffix(".md") + ".question")
