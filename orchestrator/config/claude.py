"""The Claude CLI's own behaviour a role sets (``orchestrator/agents/claude_cli``), for either Claude backend."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.core.units import Strict


class Prices(Strict):
    """Dollars per million tokens, for the live budget fuse's estimate."""

    input: float = Field(gt=0)
    output: float = Field(gt=0)


class ClaudeKeys(Strict):
    """A role's keys for the Claude CLI it runs (a ``command`` whose program is ``claude``, or ``backend: sdk``)."""

    api_retries: int = Field(2, ge=0, le=20)  # the Claude CLI's own retries of an API error (CLAUDE_CODE_MAX_RETRIES)
    price_per_mtok: Prices | None = None  # overrides the fuse's price table
    background_tasks: bool = False  # Claude roles: the CLI may start background tasks (killed at the end of a -p run)
    on_denied: Literal["fail", "warn"] = "fail"  # Claude's result lists tool calls the permissions refused
