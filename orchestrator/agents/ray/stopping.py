"""How the head stops one attempt on the cluster: its wrapper is asked to stop the agent's tree and report it dead;
a wrapper that does not answer has what it left killed by a task on its node (``sweep``), then its actor killed
through Ray. The bounds on waiting for Ray itself are real time; ``stop_slack`` is their sum, which a cancel waits
for beyond the ladder's own grace."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from orchestrator.agents import procs
from orchestrator.agents.handle import Agent, end_turn_first
from orchestrator.agents.ray.agent import RayAttempt
from orchestrator.agents.ray.names import Names
from orchestrator.agents.ray.sweep import SWEEP_WAIT, sweep_report
from orchestrator.config.ray import ExecutorSettings
from orchestrator.core.agent import KillReport, Log

BOARD_WAIT = 5.0  # how long a stop request or a control may take to reach the wrapper's actor
CANCEL_WAIT = 5.0  # after ray.kill of the actor, how long to wait for Ray to say it is gone
END_TOLD_WAIT = 5.0  # after a stop, how long to wait for the attempt's end to be read and told to the loop


def stop_slack(settings: ExecutorSettings) -> float:
    """What a stop may wait for beyond its ladder: each bound of ``AttemptStops`` in turn."""
    return 2 * BOARD_WAIT + procs.KILL_WAIT + settings.poll * 10 + SWEEP_WAIT + CANCEL_WAIT + END_TOLD_WAIT


def ask_stop(attempt: RayAttempt, grace: float) -> Any:
    """Ask the attempt's wrapper to stop the agent's tree (SIGTERM, ``grace``, SIGKILL): Ray's future of the call, or
    None when the actor cannot be reached (the wrapper then fences itself after ``lost_after``)."""
    try:
        return attempt.actor.stop.remote(grace)
    except Exception:  # noqa: BLE001 - any failure of Ray's is "unreachable" here
        return None


class AttemptStops:
    """The stop of the spawner's attempts; ``end`` and ``cancel`` are the spawner's (the attempt's one end, the kill
    of its actor)."""

    def __init__(
        self,
        ray: Any,
        root: str,
        names: Names,
        settings: ExecutorSettings,
        end: Callable[[RayAttempt, int | None, str | None], None],
        cancel: Callable[[RayAttempt], None],
    ) -> None:
        self.ray, self.root, self.names, self.settings = ray, root, names, settings
        self.end, self.cancel = end, cancel

    async def stop(
        self, attempt: RayAttempt, agent: Agent, grace: float, log: Log, interrupt_first: bool
    ) -> KillReport:
        """Stop the attempt's tree (``stop_tree``), then wait (bounded) for its end to be told, as a local stop
        does: the run records the attempt's exit status and figures before the stop's outcome ends it."""
        report = await self.stop_tree(attempt, agent, grace, log, interrupt_first)
        await agent.wait_done(END_TOLD_WAIT)
        return report

    async def stop_tree(
        self, attempt: RayAttempt, agent: Agent, grace: float, log: Log, interrupt_first: bool
    ) -> KillReport:
        """Ask the wrapper to stop the tree and wait for its report; if it is gone, ``ray.kill`` its actor.

        An sdk agent is first asked to end its turn (as locally); if the runner then exits by itself within
        ``grace``, the wrapper's sweep of what it left is the last step."""
        started = time.monotonic()
        if interrupt_first and agent.capabilities.interrupt and not attempt.finished:
            await end_turn_first(agent, grace, log)
            if attempt.finished and attempt.lost is None and attempt.report is None:
                log(f"the session on {attempt.node} ended its turn; the wrapper swept what it left")
                pids = sorted(pid for pid in {attempt.pid, *attempt.exit_pids} if pid is not None)
                return KillReport(pids=pids, seconds=time.monotonic() - started)
        if not attempt.finished and attempt.pump is not None:
            sent = ask_stop(attempt, grace)
            if sent is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(sent, BOARD_WAIT)
            log(f"asked the wrapper on {attempt.node} to stop the agent's tree (SIGTERM, {grace:g}s grace, SIGKILL)")
            bound = grace + procs.KILL_WAIT + self.settings.poll * 10 + BOARD_WAIT
            await asyncio.wait({attempt.pump}, timeout=bound)
        if attempt.report is not None:
            log(
                f"the wrapper on {attempt.node} reported the tree dead: {len(attempt.report.pids)} process(es) "
                f"{attempt.report.pids} in {attempt.report.seconds:.2f}s"
            )
            return attempt.report
        if attempt.finished and attempt.lost is None:
            return KillReport()  # it exited by itself before the stop reached it; the wrapper swept its group
        why = attempt.lost or f"no report within {grace + procs.KILL_WAIT:g}s"
        log(f"the wrapper on {attempt.node} did not report the tree dead ({why}); a task on its node, then ray.kill")
        report = await sweep_report(self.ray, attempt, self.root, self.names.key, log, started)
        self.cancel(attempt)
        if attempt.pump is not None:
            await asyncio.wait({attempt.pump}, timeout=CANCEL_WAIT)
        self.end(attempt, None, why)
        return report
