"""What a run spent (cost, whether it is estimated, tokens, turns), summed over its attempts and sessions. Pure: the lifecycle applies it.

A session's figures are running totals, and a resumed session carries on from the one it resumed, so a run
keeps the latest figures of each session and drops those of a session that was resumed.
"""

from __future__ import annotations

from typing import Any

from orchestrator.store.runs import SESSION_FIGURES

TOKENS = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens", "output_tokens", "reasoning_output_tokens")
SUMMED = ("cost_usd", *TOKENS, "num_turns")


def merged(
    sessions: dict[str, dict[str, Any]], resumed_from: str | None, result: dict[str, Any], attempt: int
) -> tuple[str, dict[str, dict[str, Any]], dict[str, Any]]:
    """The run's sessions with this attempt's ``result`` in: (its session key, the sessions, the run's totals)."""
    sessions = dict(sessions)
    key = result.get("session_id") or f"attempt-{attempt}"
    resumed = sessions.pop(resumed_from, None) if resumed_from else None
    figures = dict(result)
    if resumed and resumed.get("num_turns") is not None:  # cost and tokens carry on in a resumed session, turns not
        figures["num_turns"] = (figures.get("num_turns") or 0) + resumed["num_turns"]
    sessions[key] = figures
    totals: dict[str, Any] = {}
    for name in SUMMED:
        values = [item[name] for item in sessions.values() if item.get(name) is not None]
        if values:
            totals[name] = sum(values)
    if any(item.get("cost_estimated") for item in sessions.values()):  # estimated from `prices` (Codex's)
        totals["cost_estimated"] = 1
    return key, sessions, totals


def less(result: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """``result``'s running totals without what earlier runs of its session recorded (``before``): a session
    resumed by a later run (an answered question) reports them again. Never below zero."""
    if not before:
        return result
    out = dict(result)
    for name, spent in before.items():
        if out.get(name) is not None:
            out[name] = max(0, out[name] - spent)
    return out


def recorded(row: dict[str, Any], retry_resumes: bool) -> tuple[str | None, str | None, dict[str, dict[str, Any]]]:
    """What a run's earlier attempts spent, from its record: (its session, the session it resumes, its sessions).

    The figures are stored when an attempt ends, so the row holds exactly the earlier attempts' totals. A
    retry that resumed the last session carries its totals on, so that entry is the one it replaces.
    """
    session = row.get("session_id")
    resumed_from = session if row["attempt"] > 1 and retry_resumes else None
    figures = {k: row.get(k) for k in SUMMED}
    sessions = {session or "before-restart": figures} if any(v is not None for v in figures.values()) else {}
    own = row.get("session_figures")
    if session and isinstance(own, dict) and own:  # the last session's own part apart: a resumed one replaces it
        rest = {k: v - (own.get(k) or 0) if k in own else v for k, v in figures.items() if v is not None}
        sessions = {session: dict(own), **({"before-restart": rest} if any(rest.values()) else {})}
    if row.get("cost_estimated"):  # estimated from `prices` (Codex's): every part of it
        for part in sessions.values():
            part["cost_estimated"] = True
    return session, resumed_from, sessions


def session_part(figures: dict[str, Any]) -> dict[str, Any]:
    """Of one session's figures, its running totals (cost and tokens): what the store keeps of a run's last session,
    so a later run that resumes it subtracts exactly this run's part (``Store.session_spent``)."""
    return {name: figures[name] for name in SESSION_FIGURES if figures.get(name) is not None}
