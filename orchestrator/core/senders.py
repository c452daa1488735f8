"""Who a memo is from, as the loop breaker compares senders: one spelling per sender, and the two it never holds."""

from __future__ import annotations

NEVER_HELD = frozenset({"owner", "orchestrator"})  # a person's memos and the orchestrator's own notices
AGENT_SENDER = "agent"  # what an agent of no run on record sends as (never as a person)


def normal_sender(sender: str | None) -> str | None:
    """``Project Manager``, ``project_manager`` and ``project-manager`` are one sender."""
    if not sender:
        return None
    return "-".join(sender.strip().lower().replace("_", " ").split()) or None
