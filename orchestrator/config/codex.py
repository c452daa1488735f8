"""A role's keys for ``backend: codex`` (OpenAI's Codex CLI): added to its ``codex exec`` command as arguments.

``model`` is shared with the sdk's keys (``SdkSettings``); a key the role's own command already gives is not
added again (Codex refuses ``-m`` given twice).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, PrivateAttr

from orchestrator.core.units import Strict

CODEX_COMMAND = ("codex", "exec", "--json", "-")  # a codex role's default command, with its ``sandbox``:
DEFAULT_SANDBOX = "workspace-write"  # the sandbox of a role that runs the default command and names none (a command
# of its own and no ``sandbox``: the one Codex's own config.toml chooses)


class TokenPrice(Strict):
    """What a model's tokens cost, in dollars per million: ``prices: {MODEL: {input, cached_input, output}}``
    in roles.yaml, for the estimated cost of an agent that reports tokens but no dollars (Codex)."""

    input: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)  # None: as ``input``
    output: float = Field(ge=0)


class CodexSettings(Strict):
    """``sandbox`` (``--sandbox``), ``config`` (one ``-c key=value`` each, the value read by Codex as TOML) and
    ``profile`` (``--profile``)."""

    sandbox: Literal["read-only", "workspace-write", "danger-full-access"] | None = None
    config: dict[str, str | int | float | bool] = Field(default_factory=dict)
    profile: str | None = None
    _prices: dict[str, TokenPrice] = PrivateAttr(default_factory=dict)  # the team's ``prices``, given at load

    def take_prices(self, prices: Mapping[str, TokenPrice]) -> None:
        """Keep the team's ``prices`` table (a top-level key) with the role, for its agents' estimated cost."""
        self._prices = dict(prices)

    def token_price(self, model: str | None) -> TokenPrice | None:
        """What ``model``'s tokens cost, from the team's ``prices``; None when it has no price."""
        return self._prices.get(model) if model else None
