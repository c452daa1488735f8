"""Claude Code's stream-json output, read once at the end of a run: its figures and what its result says.

A tool call the permissions refuse still ends ``subtype: success`` with exit 0, the refusal only in
``permission_denials``: the exit status alone cannot say whether the run did its work, so ``judge`` decides.
Imports nothing of the orchestrator but ``core`` and ``claude_errors``: the sdk runner (``sdk.reasons``,
``sdk.totals``) uses it too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from orchestrator.agents.claude_errors import Problem, classify, hit_limit, one_line, result_limit
from orchestrator.core.agent import Judgement as Judgement  # the core's end reading, named here for its readers
from orchestrator.core.agent import UsageLimit

NO_MODEL_CALL = "the agent started but made no model call"
DENIALS_SHOWN = 5


@dataclass
class Stream:
    """What one attempt's stream said: its events in order, its last result, how many model calls it made."""

    events: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    model_calls: int = 0
    session_id: str | None = None
    assistant_error: str | None = None
    rate_limit: dict[str, Any] | None = None  # a rejected rate_limit_event's ``rate_limit_info``
    background_live: int = 0  # background agents and workflows still in flight when the last turn ended


def read_stream(text: str) -> Stream:
    """The events of a stream-json output (lines that are not JSON objects are skipped: the orchestrator's own
    header, stray prints)."""
    stream = Stream()
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        stream.events.append(event)
        kind = event.get("type")
        stream.session_id = event.get("session_id") or stream.session_id
        if kind == "assistant":
            stream.model_calls += 1
            if event.get("error"):
                stream.assistant_error = str(event["error"])
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
    return stream


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


def judge(stream: Stream, code: int, on_denied: str) -> Judgement:
    """The attempt's judgement from its stream and exit ``code`` (``on_denied``: ``fail`` or ``warn``)."""
    limit = usage_limit(stream)
    result = stream.result
    if result is not None and result.get("is_error"):
        problem = error_problem(result, stream.assistant_error)
        return Judgement(True, problem.reason, problem.permanent, usage_limit=limit)
    if limit is not None:
        return Judgement(True, limit.detail, usage_limit=limit)
    if code != 0:
        return Judgement()  # not the stream's to explain: the exit status and the log's last line say it
    if stream.model_calls == 0:
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
