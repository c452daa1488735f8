"""What continuity puts in a role's prompt (``orchestrator/continuity``): its context files, its journal, its handoff."""

from __future__ import annotations

from pydantic import Field

from orchestrator.core.units import Strict


class ContinuityKeys(Strict):
    """A role's keys for what each run starts knowing."""

    context: list[str] = Field(default_factory=list)
    context_max_bytes: int = Field(64 * 1024, ge=1)
    journal_in_prompt: int = Field(5, ge=0)
    handoff_max_bytes: int = Field(20 * 1024, ge=1)
