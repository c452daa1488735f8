"""Joining the Ray cluster (or starting a private one), with one line for a person when it cannot be reached."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from orchestrator.agents.ray import INSTALL_HINT, first_line, ray_installed
from orchestrator.config.ray import ExecutorSettings
from orchestrator.core.errors import ConfigError, ExecutorError

PROBE_WAIT = 5.0  # how long the start-up check waits for the cluster's port to answer


def connect(settings: ExecutorSettings) -> Any:
    """Import Ray and join (or, for ``local-cluster``, start) the cluster; one line for a person if it cannot."""
    if not ray_installed():
        raise ConfigError(f"executor: kind ray needs the Ray package, which is not installed; run `{INSTALL_HINT}`")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    if ray.is_initialized():
        return ray
    problem = _probe(settings.address)
    if problem:
        raise _unreachable(settings, problem)
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING, "configure_logging": True}
    try:
        if settings.address == "local-cluster":
            ray.init(num_cpus=settings.num_cpus, include_dashboard=False, **options)
        else:
            ray.init(address=settings.address, **options)
    except Exception as exc:  # noqa: BLE001 - Ray raises many kinds (ConnectionError, RuntimeError, ValueError)
        raise _unreachable(settings, first_line(exc)) from None
    return ray


def _unreachable(settings: ExecutorSettings, problem: str) -> ExecutorError:
    return ExecutorError(
        f"executor: cannot reach the Ray cluster at {settings.address!r}: {problem}; start one with "
        "`ray start --head` (see docs/operations.md, Running on a cluster) or use `address: local-cluster`"
    )


def _probe(address: str, timeout: float = PROBE_WAIT) -> str | None:
    """Why a ``host:port`` (or ``ray://host:port``) address takes no connection, or None; Ray itself would retry
    an unreachable address for minutes."""
    if address in ("auto", "local-cluster"):
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return "expected auto, local-cluster, host:port or ray://host:port"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__
