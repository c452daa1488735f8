"""The asks feature's control requests: an agent's ``ask`` and a person's ``answer``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.control.authority import Caller
from orchestrator.control.protocol import FeatureRequest

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
