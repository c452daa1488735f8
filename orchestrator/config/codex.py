"""A role's keys for ``backend: codex`` (OpenAI's Codex CLI): added to its ``codex exec`` command as arguments.

``model`` is shared with the sdk's keys (``SdkSettings``); a key the role's own command already gives is not
added again (Codex refuses ``-m`` given twice).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.core.units import Strict

CODEX_COMMAND = ("codex", "exec", "--json", "--sandbox", "workspace-write", "-")  # a codex role's default command


class CodexSettings(Strict):
    """``sandbox`` (``--sandbox``), ``config`` (one ``-c key=value`` each, the value read by Codex as TOML) and
    ``profile`` (``--profile``)."""

    sandbox: Literal["read-only", "workspace-write", "danger-full-access"] | None = None
    config: dict[str, str | int | float | bool] = Field(default_factory=dict)
    profile: str | None = None


class TokenPrice(Strict):
    """What a model's tokens cost, in dollars per million: ``prices: {MODEL: {input, cached_input, output}}``
    in roles.yaml, for the estimated cost of an agent that reports tokens but no dollars (Codex)."""

    input: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)  # None: as ``input``
    output: float = Field(ge=0)
