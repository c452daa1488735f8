"""The asks feature's control requests: an agent's ``ask`` and a person's ``answer``, and the waiting ask an
answer names."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.asks.records import Ask
from orchestrator.control.authority import Caller
from orchestrator.control.protocol import FeatureRequest
from orchestrator.core.errors import AmbiguousMemoError, MemoFinishedError, UnknownMemoError, UsageError
from orchestrator.intake.memo import WAITING

QUESTION_MAX = 4000
ANSWER_MAX = 64 * 1024


class AskRequest(FeatureRequest):
    """``ask``: the agent of run ``run_id`` asks a person ``question`` (an agent that is not the Claude CLI)."""

    op: Literal["ask"] = "ask"
    run_id: int
    question: str = Field(min_length=1, max_length=QUESTION_MAX)


class AnswerRequest(FeatureRequest):
    """``answer``: a person answers the question ``memo`` waits on (``text``), or allows or denies its call; ``memo``
    is its file name, stem or id, or its path, which also names its role."""

    op: Literal["answer"] = "answer"
    memo: str = Field(min_length=1)
    text: str | None = Field(None, max_length=ANSWER_MAX)
    allow: bool = False
    deny: bool = False
    note: str | None = Field(None, max_length=ANSWER_MAX)


def own_run(request: AskRequest, caller: Caller) -> bool:
    """An agent asks about its own run only."""
    return caller.run_id == request.run_id


def find(
    waiting: list[Ask],
    query: str,
    ending: Collection[int],
    parking: Collection[int] = (),
    answered: Callable[[], list[Ask]] = list,
) -> Ask:
    """The waiting ask ``query`` names: the file name or stem of one of its memos, its memo id, or a memo's path
    (``memo/<role>/waiting/<name>``, absolute or not), which names the role too; ``AmbiguousMemoError`` when it names
    several. ``ending``: the asks whose memos a cancel or a timeout is ending (not to be answered any more);
    ``parking``: those whose memos their run's end is still moving into ``waiting/`` (to be answered once there);
    ``answered``: the asks answered already, whose run has yet to end with the answer (``MemoFinishedError``)."""
    found = _named(waiting, query)
    if found and all(ask.ask_id in ending for ask in found):
        raise UsageError(f"orchestrator answer: {found[0].memo} is being cancelled or failed; nothing to answer")
    if found and all(ask.ask_id in parking for ask in found):
        raise UsageError(f"orchestrator answer: {found[0].memo} is still being moved to {WAITING}/; answer it there")
    found = [ask for ask in found if ask.ask_id not in ending and ask.ask_id not in parking]
    if not found and (done := _named(answered(), query)):
        raise MemoFinishedError(
            f"orchestrator answer: {done[0].memo} was answered already, by {done[0].answered_by or '?'} at "
            f"{done[0].answered_at or '?'}; its run goes on with that answer"
        )
    if not found:
        names = ", ".join(ask.memo for ask in waiting) or "none"
        raise UnknownMemoError(f"orchestrator answer: no memo waiting for an answer matches {query!r} ({names})")
    if len(found) > 1:
        listing = ", ".join(f"memo/{ask.role}/{WAITING}/{ask.memo}" for ask in found)
        raise AmbiguousMemoError(
            f"orchestrator answer: {query!r} matches {len(found)} waiting memos ({listing}); name one by its path"
        )
    return found[0]


def _named(asks: list[Ask], query: str) -> list[Ask]:
    """The asks ``query`` names (``find``)."""
    parts = Path(query).parts
    if len(parts) > 1:  # a path names the role: memo/<role>/waiting/<name>
        role = parts[-3] if len(parts) >= 3 and parts[-2] == WAITING else None
        found = [ask for ask in asks if role == ask.role and parts[-1] in ask.memos]
        return found or [ask for ask in asks if ask.memo_id == query]  # an id with a slash
    found = [ask for ask in asks if query in (*ask.memos, *(m.removesuffix(".md") for m in ask.memos))]
    return found or [ask for ask in asks if ask.memo_id == query]
