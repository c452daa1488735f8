"""When a wrapper does not report its agent's tree dead (hung, or its node gone): a task on its node kills the agent.

``ray.kill`` of the wrapper's actor ends the wrapper's worker, not the agent it started in a session of its own, which
used to run on until the next wrapper started on its node and swept it (``wrapper.sweep_orphans``): for a cancel
maybe never, and for an attempt given up for its silence beside its retry on another node. So before the actor is
killed, the head runs that sweep at once as a task pinned to the node (hard affinity, no CPU asked, so a full node
takes it) for the attempt's agents (and any orphan of a dead wrapper of the project there): SIGTERM, then SIGKILL at
once. A node Ray cannot reach, or a task that fails, leaves the agent to the next wrapper there, as before, and the
log says why. A task that answers after ``SWEEP_WAIT`` is left to run: it still kills only what it should.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import TYPE_CHECKING, Any

from orchestrator.agents.ray import first_line
from orchestrator.core.agent import KillReport, Log

if TYPE_CHECKING:  # the task's worker imports this module: it needs none of the head's side
    from orchestrator.agents.ray.agent import RayAttempt

SWEEP_WAIT = 10.0  # seconds for the task to be placed on the node, run and answer


def sweep_attempt(root: str, key: str | None, run_id: int, attempt: int) -> list[int]:
    """On the node: kill the agents of run ``run_id``'s attempt ``attempt`` (and earlier ones) of this project, and
    every orphan of a dead wrapper of it; the pids ended."""
    from orchestrator.agents.ray.wrapper import sweep_orphans

    return sweep_orphans(root, key, run_id, attempt + 1)


@functools.cache
def _task(ray: Any) -> Any:
    """``sweep_attempt`` as one Ray remote function per cluster connection (each new one is exported again)."""
    return ray.remote(sweep_attempt)


async def sweep_node(
    ray: Any, node_id: str | None, root: str, key: str | None, run_id: int, attempt: int
) -> list[int] | str:
    """Run ``sweep_attempt`` on the node ``node_id``: the pids it ended, or why it did not run there in time."""
    if node_id is None:
        return "its node is not known"
    try:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        pinned = NodeAffinitySchedulingStrategy(node_id, soft=False)
        task = _task(ray).options(num_cpus=0, max_retries=0, scheduling_strategy=pinned)
        return list(await asyncio.wait_for(task.remote(root, key, run_id, attempt), SWEEP_WAIT))
    except TimeoutError:
        return f"no answer within {SWEEP_WAIT:g}s"
    except Exception as exc:  # noqa: BLE001 - Ray's errors (a node it knows is dead, a worker that fails), in a line
        return first_line(exc)


async def sweep_report(
    ray: Any, attempt: RayAttempt, root: str, key: str | None, log: Log, started: float | None = None
) -> KillReport:
    """The stop's report from a task on the attempt's node: what it killed, else the agent said left to the next
    wrapper there (a survivor); each said in ``log``. ``started``: when the stop began."""
    spec = attempt.spec
    swept = await sweep_node(ray, attempt.node_id, root, key, spec.run_id, spec.attempt)
    if isinstance(swept, list):
        log(f"a task on {attempt.node} killed what the wrapper left: {swept}")
        return KillReport(pids=swept, seconds=time.monotonic() - (started or time.monotonic()))
    log(
        f"no task could kill what the wrapper left on {attempt.node} ({swept}): the agent (pid {attempt.pid}) is "
        "killed by the next wrapper that runs there"
    )
    pids = [attempt.pid] if attempt.pid else []
    return KillReport(pids=pids, survivors=list(pids))
