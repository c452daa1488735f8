"""The Claude CLI's ``PreToolUse`` hook (``python -m orchestrator.asks.hook``), given to a Claude role through
``--settings``: it defers ``orchestrator ask`` and every call an ``approve:`` rule names, which ends the run at
once as waiting (the CLI's ``tool_deferred``); in the run resumed after ``orchestrator answer`` it answers the same
call with the person's decision (``allow``: the call runs; ``deny``: the model is told the note).

Standard library only (it runs at every tool call). It reads the rules from ``ORCHESTRATOR_APPROVE`` (a JSON list)
and the answers from the files ``ORCHESTRATOR_ANSWER_FILE`` names (joined by ``os.pathsep``); any other call gets
no word from it, so the role's own permissions decide as usual.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from orchestrator.asks.rules import approval_needed, is_ask

APPROVE_ENV = "ORCHESTRATOR_APPROVE"
ANSWER_ENV = "ORCHESTRATOR_ANSWER_FILE"
BY_INPUT_ENV = "ORCHESTRATOR_ANSWER_BY_INPUT"  # "1" in a fresh session: its calls have new ids


def decision(event: dict[str, Any], env: dict[str, str]) -> dict[str, Any] | None:
    """The hook's answer to one ``PreToolUse`` event, or None (no word: the permissions decide)."""
    tool = str(event.get("tool_name") or "")
    raw = event.get("tool_input")
    given: dict[str, Any] = raw if isinstance(raw, dict) else {}
    try:
        rules = [str(r) for r in json.loads(env.get(APPROVE_ENV) or "[]")]
    except ValueError:
        rules = []
    # a path rule is relative to the agent's folder, where its session began; the session's own cwd follows its
    # `cd`s: a call is held when its path matches from either
    folders = {str(event.get("cwd") or os.getcwd()), env.get("CLAUDE_PROJECT_DIR") or os.getcwd()}
    if not (is_ask(tool, given) or any(approval_needed(rules, tool, given, folder) for folder in folders)):
        return None
    same = (tool, given) if env.get(BY_INPUT_ENV) == "1" else None
    answer = _answer(env.get(ANSWER_ENV), str(event.get("tool_use_id") or ""), same)
    out: dict[str, Any] = {"hookEventName": "PreToolUse", "permissionDecision": "defer"}
    if answer is not None:
        allowed = answer.get("decision") == "allow"
        out["permissionDecision"] = "allow" if allowed else "deny"
        note = answer.get("note") or ("" if allowed else "a person denied this call")
        if note:
            out["permissionDecisionReason"] = str(note)
    return {"hookSpecificOutput": out}


def _answer(paths: str | None, call_id: str, same: tuple[str, dict[str, Any]] | None) -> dict[str, Any] | None:
    """The person's answer to this call, when the run was started with answers (``paths``, joined by ``os.pathsep``):
    the one to the call ``call_id`` (a resumed session goes on from that very call), or, in a fresh session, whose
    calls have new ids, to the same tool with the same input (``same``)."""
    for path in (paths or "").split(os.pathsep):
        if not path:
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                answer = json.load(handle)
        except (OSError, ValueError):
            continue
        if not isinstance(answer, dict):
            continue
        if same is not None:  # a fresh session: that very call (its tool and input) and no other
            if answer.get("tool_name") and (answer.get("tool_name"), answer.get("tool_input")) == same:
                return answer
            continue
        asked = answer.get("tool_use_id")
        if not asked or not call_id or asked == call_id:
            return answer
    return None


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
