"""``orchestrator status`` for people: the orchestrator, its current runs, queues, pauses, holds and recent runs.

Drawn by ``tables`` as rich would draw it (the same text): status is a client command and starts without rich.
"""

from __future__ import annotations

import os
import shlex
import sys

from orchestrator import tables
from orchestrator.console import is_tty, money, say
from orchestrator.console.live import pause_lines

TYPE_CHECKING = False  # typing's flag without importing typing: see tests/test_client_imports.py
if TYPE_CHECKING:
    from typing import Any, TextIO


def print_status(snap: dict[str, Any], stream: TextIO | None = None) -> None:
    """``orchestrator status`` for people, on standard output (or ``stream``)."""
    out = stream or sys.stdout
    for line in tables.render(status_view(snap), tables.width_of(out, is_tty(out))):
        say(line, out)


def _run_json(run: Any) -> dict[str, Any]:
    """A run of a snapshot as its JSON (``RunView.to_json``), whether it came as JSON or as a view."""
    return run if isinstance(run, dict) else run.to_json()


def _label(run: dict[str, Any]) -> str:
    """How people name a run's memo: its front-matter id, else its file name (``RunView.label``)."""
    return str(run.get("memo_id") or run.get("memo") or "")


def status_view(snap: dict[str, Any]) -> list[str | tables.Table]:
    """The parts of ``print_status``, in order (lines and tables)."""
    parts: list[str | tables.Table] = []
    if snap["running"]:
        parts.append(
            f"orchestrator running for {snap['root']} (pid {snap['pid']})"
            + (f", ENDING ({snap['ending']})" if snap.get("ending") else "")
        )
        if snap.get("recovery"):
            parts.append(snap["recovery"]["summary"])
    else:
        parts.append(
            f"no orchestrator running for {snap['root']}"
            + (" (runs below are as last recorded)" if snap["runs"] else "")
        )
    if snap.get("runs"):
        table = tables.Table(title="current runs")
        for col in ("run", "role", "memo", "state", "attempt", "pid", "elapsed / next", "cost $", "subject / activity"):
            table.add_column(col)
        nodes = snap.get("nodes") or {}  # executor: ray, where each agent runs
        where = snap.get("run_workspaces") or {}  # the workspaces feature: each live run's branch
        for run in map(_run_json, snap["runs"]):
            elapsed = run.get("elapsed")
            when = f"{elapsed:.0f}s" if elapsed is not None else (run.get("next_attempt_at") or "")
            about = run.get("subject") or ""
            if run.get("activity"):
                about = f"{about} | {run['activity']}"
            run_id = str(run["run_id"])
            branch = (where.get(run_id) or {}).get("branch") or run.get("branch")
            if branch:
                about = f"[{branch}] {about}"
            table.add_row(
                run_id,
                run["role"],
                _label(run),
                run["state"],
                str(run.get("attempt") or ""),
                str(run.get("pid") or "") + (f" on {nodes[run_id]}" if run_id in nodes else ""),
                when,
                money(run.get("cost_usd"), bool(run.get("cost_estimated"))),
                about,
            )
        parts.append(table)
    queued = snap.get("queued") or {}
    if queued:
        parts.append("queued: " + ", ".join(f"{role} {n}" for role, n in queued.items()))
    if snap.get("crash_counts"):
        parts.append(
            "critical roles, crashes in a row: " + ", ".join(f"{r} {n}" for r, n in snap["crash_counts"].items())
        )
    for role, why in (snap.get("budget_blocks") or {}).items():
        parts.append(f"paused by budget: {role}: {why}")
    parts += pause_lines(snap)
    for role, held in (snap.get("holds") or {}).items():
        parts.append(f"held: {role}: " + "; ".join(held.values()))
    for wait in snap.get("memo_waits") or ():  # a memo for a busy workspace: the role's later memos may pass it
        parts.append(f"in the inbox: {wait['role']}/{wait['memo']} {wait['reason']}")
    for landing in snap.get("landings") or ():  # the workspaces' landing queue, oldest first
        waits = f", waits for run {landing['waits_for_run']}" if landing.get("waits_for_run") else ""
        waits = ", waits for a run waiting for a person" if landing.get("waits_for_person") else waits
        into = landing.get("into") or "its base"
        parts.append(f"landing: {landing['workspace']} into {into}: {landing['state']}{waits}")
    for role, wake in (snap.get("wakes") or {}).items():
        skips = ", ".join(f"{k} {v}" for k, v in sorted((wake.get("skips") or {}).items()))
        parts.append(
            f"wakes: {role}: next tick {wake.get('next_tick') or '-'}; last: {wake.get('last') or '-'} "
            f"{wake.get('last_reason') or ''}".rstrip()
            + (f"; skips: {skips}" if skips else "")
        )
    for role, why in (snap.get("journal_problems") or {}).items():
        parts.append(f"journal: {role}: {why}")
    if snap.get("held"):
        held = ", ".join(f"{role} {n}" for role, n in snap["held"].items())
        parts.append(f"held by the loop breaker: {held} (memo/<role>/held/; `orchestrator release` runs them)")
    if snap.get("waiting"):
        waiting = ", ".join(f"{role} {n}" for role, n in snap["waiting"].items())
        parts.append(f"waiting for a person: {waiting} (memo/<role>/waiting/; `orchestrator answer` once `up` runs)")
    asks = snap.get("needs_input") or []
    names = [ask.get("memo") for ask in asks]
    for ask in asks:
        how = "--allow or --deny" if ask.get("kind") == "approval" else "TEXT"
        memo = str(ask.get("memo"))
        if names.count(memo) > 1:  # the same name waits in two roles: its path says which
            memo = os.path.join(str(snap.get("root") or "."), "memo", str(ask.get("role")), "waiting", memo)
        parts.append(
            f"needs input: {ask.get('role')}/{ask.get('memo')} since {ask.get('asked_at')}: {ask.get('question')} "
            f"(`orchestrator answer {shlex.quote(memo)} {how}`)"
        )
    parts += memory_lines(snap.get("memory"))
    if snap.get("workspaces"):
        disk = snap["workspaces"]
        parts.append(f"workspaces: {disk['count']} ({disk['bytes'] / 1e6:.1f} MB, measured {disk['measured_at'][:19]})")
    if snap.get("recent"):
        table = tables.Table(title="recent")
        for col in ("run", "role", "memo", "state", "exit", "ended", "cost $", "tokens in/out", "reason"):
            table.add_column(col)
        for run in map(_run_json, snap["recent"]):
            tokens = ""
            tokens_in, tokens_out = run.get("input_tokens"), run.get("output_tokens")
            if tokens_in is not None or tokens_out is not None:
                tokens = f"{tokens_in or 0}/{tokens_out or 0}"
            pruned = run.get("log_pruned_at")
            table.add_row(
                str(run["run_id"]),
                run["role"],
                _label(run),
                run["state"],
                "" if run.get("exit_code") is None else str(run["exit_code"]),
                (run.get("ended_at") or "")[:19],
                money(run.get("cost_usd"), bool(run.get("cost_estimated"))),
                tokens,
                (f"[{run['branch']}] " if run.get("branch") else "")
                + (run.get("reason") or "")
                + (f" (log pruned {pruned[:10]})" if pruned else ""),
            )
        parts.append(table)
    return parts


def memory_lines(memory: dict[str, Any] | None) -> list[str]:
    """Status's lines of the memory part of a snapshot (``memory.status``'s JSON), none when nothing waits.

    Drawn here from the JSON, as wakes and pauses are, so the printer needs no feature below it.
    """
    if not memory:
        return []
    if "unavailable" in memory:
        return [f"memory: unavailable: {memory['unavailable']}"]
    out = []
    for key, count in (memory.get("waiting_for_summary") or {}).items():
        layer, period = key.split(" ", 1)
        summary = "weekly" if layer == "daily" else "monthly"  # the layer whose summary a waiting entry needs
        out.append(f"memory: {count} {layer} entries past retention wait for a {summary} summary of {period}")
    return out
