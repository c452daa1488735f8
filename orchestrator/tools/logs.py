"""``orchestrator logs <memo>``: the log of the newest run that held a memo, with Claude's stream-json (and Codex's
``exec --json`` events) readable.

A stream-json run's log holds one JSON event a line; a person wants the
conversation: what the model said, the tools it called and what they answered,
what the permissions refused, and the result's figures. Lines that are not
events (the orchestrator's headers, a program's own output) are shown as they are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.agents.backends import codex_events
from orchestrator.core.errors import OrchestratorError, UnknownMemoError
from orchestrator.store import Store

LINE = 200  # a tool's input or answer is cut to this many characters


def log_of(root: Path, memo: str) -> Path:
    """The log of the newest run that held ``memo`` (file name, with or without ``.md``, or front-matter id)."""
    db = root / ".orchestrator" / "state.db"
    row = None
    if db.exists():
        store = Store(db, readonly=True)
        try:
            row = store.last_run_of_memo(memo)
        finally:
            store.close()
    if row is None:
        raise UnknownMemoError(f"no run has held a memo {memo!r} in {root}; see `orchestrator history`")
    if not row.get("log_path"):
        raise OrchestratorError(f"run {row['run_id']} of {memo} has no log (its agent never started)")
    if row.get("log_pruned_at"):
        raise OrchestratorError(
            f"run {row['run_id']} of {memo}: its log was removed by retention (retention.logs) at "
            f"{row['log_pruned_at']}; `orchestrator history --json` keeps the run's record"
        )
    return Path(row["log_path"])


def _cut(text: Any) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= LINE else line[: LINE - 1] + "…"


def _content(content: Any) -> list[str]:
    if isinstance(content, str):
        return [_cut(content)]
    out = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            out.append(_cut(block.get("text", "")))
        elif kind == "tool_use":
            given = block.get("input")
            shown = given.get("command") or given.get("file_path") if isinstance(given, dict) else None
            out.append(f"→ {block.get('name')}: {_cut(shown if isinstance(shown, str) else json.dumps(given))}")
        elif kind == "tool_result":
            mark = "✗" if block.get("is_error") else "←"
            answer = block.get("content")
            if isinstance(answer, list):
                answer = " ".join(str(b.get("text", "")) for b in answer if isinstance(b, dict))
            out.append(f"{mark} {_cut(answer)}")
    return out


def render_event(event: dict[str, Any]) -> list[str]:
    """One stream-json event as lines for a person (none for the events that say nothing to one)."""
    kind, subtype = event.get("type"), event.get("subtype")
    if kind in codex_events.CODEX_EVENTS:
        return codex_events.describe(event)  # Codex's `exec --json` events
    if kind == "system" and subtype == "init":
        return [f"session {event.get('session_id')} ({event.get('model')}, {event.get('permissionMode')})"]
    if kind == "system" and subtype == "permission_denied":
        return [f"refused {event.get('tool_name')}: {_cut(event.get('message', ''))}"]
    if kind == "assistant":
        message = event.get("message") or {}
        lines = _content(message.get("content"))
        if event.get("error"):
            lines.append(f"error: {event['error']}")
        return [f"assistant: {line}" if not line.startswith("→") else line for line in lines]
    if kind == "user":
        return _content((event.get("message") or {}).get("content"))
    if kind == "rate_limit_event":
        info = event.get("rate_limit_info") or {}
        return [f"rate limit: {info.get('status')} ({info.get('rateLimitType')}, resets at {info.get('resetsAt')})"]
    if kind == "result":
        cost = event.get("total_cost_usd")
        usage = event.get("usage") or {}
        denials = event.get("permission_denials") or []
        head = f"result: {subtype}{' (error)' if event.get('is_error') else ''}, {event.get('num_turns')} turn(s)"
        figures = f", ${cost:.4f}" if isinstance(cost, (int, float)) else ""
        tokens = f", {usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens"
        lines = [head + figures + tokens]
        lines += [f"  refused: {d.get('tool_name')}: {_cut(json.dumps(d.get('tool_input')))}" for d in denials]
        if event.get("is_error") and event.get("result"):
            lines.append(f"  {_cut(event['result'])}")
        return lines
    return []


def render(text: str) -> list[str]:
    """A run's log for a person: events rendered, other lines as they are."""
    out: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("{"):
            try:
                event = json.loads(stripped)
            except ValueError:
                event = None
            if isinstance(event, dict) and "type" in event:
                out.extend(render_event(event))
                continue
        out.append(line)
    return out
