"""What the head sends with one attempt: the wrapper's payload, the actor's resources and placement, the log header.

Built from the head's files and settings alone; nothing here imports Ray but the placement strategy, when a retry
prefers the node of its session.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.agents import memo_list
from orchestrator.agents.proc_table import KEY_ENV
from orchestrator.agents.ray.wire import Payload
from orchestrator.agents.sdk.backend import runner_spec, session_header
from orchestrator.agents.sdk.protocol import explain
from orchestrator.agents.spec import LaunchSpec, SpawnError, transcript_path
from orchestrator.config.ray import ExecutorSettings


def payload_of(spec: LaunchSpec, lease: str, root: str, settings: ExecutorSettings, key: str) -> Payload:
    """Everything the wrapper needs for the attempt; ``SpawnError`` when a memo cannot be read."""
    role = spec.role
    memos = {}
    for path in spec.memo_paths:
        try:
            memos[path.name] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SpawnError(f"cannot read {path.name} to send it to the worker: {exc}") from None
    if not memos:
        raise SpawnError("no memo to send to the worker")
    # what differs from the head's own environment: the role's env and the ORCHESTRATOR_* variables
    env = {k: v for k, v in spec.env.items() if os.environ.get(k) != v or k in role.env}
    for name in memo_list.MEMO_KEYS:  # the wrapper names its own copies
        env.pop(name, None)
    env[KEY_ENV] = key  # the project's key (``names``): its agents are told from those of a project at the same path
    sdk: dict[str, Any] = {}
    if role.backend == "sdk":
        sdk = {"backend": "sdk", "sdk_spec": _sdk_spec(spec), "cli_path": role.cli_path}
    return Payload(
        run_id=spec.run_id,
        attempt=spec.attempt,
        lease=lease,
        role=role.name,
        root=root,
        argv=[*role.command, *spec.args],
        prompt=spec.prompt,
        prompt_via=role.prompt_via,
        cwd=_relative_to(spec.cwd, spec.root),
        env=env,
        memos=memos,
        batch=role.batch,
        poll=settings.poll,
        beat=settings.beat,
        lost_after=settings.lost_after,
        reconnect_within=settings.reconnect_within,
        **sdk,
    )


def options_of(spec: LaunchSpec, session_node: str | None) -> dict[str, Any]:
    """The actor's resources and placement for this attempt (``session_node``: the node of the run's last sdk
    attempt, which a resumed session prefers)."""
    res = spec.role.resources
    options: dict[str, Any] = {"num_cpus": res.cpu, "num_gpus": res.gpu}
    if res.custom:
        options["resources"] = dict(res.custom)
    if res.node_labels:
        options["label_selector"] = dict(res.node_labels)
    if spec.resume and session_node and not res.node_labels:
        # the session's files are on the node that ran it: prefer that node (soft: another one if it is gone)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(session_node, soft=True)
    return options


def log_header(spec: LaunchSpec) -> str:
    """The line that opens the attempt's part of the run's log on the head."""
    if spec.role.backend == "sdk":
        return session_header(spec, " (ray)") + "\n"
    return f"\n=== run {spec.run_id} attempt {spec.attempt} (ray): " + " ".join(spec.role.command[:8]) + "\n"


def _sdk_spec(spec: LaunchSpec) -> dict[str, Any]:
    """The runner's spec as the head knows it; the wrapper fills in ``cwd``, ``transcript`` and ``cli_path``."""
    try:
        return runner_spec(spec, None, spec.cwd, transcript_path(spec))
    except ValidationError as exc:
        raise SpawnError(f"cannot describe the run to the sdk runner: {explain(exc, 'the spec')}") from None


def _relative_to(cwd: Path, root: Path) -> str:
    """The agent's folder as the worker joins it to the root: relative when it lies under the root (the worker's
    copy of the project may have another real path), else as it is."""
    try:
        return str(cwd.relative_to(root.resolve()))
    except ValueError:
        return str(cwd)
