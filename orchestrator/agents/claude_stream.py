"""Claude Code's stream-json output, read once at the end of a run: its figures, what its result says, and what
the agent last did and said.

A tool call the permissions refuse still ends ``subtype: success`` with exit 0, the refusal only in
``permission_denials``: the exit status alone cannot say whether the run did its work, so ``judge`` decides.
The end is read from the output's tail (``read_end``), where the result and the events before it are, never the
whole of a stream that may be tens of megabytes. Imports nothing of the orchestrator but ``core`` and
``claude_errors``: the sdk runner (``sdk.reasons``, ``sdk.totals``) uses it too.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestrator.agents.claude_errors import Problem, classify, hit_limit, one_line, result_limit
from orchestrator.core.agent import DeferredCall, LastWords, UsageLimit
from orchestrator.core.agent import Judgement as Judgement  # the core's end reading, named here for its readers

NO_MODEL_CALL = "the agent started but made no model call"
DENIALS_SHOWN = 5
FIRST_BYTES = 64 * 1024  # the end of a stream read first: most often its result and the events just before it
TAIL_BYTES = 1024 * 1024  # read back at most this far for the agent's last tool use and text
TAIL_MAX_BYTES = 16 * 1024 * 1024  # read back at most this far for a result (a stream killed mid-way has none)
HEAD_BYTES = 256 * 1024  # the start of a stream whose tail did not reach it, read for its init event
WORDS_MAX = 200  # a last tool use or line of text, cut to this many characters
_RESULT_MARK = re.compile(rb'"type"\s*:\s*"result"')
# events nothing here reads, told by their first characters: tool results (most of a stream's bytes) and partial
# messages are not parsed at all
_UNREAD = re.compile(r'"type"\s*:\s*"(?:user|stream_event)"')


@dataclass
class Stream:
    """What one attempt's stream said: its start, its last result, how many model calls it made, what the agent
    last did and said. ``truncated``: only its tail was read, so the calls are those of the tail."""

    init: dict[str, Any] | None = None  # its ``system`` ``init`` event: session, model, tools
    result: dict[str, Any] | None = None
    model_calls: int = 0
    truncated: bool = False
    replies: list[dict[str, Any]] = field(default_factory=list)  # its assistant messages, for what it last said
    session_id: str | None = None
    assistant_error: str | None = None
    rate_limit: dict[str, Any] | None = None  # a rejected rate_limit_event's ``rate_limit_info``
    background_live: int = 0  # background agents and workflows still in flight when the last turn ended


def _event(line: str) -> dict[str, Any] | None:
    """One line's JSON object; None for a line that is none (the orchestrator's own header, stray prints) or one
    nothing here reads."""
    line = line.strip()
    if not line.startswith("{") or _UNREAD.search(line, 0, 40):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def read_stream(text: str) -> Stream:
    """What a stream-json output says (the CLI's events, or an sdk transcript's lines, whose messages carry their
    ``content`` at the top)."""
    stream = Stream()
    for line in text.splitlines():
        event = _event(line)
        if event is not None:
            _take(stream, event)
    return stream


def _read_back(text: str) -> Stream:
    """What the end of a stream-json output says, its lines parsed from the last back only until they hold a
    result, a tool use and a line of text (all of them when they never do), then read in order."""
    events: list[dict[str, Any]] = []
    need = {"result", "tool_use", "text"}
    lines = text.splitlines()
    for line in reversed(lines):
        event = _event(line)
        if event is None:
            continue
        events.append(event)
        if event.get("type") == "result":
            need.discard("result")
        elif event.get("type") == "assistant":
            need -= {b.get("type") for b in _content(event) if isinstance(b, dict)}
        if not need:
            break
    stream = Stream(truncated=not need)  # stopped early: what came before is not read
    for event in reversed(events):
        _take(stream, event)
    return stream


def _take(stream: Stream, event: dict[str, Any]) -> None:
    """One event's part in what the stream says."""
    kind = event.get("type")
    stream.session_id = event.get("session_id") or stream.session_id
    if kind == "assistant":
        stream.model_calls += 1
        if event.get("error"):
            stream.assistant_error = str(event["error"])
        stream.replies.append(event)
    elif kind == "system" and event.get("subtype") == "init" and stream.init is None:
        stream.init = event
    elif kind == "result":
        stream.result = event
    elif kind == "system" and event.get("subtype") == "turn_duration":
        # Claude Code 2.1 counts what it will kill with the turn: -p ends them, their work lost
        counts = (event.get(k) for k in ("pending_background_agent_count", "pending_workflow_count"))
        stream.background_live = sum(n for n in counts if isinstance(n, int) and n > 0)
    elif kind == "rate_limit_event":
        info = event.get("rate_limit_info")
        if isinstance(info, dict) and info.get("status") == "rejected":
            stream.rate_limit = info


def _content(event: dict[str, Any]) -> list[Any]:
    """An assistant message's blocks: the CLI's under ``message``, an sdk transcript's at the top."""
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else event.get("content")
    return content if isinstance(content, list) else []


def _said(replies: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """The newest tool use (``Tool: argument``) and the newest line of text in assistant messages ``replies``."""
    tool: str | None = None
    text: str | None = None
    for event in reversed(replies):
        for block in reversed(_content(event)):
            if not isinstance(block, dict):
                continue
            if tool is None and block.get("type") == "tool_use":
                given = block.get("input")
                detail = next((v for v in given.values() if isinstance(v, str)), "") if isinstance(given, dict) else ""
                name = str(block.get("name"))
                tool = f"{name}: {detail}"[:WORDS_MAX] if detail else name
            elif text is None and block.get("type") == "text":
                lines = [line for line in str(block.get("text") or "").splitlines() if line.strip()]
                text = lines[-1][:WORDS_MAX] if lines else None
        if tool is not None and text is not None:
            break
    return tool, text


def read_end(path: Path, offset: int = 0) -> Stream:
    """The end of the stream-json output in ``path`` from byte ``offset``: its tail, and its init event from its
    start. The tail grows from ``FIRST_BYTES`` until it holds a result (at most ``TAIL_MAX_BYTES``) and, up to
    ``TAIL_BYTES``, the agent's last tool use and text; its events are parsed back only as far as ``_read_back``
    needs. Blocking file reads: the loop calls it in a worker thread. ``OSError`` passes through."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        span = FIRST_BYTES
        while True:
            start = max(offset, size - span)
            handle.seek(start)
            data = handle.read(size - start)
            if start > offset:
                data = data[data.find(b"\n") + 1 :]  # the window began inside a line: that line is not whole
            last = start == offset or span >= TAIL_MAX_BYTES
            if not last and _RESULT_MARK.search(data) is None:
                span *= 4  # its result is further back, if it has one
                continue
            stream = _read_back(data.decode("utf-8", "replace"))
            if last or stream.truncated or span >= TAIL_BYTES:
                break
            span *= 4  # its last tool use or text is further back
        stream.truncated = stream.truncated or start > offset
        if stream.init is None and stream.truncated:
            handle.seek(offset)
            head = handle.read(min(HEAD_BYTES, size - offset)).decode("utf-8", "replace")
            stream.init = next((e for e in map(_event, head.splitlines()) if _is_init(e)), None)
    return stream


def _is_init(event: dict[str, Any] | None) -> bool:
    return event is not None and event.get("type") == "system" and event.get("subtype") == "init"


def last_words(stream: Stream) -> LastWords:
    """What the agent last did and said, and its last result's text."""
    said = (stream.result or {}).get("result")
    return LastWords(*_said(stream.replies), said if isinstance(said, str) else None)


def figures(stream: Stream) -> dict[str, Any]:
    """Cost, tokens, turns and session as the sdk backend reports them (empty without a result)."""
    result = stream.result
    if result is None:
        return {"session_id": stream.session_id} if stream.session_id else {}
    given = result.get("usage")
    inputs, outputs = tokens(given if isinstance(given, dict) else {}, result.get("modelUsage"))
    cost = result.get("total_cost_usd")
    return {
        "cost_usd": float(cost) if cost is not None else None,
        "input_tokens": inputs,
        "output_tokens": outputs,
        "num_turns": result.get("num_turns"),
        "session_id": result.get("session_id") or stream.session_id,
        "is_error": bool(result.get("is_error")),
        "subtype": result.get("subtype"),
    }


def tokens(usage: dict[str, Any], model_usage: Any = None) -> tuple[int, int]:
    """Input tokens (cache reads and writes counted) and output tokens: from a result's ``modelUsage`` (every
    model call, subagents included) when it has one, else from its ``usage``."""
    models = [m for m in (model_usage or {}).values() if isinstance(m, dict)]
    if not models:
        keys = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        return sum(int(usage.get(k) or 0) for k in keys), int(usage.get("output_tokens") or 0)
    keys = ("inputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
    return sum(int(m.get(k) or 0) for m in models for k in keys), sum(int(m.get("outputTokens") or 0) for m in models)


def usage_limit(stream: Stream) -> UsageLimit | None:
    """A usage or rate limit the stream reports: a rejected ``rate_limit_event``, or an error result or
    assistant message of a 429 / ``rate_limit_error``."""
    if stream.rate_limit is not None:
        kind, resets = hit_limit(stream.rate_limit.get("rateLimitType"), stream.rate_limit.get("resetsAt"))
        return UsageLimit(kind, resets, f"usage limit reached ({kind})")
    result = stream.result or {}
    limited = result_limit(result, stream.assistant_error)
    if limited is not None:
        return UsageLimit(*limited, one_line(str(result.get("result") or "rate limited (429)"), 200))
    return None


def error_problem(result: dict[str, Any], error_kind: str | None) -> Problem:
    """Why a result with ``is_error`` failed (``error_kind``: its assistant message's ``error``): a known problem,
    else Claude Code's own words, its ``errors`` or else its ``result``."""
    errors = [e for e in result.get("errors") or [] if isinstance(e, str) and e.strip()]
    said = str(result.get("result") or "").strip()
    text = "; ".join(errors) or said
    status = result.get("api_error_status")
    code = status if isinstance(status, int) else None
    # a problem named only in the ``result`` (such as "Not logged in") is known even when ``errors`` says more
    known = classify(text, error_kind, code) or (classify(said, error_kind, code) if said != text else None)
    shown = one_line(text or "no details", 200)
    return known or Problem(f"Claude Code reported an error ({result.get('subtype') or 'no subtype'}): {shown}")


def denied_text(denials: list[Any]) -> str:
    """The refused tool calls of a result, in one line: how many, then each tool and its input cut to a line."""
    lines = []
    for denial in denials[:DENIALS_SHOWN]:
        if not isinstance(denial, dict):
            continue
        given = denial.get("tool_input")
        shown = given.get("command") or given.get("file_path") if isinstance(given, dict) else None
        text = shown if isinstance(shown, str) else json.dumps(given, ensure_ascii=False)
        lines.append(one_line(f"{denial.get('tool_name') or '?'}: {text}", 160))
    if len(denials) > DENIALS_SHOWN:
        lines.append(f"and {len(denials) - DENIALS_SHOWN} more")
    count = len(denials)
    return f"{count} tool call{'s' if count != 1 else ''} refused by the permissions: " + "; ".join(lines)


DENIED_FIX = "allow the tool for the role (allowed_tools, permission_mode) or set on_denied: warn"


def deferred_call(result: dict[str, Any] | None) -> DeferredCall | None:
    """The tool call a result ended on when a ``PreToolUse`` hook deferred it (``stop_reason: tool_deferred``)."""
    if result is None or result.get("stop_reason") != "tool_deferred":
        return None
    call = result.get("deferred_tool_use")
    if not isinstance(call, dict):
        return None
    given = call.get("input")
    return DeferredCall(
        str(call.get("id") or ""), str(call.get("name") or ""), given if isinstance(given, dict) else {}
    )


def judge(stream: Stream, code: int, on_denied: str) -> Judgement:
    """The attempt's judgement from its stream and exit ``code`` (``on_denied``: ``fail`` or ``warn``), with what
    the agent last did and said."""
    return replace(_judge(stream, code, on_denied), last_words=last_words(stream))


def _judge(stream: Stream, code: int, on_denied: str) -> Judgement:
    limit = usage_limit(stream)
    result = stream.result
    if result is not None and result.get("is_error"):
        problem = error_problem(result, stream.assistant_error)
        return Judgement(True, problem.reason, problem.permanent, usage_limit=limit)
    if limit is not None:
        return Judgement(True, limit.detail, usage_limit=limit)
    if code != 0:
        return Judgement()  # not the stream's to explain: the exit status and the log's last line say it
    deferred = deferred_call(result)
    if deferred is not None:  # a permission hook deferred a tool call to a person: the run waits, whole
        return Judgement(deferred=deferred)
    if stream.model_calls == 0 and not stream.truncated:  # a stream longer than its tail did more than start
        return Judgement(True, NO_MODEL_CALL)
    warnings = []
    if stream.background_live:
        warnings.append(
            f"{stream.background_live} background task(s) were still running when the run ended and were stopped "
            "with it; their work may be lost (background_tasks: false, the default, turns them off)"
        )
    denials = result.get("permission_denials") if result is not None else None
    if isinstance(denials, list) and denials:
        what = denied_text(denials)
        if on_denied != "warn":
            return Judgement(True, f"{what}; {DENIED_FIX}", permanent=True)
        warnings.append(what)
    return Judgement(warnings=tuple(warnings))
