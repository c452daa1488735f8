"""A role's keys for ``backend: sdk``: the claude-agent-sdk options it may set in ``roles.yaml``.

Declared once here: ``config.Role`` takes them as its own keys, and the runner's spec carries them on the wire
(``protocol.SpecOptions`` extends this model), so a key the SDK gains is added in one place. Nothing here
imports the SDK.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.core.units import Strict


class SystemPromptPreset(Strict):
    """Claude Code's own system prompt, optionally with text appended."""

    preset: Literal["claude_code"] = "claude_code"
    append: str | None = None


class SdkSettings(Strict):
    """The SDK's options a role sets; paths as written (the spec carries them resolved)."""

    model: str | None = None
    system_prompt: str | SystemPromptPreset = Field(default_factory=SystemPromptPreset)
    permission_mode: Literal["default", "acceptEdits", "plan", "bypassPermissions"] | None = None
    allowed_tools: list[str] = Field(default_factory=list)
    disallowed_tools: list[str] = Field(default_factory=list)
    max_turns: int | None = Field(None, ge=1)
    max_budget_usd: float | None = Field(None, gt=0)
    setting_sources: list[Literal["user", "project", "local"]] | None = None
    cli_path: str | None = None
    add_dirs: list[str] = Field(default_factory=list)
