"""The live budget fuse: a running estimate of a session's cost while a turn streams, before its result says.

Claude Code reports cost only in a turn's result, and one long answer can spend many times a per-run cap before that.
The fuse cannot bound what is spent between the estimate passing the cap and the CLI aborting the call, nor API use
the CLI does not stream (a tool's own; a subagent's calls are streamed).
"""

from __future__ import annotations

import dataclasses
from typing import Any

CHARS_PER_TOKEN = 3.0  # English runs about 3.5-4 characters a token; 3 errs towards stopping early
OUTPUT_TO_INPUT = 5.0  # Anthropic's output price is five times the input price for every current model
CACHE_WRITE = 1.25  # cache writes cost 1.25x input, reads 0.1x
CACHE_READ = 0.1

# (model name prefix, input $/M tokens, output $/M tokens); the first matching prefix wins
PRICES: tuple[tuple[str, float, float], ...] = (
    ("claude-opus-5", 4.0, 20.0),
    ("claude-opus-4-5", 5.0, 25.0),
    ("claude-opus-4-6", 5.0, 25.0),
    ("claude-opus-4", 15.0, 75.0),
    ("claude-3-opus", 15.0, 75.0),
    ("claude-sonnet", 3.0, 15.0),
    ("claude-3-5-sonnet", 3.0, 15.0),
    ("claude-3-7-sonnet", 3.0, 15.0),
    ("claude-haiku-4", 1.0, 5.0),
    ("claude-3-5-haiku", 0.8, 4.0),
    ("claude-3-haiku", 0.25, 1.25),
)
UNKNOWN = (15.0, 75.0)  # a model not in the table: the highest price, so the fuse blows early rather than late


@dataclasses.dataclass
class _Call:
    model: str
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    chars: int = 0

    def output(self) -> float:
        return max(self.output_tokens, self.chars / CHARS_PER_TOKEN)


class Fuse:
    """The running estimate of one session's cost; ``estimate()`` in dollars."""

    def __init__(self, price_per_mtok: tuple[float, float] | None = None, spent: float = 0.0) -> None:
        self.override = price_per_mtok
        self.learned: dict[str, tuple[float, float]] = {}
        self.reported = spent  # the session's total at its last result (``spent``: before this run, if resumed)
        self.calls: dict[str, _Call] = {}  # model calls since the last result, by message id
        self._current = ""  # the call being streamed

    def price(self, model: str) -> tuple[float, float]:
        """Dollars per million input and output tokens for ``model``."""
        if self.override is not None:
            return self.override
        if model in self.learned:
            return self.learned[model]
        for prefix, per_in, per_out in PRICES:
            if model.startswith(prefix):
                return per_in, per_out
        if len(self.learned) == 1:  # the CLI names its model; the API may answer under another name
            return next(iter(self.learned.values()))
        return UNKNOWN

    def observe(self, event: dict[str, Any]) -> None:
        """One raw stream event of a model call (``StreamEvent.event``)."""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            key = str(message.get("id") or len(self.calls))
            usage = message.get("usage") or {}
            call = self.calls.setdefault(key, _Call(model=str(message.get("model") or "")))
            call.input_tokens = _input(usage, "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
            call.output_tokens = float(usage.get("output_tokens") or 0)
            self._current = key
            return
        streamed = self.calls.get(self._current)
        if streamed is None:
            return
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            for field in ("text", "thinking", "partial_json"):
                value = delta.get(field)
                if isinstance(value, str):
                    streamed.chars += len(value)
        elif kind == "message_delta":
            usage = event.get("usage") or {}
            if usage.get("output_tokens") is not None:
                streamed.output_tokens = max(streamed.output_tokens, float(usage["output_tokens"]))

    def estimate(self) -> float:
        """The session's cost so far: its last reported total plus the calls streamed since."""
        extra = 0.0
        for call in self.calls.values():
            per_in, per_out = self.price(call.model)
            extra += (call.input_tokens * per_in + call.output() * per_out) / 1_000_000
        return self.reported + extra

    def result(self, result: Any) -> None:
        """A turn's result: its total replaces the estimate, and its figures teach the prices."""
        if result.total_cost_usd is not None:
            self.reported = max(self.reported, float(result.total_cost_usd))
        self.calls.clear()
        for model, usage in (getattr(result, "model_usage", None) or {}).items():
            if not isinstance(usage, dict):
                continue
            cost = float(usage.get("costUSD") or 0)
            weighted = _input(usage, "inputTokens", "cacheCreationInputTokens", "cacheReadInputTokens")
            weighted += OUTPUT_TO_INPUT * float(usage.get("outputTokens") or 0)
            if cost > 0 and weighted > 0:
                per_in = cost / weighted * 1_000_000
                self.learned[model] = (per_in, per_in * OUTPUT_TO_INPUT)


def _input(usage: dict[str, Any], plain: str, written: str, read: str) -> float:
    """A usage's input tokens, with cache writes and reads weighted by their share of the input price."""
    return (
        float(usage.get(plain) or 0)
        + CACHE_WRITE * float(usage.get(written) or 0)
        + CACHE_READ * float(usage.get(read) or 0)
    )
