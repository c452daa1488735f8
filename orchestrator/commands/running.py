"""The client commands that ask the running orchestrator: ``status``, ``cancel``, ``stop``, ``interrupt``,
``tell``, ``wake`` and ``land``.

Each sends one request through ``control.client`` and prints its answer through ``console``; this module and
everything it imports is standard library (``tests/test_client_imports.py`` holds it to that), so a command
costs Python's start-up and a round trip, not the orchestrator's imports.
"""

from __future__ import annotations

import argparse
import sys
import time

from orchestrator import console
from orchestrator.commands.common import memo_arg, project_root, root_dir, show, stdin_text, who
from orchestrator.control import client as control
from orchestrator.control.status import collect as collect_status
from orchestrator.control.status_view import print_status
from orchestrator.core.durations import parse_duration
from orchestrator.core.errors import DeadlineError, NotRunningError, OrchestratorError, UsageError

TYPE_CHECKING = False  # typing's flag without importing typing: see tests/test_client_imports.py
if TYPE_CHECKING:
    from typing import Any


def cmd_status(args: argparse.Namespace) -> int:
    """``orchestrator status``: what runs, what waits, what ended."""
    snap = collect_status(root_dir(args))
    if not snap["running"]:  # what the memory database says, read only when no orchestrator answered
        from orchestrator.memory import status as memory_status

        snap["memory"] = memory_status.offline(project_root(args))
    return show(args.json, snap, print_status)


def cmd_cancel(args: argparse.Namespace) -> int:
    """``orchestrator cancel``: stop a memo's work, or a role's, at any stage."""
    if not args.memo and not args.role:
        raise UsageError("orchestrator cancel: name a memo (id, file name or path) or use --role ROLE")
    if args.memo and args.role:
        raise UsageError("orchestrator cancel: name a memo or use --role ROLE, not both")
    memo = memo_arg(args.memo) if args.memo else args.memo
    result = control.call(
        root_dir(args),
        "cancel",
        timeout=control.LONG_WAIT,
        memo=memo,
        role=args.role,
        reason=args.reason,
        all=args.all,
        who=who(),
    )
    if args.json:
        console.print_json(result)
        return 0
    items = result.get("cancelled", [result]) if "cancelled" in result else [result]
    if not items:
        console.say(result.get("message", "nothing to cancel"))
    for item in items:
        console.say(_describe_cancel(item))
    return 0


def cmd_land(args: argparse.Namespace) -> int:
    """``orchestrator land``: land a workspace's branch through the queue; exit 1 when it did not land."""
    if args.wait <= 0:
        raise UsageError("orchestrator land: --wait takes a duration above 0 (900, 15m, ...)")
    root = root_dir(args)
    try:
        result = control.call(
            root, "land", timeout=args.wait + 10, target=args.target, into=args.into, within=args.wait, who=who()
        )
    except UsageError as exc:
        if "unknown request 'land'" not in str(exc):
            raise
        raise UsageError(
            f"orchestrator land: no role of the team at {root} works in a workspace (`workspace: {{mode: worktree}}`); "
            "there is nothing to land"
        ) from None
    if args.json:
        console.print_json(result)
    elif result.get("landed"):
        console.say(str(result.get("reason")))
    else:
        memo = f"; a memo about it went to {result['to']}" if result.get("to") else ""
        console.fail(f"{result.get('reason')}{memo}")
        if result.get("tail"):
            console.say(str(result["tail"]), stream=sys.stderr)
    return 0 if result.get("landed") else 1


def _describe_cancel(item: dict[str, Any]) -> str:
    if item.get("state") != "cancelled":  # a bug ended it otherwise meanwhile: say how, not that it was cancelled
        return f"{item.get('memo')} ({item.get('role')}) ended as {item.get('state')}: {item.get('reason') or '?'}"
    if item.get("note"):
        return f"{item['memo']}: {item['note']}; it is cancelled now"
    memos = item.get("memos") or [item.get("memo")]
    held = f"; the batch run held {', '.join(memos)}" if len(memos) > 1 else ""
    if item.get("previous_state") in ("running", "timing_out"):
        how = f"{len(item.get('pids', []))} process(es) ended {item.get('pids')} in {item.get('seconds', 0):.2f}s" + (
            " (needed SIGKILL)" if item.get("escalated") else ""
        )
    else:
        how = {
            "queued": "it never ran",
            "waiting": "its question is withdrawn (a worktree role's work is set aside: the log names its ref)",
        }.get(item.get("previous_state") or "", "its retry will not happen")
    survivors = f"; WARNING: still alive after SIGKILL: {item['survivors']}" if item.get("survivors") else ""
    return (
        f"cancelled {item.get('memo_id') or item['memo']} ({item['role']}, was {item['previous_state']}): {how}{held}; "
        f"moved to memo/{item['role']}/cancelled/{survivors}"
    )


def cmd_stop(args: argparse.Namespace) -> int:
    """``orchestrator stop``: end the orchestrator; ``--force`` kills the agents and returns their memos."""
    root = root_dir(args)
    limit = _stop_timeout(args.timeout) if args.timeout is not None else None
    before = control.call(root, "status")
    control.call(root, "stop", force=args.force, who=who())
    running = before.get("limits", {}).get("running", 0)
    if args.force:
        console.say(f"orchestrator (pid {before.get('pid')}) is killing {running} agent(s) and returning their memos")
    else:
        console.say(
            f"orchestrator (pid {before.get('pid')}) is ending: {running} running agent(s) finish, nothing new starts"
        )
    if args.wait or args.force or limit is not None:
        _wait_for_exit(root, before, limit if limit is not None else default_stop_timeout(before), args.force)
    return 0


STOP_MARGIN = 30.0  # past the longest timeout + grace, for the last run's ending to be recorded
STILL_NAMED = 10  # runs named in the line of a stop that outlasted its wait; the rest are counted


def default_stop_timeout(status: dict[str, Any]) -> float:
    """How long ``stop --wait`` waits by default: the running orchestrator's longest role timeout + grace, plus
    ``STOP_MARGIN``."""
    longest = status.get("longest_stop")
    return (float(longest) if isinstance(longest, (int, float)) else 0.0) + STOP_MARGIN


def _stop_timeout(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UsageError(f"orchestrator stop: --timeout: {exc}") from None


def _wait_for_exit(root: str, last: dict[str, Any], timeout: float, force: bool) -> None:
    """Return once the orchestrator of ``root`` no longer answers; after ``timeout`` raise ``DeadlineError``
    (exit 11) naming what still runs."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            last = control.call(root, "status", timeout=max(0.1, min(5.0, left)))
        except NotRunningError:
            return
        except OrchestratorError:
            pass  # busy ending: it is asked again until the deadline
        if time.monotonic() >= deadline:
            raise DeadlineError(still_running(last, timeout, force))
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))


def still_running(status: dict[str, Any], waited: float, force: bool = False) -> str:
    """The one line of a stop whose wait ran out: which runs (and memos) the orchestrator still has."""
    runs = status.get("runs") or []
    named = []
    for run in runs[:STILL_NAMED]:
        memos = run.get("memos") or []
        label = run.get("memo_id") or run.get("memo") or "?"
        more = f" +{len(memos) - 1} memo(s)" if len(memos) > 1 else ""
        named.append(f"run {run.get('run_id')} ({run.get('role')}, {label}{more}, {run.get('state')})")
    if len(runs) > STILL_NAMED:
        named.append(f"and {len(runs) - STILL_NAMED} more")
    what = ", ".join(named) if named else "no run left, still closing"
    then = (
        "it goes on killing them (see .orchestrator/orchestrator.log)"
        if force
        else "it goes on ending (`orchestrator stop --force` stops its agents now)"
    )
    return f"orchestrator (pid {status.get('pid')}) still runs after {waited:g}s: {what}; {then}"


def cmd_interrupt(args: argparse.Namespace) -> int:
    """``orchestrator interrupt``: end an SDK agent's current turn."""
    result = control.call(
        root_dir(args),
        "interrupt",
        timeout=control.LONG_WAIT,
        memo=memo_arg(args.memo),
        keep=args.keep,
        reason=args.reason,
        who=who(),
    )
    if args.json:
        console.print_json(result)
    else:
        console.say(
            f"interrupted {args.memo} (run {result.get('run_id')}, role {result.get('role')}): now {result.get('state')}"
        )
    return 0


def cmd_tell(args: argparse.Namespace) -> int:
    """``orchestrator tell``: send a follow-up message into an agent's session (an SDK agent's, or a Codex run's
    next turn)."""
    text = args.text if args.text is not None else stdin_text("tell")
    if not text.strip():  # here, not in the orchestrator: the control channel would turn it into a plain refusal
        raise UsageError("orchestrator tell: nothing to tell: give the text as an argument or on standard input")
    result = control.call(root_dir(args), "tell", memo=memo_arg(args.memo), text=text, who=who())
    if args.json:
        console.print_json(result)
    else:
        then = f": {result['delivery']}" if result.get("delivery") else ""
        console.say(f"told {args.memo} (run {result.get('run_id')}, role {result.get('role')}){then}")
    return 0


def cmd_wake(args: argparse.Namespace) -> int:
    """``orchestrator wake``: write a wake of a role now, by the same picking rules."""
    result = control.call(root_dir(args), "wake", timeout=120, role=args.role, task=args.task, who=who())
    if args.json:
        console.print_json(result)
    else:
        console.say(f"wrote {result['memo']} for {result['role']}: tasks {', '.join(result['tasks']) or '(none)'}")
    return 0
