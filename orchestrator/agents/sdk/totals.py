"""Cost, tokens and turns over a session's results.

In Claude Code 2.1's streaming-input sessions a result's ``total_cost_usd`` and ``modelUsage`` are running totals, so
the latest is taken; ``num_turns`` counts one prompt's turns, so it is summed. Tokens come from ``modelUsage``, which
counts every model call, subagents included. After ``resume`` the cost includes the earlier attempts: the session
goes on from the total its transcript saved.
"""

from __future__ import annotations

from typing import Any

from orchestrator.agents.claude_stream import tokens


class Totals:
    """Cost, tokens and turns over every result of the session so far."""

    def __init__(self) -> None:
        self.cost_usd = 0.0
        self.input_tokens = 0
        self.output_tokens = 0
        self.num_turns = 0
        self._turn_tokens = (0, 0)  # summed per-turn ``usage``, for a CLI that sends no ``modelUsage``

    def add(self, result: Any) -> None:
        """Take in one ``ResultMessage``."""
        if result.total_cost_usd is not None:
            self.cost_usd = max(self.cost_usd, float(result.total_cost_usd))  # a running total; a crash may send 0
        self.num_turns += int(result.num_turns or 0)
        turn_input, turn_output = tokens(result.usage or {})
        self._turn_tokens = (self._turn_tokens[0] + turn_input, self._turn_tokens[1] + turn_output)
        model_usage = getattr(result, "model_usage", None) or {}
        if any(isinstance(m, dict) for m in model_usage.values()):
            self.input_tokens, self.output_tokens = tokens({}, model_usage)
        else:
            self.input_tokens, self.output_tokens = self._turn_tokens
