"""After the head kills a hung wrapper's actor through Ray: a task on that wrapper's node kills what it left.

``ray.kill`` ends the wrapper's worker, not the agent it started in a session of its own. That agent used to run on
until the next wrapper started on its node and swept it (``wrapper.sweep_orphans``): for a cancel maybe never, and
for an attempt given up for its silence beside its retry on another node. The head now runs the same sweep at once,
as a task pinned to the node (hard affinity, no CPU asked, so a full node takes it), for that attempt's agents only
(and any orphan of a dead wrapper of the project there). A node Ray cannot reach (a partition, a lost node) does not
run it within ``SWEEP_WAIT``: its agent is left to the next wrapper there, as before, and the receipt says so.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from orchestrator.agents.ray.agent import RayAttempt
from orchestrator.core.agent import KillReport, Log

SWEEP_WAIT = 10.0  # seconds for the task to be placed on the node, run and answer


def sweep_attempt(root: str, key: str | None, run_id: int, attempt: int) -> list[int]:
    """On the node: kill the agents of run ``run_id``'s attempt ``attempt`` (and earlier ones) of this project, and
    every orphan of a dead wrapper of it; the pids ended."""
    from orchestrator.agents.ray.wrapper import sweep_orphans

    return sweep_orphans(root, key, run_id, attempt + 1)


async def sweep_node(
    ray: Any, node_id: str | None, root: str, key: str | None, run_id: int, attempt: int
) -> list[int] | None:
    """Run ``sweep_attempt`` on the node ``node_id``: the pids it ended, or None when it did not run there in time
    (no such node now, Ray refused the task, or it did not answer)."""
    if node_id is None:
        return None
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        pinned = NodeAffinitySchedulingStrategy(node_id, soft=False)
        task = ray.remote(sweep_attempt).options(num_cpus=0, max_retries=0, scheduling_strategy=pinned)
        return list(await asyncio.wait_for(task.remote(root, key, run_id, attempt), SWEEP_WAIT))
    except Exception:  # noqa: BLE001 - Ray's errors, a node gone: the next wrapper there sweeps it, as before
        return None


async def sweep_report(
    ray: Any, attempt: RayAttempt, root: str, key: str | None, log: Log, started: float | None = None
) -> KillReport:
    """Once the attempt's actor is killed: the stop's report, from what a task on its node killed, else the agent
    said left to the next wrapper there (a survivor); each said in ``log``. ``started``: when the stop began."""
    spec = attempt.spec
    swept = await sweep_node(ray, attempt.node_id, root, key, spec.run_id, spec.attempt)
    if swept is not None:
        log(f"ray.kill of the wrapper's actor done; a task on {attempt.node} killed what it left: {swept}")
        return KillReport(pids=swept, seconds=time.monotonic() - (started or time.monotonic()))
    log(
        f"ray.kill of the wrapper's actor done; the agent (pid {attempt.pid}) could not be checked and is killed by "
        f"the next wrapper that runs on {attempt.node}"
    )
    pids = [attempt.pid] if attempt.pid else []
    return KillReport(pids=pids, survivors=list(pids))
