"""The Claude CLI's ``PreToolUse`` hook (``python -m orchestrator.asks.hook``), given to a Claude role through
``--settings``: it defers ``orchestrator ask`` and every call an ``approve:`` rule names, which ends the run at
once as waiting (the CLI's ``tool_deferred``); in the run resumed after ``orchestrator answer`` it answers the same
call with the person's decision (``allow``: the call runs; ``deny``: the model is told the note).

Standard library only (it runs at every tool call). It reads the rules from ``ORCHESTRATOR_APPROVE`` (a JSON list)
and the answer from the file ``ORCHESTRATOR_ANSWER_FILE`` names; any other call gets no word from it, so the
role's own permissions decide as usual.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from orchestrator.asks.rules import approval_needed, is_ask

APPROVE_ENV = "ORCHESTRATOR_APPROVE"
ANSWER_ENV = "ORCHESTRATOR_ANSWER_FILE"


def decision(event: dict[str, Any], env: dict[str, str]) -> dict[str, Any] | None:
    """The hook's answer to one ``PreToolUse`` event, or None (no word: the permissions decide)."""
    tool = str(event.get("tool_name") or "")
    raw = event.get("tool_input")
    given: dict[str, Any] = raw if isinstance(raw, dict) else {}
    try:
        rules = [str(r) for r in json.loads(env.get(APPROVE_ENV) or "[]")]
    except ValueError:
        rules = []
    cwd = str(event.get("cwd") or os.getcwd())
    if not (is_ask(tool, given) or approval_needed(rules, tool, given, cwd)):
        return None
    answer = _answer(env.get(ANSWER_ENV), str(event.get("tool_use_id") or ""))
    out: dict[str, Any] = {"hookEventName": "PreToolUse", "permissionDecision": "defer"}
    if answer is not None:
        allowed = answer.get("decision") == "allow"
        out["permissionDecision"] = "allow" if allowed else "deny"
        note = answer.get("note") or ("" if allowed else "a person denied this call")
        if note:
            out["permissionDecisionReason"] = str(note)
    return {"hookSpecificOutput": out}


def _answer(path: str | None, call_id: str) -> dict[str, Any] | None:
    """The person's answer to the call ``call_id``, when the run was resumed with one."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            answer = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(answer, dict):
        return None
    asked = answer.get("tool_use_id")
    return answer if not asked or not call_id or asked == call_id else None


def main() -> int:
    try:
        event = json.load(sys.stdin)
    except ValueError:
        return 0
    out = decision(event if isinstance(event, dict) else {}, dict(os.environ))
    if out is not None:
        sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
