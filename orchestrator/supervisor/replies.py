"""Replies that wait for a run's end, always answered: with the receipt, or with one line saying how it ended.

A ``cancel`` or ``interrupt`` waits on a future the lifecycle keeps with the run (``Run.waiters``). The
``Announcer`` answers them with the receipt; whatever it could not answer (it raised, or the run was dropped
after a bug) is answered here, so no client waits for an end that already happened. ``within`` puts the
server's deadline on such a wait: past it the answer is a ``DeadlineError`` naming what it still waited for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from orchestrator.config import RoleRun
from orchestrator.control.client import ANSWER_WITHIN
from orchestrator.core.clock import Clock
from orchestrator.core.errors import ControlError, DeadlineError
from orchestrator.core.states import RunState

STOP_SLACK = 10.0  # past twice the grace (an interrupt first, then the ladder): the reaping, a slow machine
LOG = ".orchestrator/orchestrator.log"
_T = TypeVar("_T")


def ended(run: RoleRun, previous: RunState, state: RunState, reason: str | None) -> dict[str, Any]:
    """The plain answer of a run that ended without its receipt: what it was, and how it ended."""
    first = run.memos[0] if run.memos else None
    found = previous.value
    if state is RunState.CANCELLED and run.cancel is not None:
        found = run.cancel.found  # what the cancel found, as the receipt would say
    return {
        "memo": first.name if first else None,
        "memo_id": first.memo_id if first else None,
        "memos": [m.name for m in run.memos],
        "run_id": run.run_id,
        "role": run.role.name,
        "state": state.value,
        "previous_state": found,
        "reason": reason,
        "note": f"ended as {state.value}; its receipt could not be made (see {LOG})",
    }


def settle(run: RoleRun, previous: RunState, state: RunState, reason: str | None) -> None:
    """After ``finish``: every reply the listeners left unanswered gets ``ended`` (the lifecycle then forgets them)."""
    if any(not waiter.done() for waiter in run.waiters):
        answer = ended(run, previous, state, reason)
        for waiter in run.waiters:
            if not waiter.done():
                waiter.set_result(answer)


def refuse(run: RoleRun) -> None:
    """For ``drop`` (``finish`` itself failed): every waiting reply is told the run ended without its end."""
    why = ControlError(
        f"run {run.run_id} ({run.role.name}, {run.label}) ended as dropped: an internal error kept it from ending "
        f"properly (it was {run.state.value}); its memos stay where they are (see {LOG})"
    )
    for waiter in run.waiters:
        if not waiter.done():
            waiter.set_exception(why)
            waiter.exception()  # seen: a waiter nobody awaits any more must not be logged again as a lost error


def stop_deadline(runs: list[RoleRun]) -> float:
    """How long a cancel waits for the runs it stops: twice the grace and some, and what its agent's stop may wait
    for where it runs (a Ray wrapper that does not answer: ``stop_slack``), for the longest; at most
    ``ANSWER_WITHIN``."""
    longest = max((2 * run.role.grace + (run.agent.stop_slack if run.agent else 0.0) for run in runs), default=0.0)
    return min(ANSWER_WITHIN, longest + STOP_SLACK)


async def within(work: Awaitable[_T], seconds: float, clock: Clock, still: Callable[[], str]) -> _T:
    """``work``'s result, or after ``seconds`` of ``clock`` a ``DeadlineError`` whose line is ``still()`` (what it
    still waited for); ``work`` is cancelled then (a waiter cancelled is skipped by whoever answers the rest)."""
    task = asyncio.ensure_future(work)
    limit = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({task, limit}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        _call_off(task)
        raise
    finally:
        limit.cancel()
    if task.done():
        return task.result()
    _call_off(task)
    raise DeadlineError(still())


def _call_off(task: asyncio.Future[Any]) -> None:
    """Cancel work nobody will await: how it ends is retrieved here, so asyncio does not report it as lost."""
    task.cancel()
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
