"""The ``executor:`` key of ``roles.yaml`` and each role's ``resources:``: where agents run, and what a run needs there.

``executor: {kind: local}`` (the default) runs agents as children of the
orchestrator; ``executor: {kind: ray, address: ...}`` runs each attempt as one
Ray actor on a cluster (``orchestrator.agents.ray``). Nothing here imports Ray.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.core.units import Duration as Seconds
from orchestrator.core.units import Strict


class ExecutorSettings(Strict):
    """Every key under ``executor:``; all have defaults, so the key may be left out."""

    kind: Literal["local", "ray"] = "local"
    #: ``auto`` (a cluster started with ``ray start`` on this machine), ``ray://host:port``, ``host:port``,
    #: or ``local-cluster`` (a private Ray started by the orchestrator, for trying it out)
    address: str = "auto"
    #: CPUs of the private Ray that ``local-cluster`` starts (default: all of this machine's)
    num_cpus: int | None = Field(None, ge=1)
    #: how often the wrapper on a worker looks for a stop request
    poll: Seconds = Field(0.1, gt=0)
    #: how often the wrapper says it is alive when the agent prints nothing
    beat: Seconds = Field(1.0, gt=0)
    #: with no word from a wrapper this long, the head gives the attempt up (and the wrapper, unable to reach the
    #: head as long, kills its agent): the attempt fails and is retried by the role's policy
    lost_after: Seconds = Field(30.0, gt=0)
    #: a wrapper whose head is gone (``up`` stopped or crashed) keeps its agent running this long, then its end
    #: (exit status, result, figures), for the next ``up`` to take back; 0: it kills its agent after ``lost_after``
    reconnect_within: Seconds = Field(600.0, ge=0)
    #: a run that no node can take this long (resources nobody has) fails to start
    start_timeout: Seconds = Field(60.0, gt=0)


class RoleResources(Strict):
    """What one run of a role needs on a Ray node; ignored by ``executor: local``."""

    cpu: float = Field(1.0, ge=0)
    gpu: float = Field(0.0, ge=0)
    #: Ray custom resources, such as ``{role_builder: 1}`` on nodes started with ``--resources '{"role_builder": 2}'``
    custom: dict[str, float] = Field(default_factory=dict)
    #: only nodes whose labels (``ray start --labels k=v``) match all of these
    node_labels: dict[str, str] = Field(default_factory=dict)


class RayKeys(Strict):
    """A role's key for the Ray executor: what one of its runs needs on a node."""

    resources: RoleResources = Field(default_factory=RoleResources)
