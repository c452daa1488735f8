"""Reading the SDK's messages: each as a transcript line, and what an assistant message says it is doing."""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestrator.agents.claude_errors import one_line

_BLOCK_TYPES = {
    "TextBlock": "text",
    "ThinkingBlock": "thinking",
    "ToolUseBlock": "tool_use",
    "ToolResultBlock": "tool_result",
    "ServerToolUseBlock": "server_tool_use",
    "ServerToolResultBlock": "server_tool_result",
}
_MESSAGE_TYPES = {
    "UserMessage": "user",
    "AssistantMessage": "assistant",
    "ResultMessage": "result",
    "StreamEvent": "stream_event",
    "RateLimitEvent": "rate_limit_event",
    "ConversationResetMessage": "conversation_reset",
}


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        out: dict[str, Any] = {"type": _BLOCK_TYPES[name]} if name in _BLOCK_TYPES else {}
        for item in dataclasses.fields(value):
            out.setdefault(item.name, _jsonable(getattr(value, item.name)))
        return out
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def transcript_entry(message: Any) -> dict[str, Any]:
    """One SDK message as a transcript line; ``type`` says what it is."""
    from claude_agent_sdk import SystemMessage

    name = type(message).__name__
    kind = "system" if isinstance(message, SystemMessage) else _MESSAGE_TYPES.get(name, name)
    body = _jsonable(message)
    return {"type": kind, **(body if isinstance(body, dict) else {"value": body})}


_TOOL_KEYS = ("command", "file_path", "path", "pattern", "url", "query", "description", "prompt")


def describe_activity(message: Any) -> str | None:
    """``Tool: argument`` for the message's last tool use, else the first line of its last text."""
    from claude_agent_sdk import TextBlock, ToolUseBlock

    for block in reversed(message.content):
        if isinstance(block, ToolUseBlock):
            args = block.input if isinstance(block.input, dict) else {}
            detail = next((args[k] for k in _TOOL_KEYS if isinstance(args.get(k), str)), None)
            detail = detail or next((v for v in args.values() if isinstance(v, str)), "")
            return one_line(f"{block.name}: {detail}" if detail else block.name, 160)
        if isinstance(block, TextBlock) and block.text.strip():
            first = next(line for line in block.text.splitlines() if line.strip())
            return one_line(first, 160)
    return None
