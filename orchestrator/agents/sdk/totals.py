"""Cost, tokens and turns over a session's results.

Totals follow what Claude Code 2.1 documents for streaming-input sessions:
``total_cost_usd`` and ``modelUsage`` on a result are running totals (the latest
is taken, never summed); ``num_turns`` counts one prompt's model turns (summed).
Tokens come from ``modelUsage`` (every model call, subagents included); input
tokens count cache reads and writes too. A resumed session continues from the
total its transcript saved, so after ``resume`` the cost includes earlier attempts.
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
